// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_(foreach=True), with no host sync.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace ft::optim {

// The global L2 norm of `grads` (any dtypes/devices; undefined entries skipped), F32 [] on the first grad's
// device. Per-(device, dtype) norms via at::_foreach_norm. Zero when there is no grad.
at::Tensor total_grad_norm(const std::vector<at::Tensor>& grads);

// Scales `grads` in place by min(1, max_norm / (norm + 1e-6)) and returns the norm before clipping
// (F32 []). max_norm <= 0 only measures. A non-finite norm is returned as is (grads then become non-finite,
// which a loss scaler or the caller's NaN policy handles); nothing throws and nothing syncs.
at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& grads, double max_norm);

}  // namespace ft::optim
