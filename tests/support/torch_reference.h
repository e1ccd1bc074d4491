// Runs tests/support/ref/torch_ref.py (PyTorch / transformers references of optimizers, schedules, loss scaling,
// clipping and TensorBoard files) and converts tensors to and from JSON.
#pragma once

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ft::test {

// Runs `torch_ref.py mode` on `input`; fails the test (ADD_FAILURE) and returns null when Python fails.
nlohmann::json run_reference(const std::string& mode, const nlohmann::json& input);

// F32 tensor -> nested lists of doubles (exact); and back.
nlohmann::json to_json(const at::Tensor& t);
at::Tensor from_json(const nlohmann::json& j);  // F32, shape from the nesting

// max |a - b| / max(|b|, 1e-6) over all elements.
double max_rel_diff(const at::Tensor& a, const at::Tensor& b);

}  // namespace ft::test
