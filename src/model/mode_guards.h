// RAII scopes for per-thread module and autocast state (LibTorch ships no C++ guard for either; see
// docs/platforms.md): each puts a state in place and restores the previous one on exit, also on exceptions.
#pragma once

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/nn/module.h>

namespace ft::model {

// Autocast on `device_type` set to `enabled` (with `dtype`) for the scope. Entering an enabled scope counts as one
// autocast nesting level, whose end clears autocast's weight-cast cache as Python's `torch.autocast` does.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, at::ScalarType dtype, bool enabled)
      : device_type_(device_type),
        prev_enabled_(at::autocast::is_autocast_enabled(device_type)),
        prev_dtype_(at::autocast::get_autocast_dtype(device_type)),
        nested_(enabled) {
    at::autocast::set_autocast_enabled(device_type_, enabled);
    at::autocast::set_autocast_dtype(device_type_, dtype);
    if (nested_) at::autocast::increment_nesting();
  }
  // Autocast off for the scope (dtype kept).
  static AutocastGuard off(c10::DeviceType device_type) {
    return {device_type, at::autocast::get_autocast_dtype(device_type), false};
  }
  ~AutocastGuard() {
    if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_type_, prev_enabled_);
    at::autocast::set_autocast_dtype(device_type_, prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool prev_enabled_;
  at::ScalarType prev_dtype_;
  bool nested_;
};

// Eval mode (no dropout) for the scope; the module's previous mode after.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(torch::nn::Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalModeGuard() { module_.train(was_training_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

// No cuDNN attention for the scope (generation): cuDNN builds an execution plan for every new key length, which a
// KV cache makes new at each decoding step; flash and memory-efficient attention (SDPA's other kernels) take any
// length as it comes. The switch is LibTorch's process-wide one; generation runs while nothing else runs attention.
class NoCudnnAttentionGuard {
 public:
  NoCudnnAttentionGuard() : was_enabled_(at::globalContext().userEnabledCuDNNSDP()) {
    at::globalContext().setSDPUseCuDNN(false);
  }
  ~NoCudnnAttentionGuard() { at::globalContext().setSDPUseCuDNN(was_enabled_); }
  NoCudnnAttentionGuard(const NoCudnnAttentionGuard&) = delete;
  NoCudnnAttentionGuard& operator=(const NoCudnnAttentionGuard&) = delete;

 private:
  bool was_enabled_;
};

}  // namespace ft::model
