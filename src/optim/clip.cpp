#include "optim/clip.h"

#include <ATen/ops/_foreach_norm.h>
#include <c10/core/GradMode.h>

#include <map>

#include "optim/tensor_groups.h"

namespace ft::optim {
namespace {

using Buckets = std::map<GroupKey, std::vector<at::Tensor>>;  // grads by device and dtype

Buckets bucket(const std::vector<at::Tensor>& grads) {
  Buckets out;
  for (const auto& [key, indices] : group_by_device(grads, /*by_dtype=*/true)) out[key] = pick(grads, indices);
  return out;
}

at::Tensor norm_of(const Buckets& buckets) {
  if (buckets.empty()) return at::zeros({}, at::kFloat);
  const at::Device first = buckets.begin()->second.front().device();
  std::vector<at::Tensor> norms;
  for (const auto& [key, list] : buckets) {
    // Float grads keep torch's exact arithmetic; reduced-precision grads are reduced in F32.
    const bool f32 = list.front().scalar_type() == at::kFloat;
    auto per = f32 ? at::_foreach_norm(list, 2) : at::_foreach_norm(list, 2, at::kFloat);
    for (auto& n : per) norms.push_back(n.to(first, /*non_blocking=*/true));
  }
  return at::linalg_vector_norm(at::stack(norms), 2);
}

}  // namespace

ClipDivisor clip_divisor(const std::vector<at::Tensor>& grads, double max_norm) {
  c10::NoGradGuard no_grad;
  const Buckets buckets = bucket(grads);
  ClipDivisor out{norm_of(buckets), at::Tensor()};
  if (max_norm > 0.0 && !buckets.empty()) out.divisor = at::clamp_min((out.norm + 1e-6) / max_norm, 1.0);  // F32 []
  return out;
}

}  // namespace ft::optim
