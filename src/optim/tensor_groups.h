// Grouping for the foreach kernels (_foreach_norm, _fused_adamw_, _amp_foreach_non_finite_check_and_unscale_), which
// take lists of tensors on one device and, for most, of one dtype.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <map>
#include <tuple>
#include <vector>

namespace ft::optim {

using GroupKey = std::tuple<int, int, int>;  // device type, device index, dtype (-1 when not grouped by dtype)

// Indices of the defined tensors of `tensors` by device (and dtype when `by_dtype`), groups in a fixed order.
inline std::map<GroupKey, std::vector<size_t>> group_by_device(const std::vector<at::Tensor>& tensors, bool by_dtype) {
  std::map<GroupKey, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined()) continue;
    groups[{static_cast<int>(t.device().type()), static_cast<int>(t.device().index()),
            by_dtype ? static_cast<int>(t.scalar_type()) : -1}]
        .push_back(i);
  }
  return groups;
}

// tensors[i] for each i of `indices`.
inline std::vector<at::Tensor> pick(const std::vector<at::Tensor>& tensors, const std::vector<size_t>& indices) {
  std::vector<at::Tensor> out;
  out.reserve(indices.size());
  for (size_t i : indices) out.push_back(tensors[i]);
  return out;
}

}  // namespace ft::optim
