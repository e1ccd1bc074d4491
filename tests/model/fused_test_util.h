// Helpers of the fused-kernel tests (fused_ops_test.cpp, fused_norm_test.cpp, fused_dropout_test.cpp).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "model/kernel_policy.h"

namespace ft::test {

// The kernels of a run on CUDA with train.fused_kernels = `fused` (bf16 compute, as the tests' autocast).
inline model::KernelPolicy cuda_policy(bool fused) {
  return model::KernelPolicy::resolve(fused, at::Device(at::kCUDA), at::kBFloat16);
}

// How many autograd nodes behind t have `name` in their name (which fused Functions a forward went through).
inline int count_nodes(const at::Tensor& t, const std::string& name) {
  std::vector<torch::autograd::Node*> stack;
  std::unordered_set<torch::autograd::Node*> seen;
  if (t.grad_fn()) stack.push_back(t.grad_fn().get());
  int n = 0;
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (node->name().find(name) != std::string::npos) ++n;
    for (const auto& edge : node->next_edges()) {
      if (edge.function) stack.push_back(edge.function.get());
    }
  }
  return n;
}

// max |a - b| / max |b|, in double.
inline double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() /
         std::max(1e-30, b.to(at::kDouble).abs().max().item<double>());
}

}  // namespace ft::test
