// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_(foreach=True), with no host sync, left to
// the optimizer: AdamW divides each gradient by the clipping divisor as it reads it (its grad_scale). That saves one
// read of every gradient: clipping read and wrote each, and PyTorch's fused step, given a grad_scale, writes the
// divided gradient back.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace ft::optim {

// The global L2 norm of `grads` (any dtypes/devices; undefined entries skipped) as clip_grad_norm_ returns it: F32 []
// on the first grad's device, per-(device, dtype) norms via at::_foreach_norm, zero when there is no grad. A
// non-finite norm is returned as is (the caller's NaN policy or loss scaler handles it); nothing throws or syncs.
// `divisor` F32 [] = max(1, (norm + 1e-6) / max_norm), undefined when max_norm <= 0 or there is no grad: dividing
// the gradients by it is clip_grad_norm_'s multiply by min(1, max_norm / (norm + 1e-6)), to within an F32 rounding
// and exactly while the norm is under max_norm.
struct ClipDivisor {
  at::Tensor norm;
  at::Tensor divisor;
};
ClipDivisor clip_divisor(const std::vector<at::Tensor>& grads, double max_norm);

}  // namespace ft::optim
