// The kernels' element type for an ATen dtype (model/rope.cpp, model/swiglu.cpp); only in builds with the kernels.
#pragma once

#include <ATen/ATen.h>

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

inline bool kernel_supports(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

}  // namespace ft::model
