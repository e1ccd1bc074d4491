// Save/restore of the random generators for exact resume: the default CPU generator and, where CUDA is
// available, every device's default CUDA generator, as U8 [n] state tensors keyed "cpu", "cuda:0", "cuda:1", ...
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>

namespace ft::ckpt {

// Copies of the current generator states (U8 [n] on the CPU each).
std::map<std::string, at::Tensor> capture_rng_states();

// Restores states captured by capture_rng_states(). "cpu" is required (ft::Error naming the key otherwise);
// CUDA states for devices that are not visible now are skipped with a warning, visible devices without a
// saved state keep their current state with a warning.
void restore_rng_states(const std::map<std::string, at::Tensor>& states);

}  // namespace ft::ckpt
