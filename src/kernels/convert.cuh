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

// p += update with Kahan summation (the optimizers' compensated steps): y = update + c; p' = round(p + y);
// c' = round(y - (p' - p)). What rounding p' drops stays in c and joins the next update. pf is p in F32.
template <class T>
__device__ __forceinline__ void add_compensated(T& p, T& c, float pf, float update) {
  const float y = update + to_f(c);
  const T rounded = from_f<T>(pf + y);
  c = from_f<T>(y - (to_f(rounded) - pf));
  p = rounded;
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
