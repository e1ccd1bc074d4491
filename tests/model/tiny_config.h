// The tiny from-scratch model the model suites build: vocab 50, hidden 32, 2 layers, 4 heads (2 kv).
#pragma once

#include <stdexcept>
#include <string>

#include "config/config.h"

namespace ft::test {

inline ModelConfig tiny_model_config(const std::string& architecture) {
  ModelConfig cfg;
  const auto family = parse_setting<ModelFamily>(architecture);
  if (!family) throw std::invalid_argument("tiny_model_config: no model family '" + architecture + "'");
  cfg.architecture = *family;
  cfg.vocab_size = 50;
  cfg.hidden_size = 32;
  cfg.intermediate_size = 48;
  cfg.num_layers = 2;
  cfg.num_heads = 4;
  cfg.num_kv_heads = 2;
  return cfg;
}

}  // namespace ft::test
