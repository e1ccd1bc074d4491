// The glue between ATen tensors and the plain CUDA kernels (kernels/): element types and streams; only in builds
// with the kernels.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>

#include <string>

#include "kernels/dtype.h"
#include "util/error.h"

namespace ft::model {

inline kernels::DType kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return kernels::DType::kF32;
    case at::kBFloat16:
      return kernels::DType::kBF16;
    case at::kHalf:
      return kernels::DType::kF16;
    default:
      throw Error(std::string("fused kernel: unsupported dtype ") + c10::toString(t));
  }
}

// The current CUDA stream of t's device, as the kernels take it.
inline void* stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

inline bool kernel_supports(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

}  // namespace ft::model
