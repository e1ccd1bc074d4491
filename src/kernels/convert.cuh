// Device helpers shared by the kernels: loads and stores through F32, and the dispatch from DType to element type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/dtype.h"

namespace ft::kernels {

template <class T>
__device__ __forceinline__ float to_f(T v);
template <>
__device__ __forceinline__ float to_f(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_f(__half v) {
  return __half2float(v);
}

template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half from_f(float v) {
  return __float2half(v);
}

// Calls f(T{}) with T the element type of `dtype`.
template <class F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      f(float{});
      break;
    case DType::kBF16:
      f(__nv_bfloat16{});
      break;
    case DType::kF16:
      f(__half{});
      break;
  }
}

}  // namespace ft::kernels
