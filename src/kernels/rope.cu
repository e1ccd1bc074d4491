#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/rope.h"

namespace ft::kernels {
namespace {

// The rotation of one pair: y1 = x1 * c1 - x2 * s1, y2 = x2 * c2 + x1 * s2 with s = sign * sin, in F32 and rounded
// once. The intrinsics fix the contraction to the one nvcc chose for the plain expressions (x1 * c1 - x2 * s1 as
// fma(x1, c1, -(x2 * s1)), x2 * c2 + x1 * s2 as fma(x2, c2, x1 * s2)), so every kernel here gives the same bits.
template <class T>
__device__ __forceinline__ void rotate(T x1, T x2, T c1, T c2, T sin1, T sin2, float sign, T& y1, T& y2) {
  const float a = to_f(x1), b = to_f(x2);
  const float s1 = __fmul_rn(sign, to_f(sin1)), s2 = __fmul_rn(sign, to_f(sin2));
  y1 = from_f<T>(__fmaf_rn(a, to_f(c1), -__fmul_rn(b, s1)));
  y2 = from_f<T>(__fmaf_rn(b, to_f(c2), __fmul_rn(a, s2)));
}

// One thread per rotated pair (i, i + D/2) of one head of one row; consecutive threads take consecutive i, so the
// loads of a warp are contiguous. The fallback for shapes and pointers the vectorized kernel does not take.
template <class T>
__global__ void rope_kernel(const T* __restrict__ x, const T* __restrict__ cos, const T* __restrict__ sin,
                            T* __restrict__ y, int64_t x_row_stride, int64_t pairs, int64_t heads, int64_t half,
                            float sign) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= pairs) return;
  const int64_t i = p % half;
  const int64_t nh = p / half;  // row * heads + head
  const int64_t row = nh / heads;
  const int64_t base = nh * 2 * half;
  const int64_t xbase = row * x_row_stride + (nh - row * heads) * 2 * half;
  const int64_t t = row * 2 * half;
  rotate(x[xbase + i], x[xbase + i + half], cos[t + i], cos[t + i + half], sin[t + i], sin[t + i + half], sign,
         y[base + i], y[base + i + half]);
}

// One thread per N consecutive pairs (i .. i + N - 1, with their i + D/2) of one head of one row, with vector loads
// and stores and 32-bit index math; consecutive threads take consecutive i, then heads, then rows.
template <class T, int N>
__global__ void rope_vec_kernel(const T* __restrict__ x, const T* __restrict__ cos, const T* __restrict__ sin,
                                T* __restrict__ y, uint32_t x_row_stride, uint32_t units, uint32_t heads,
                                uint32_t half_units, float sign) {
  using P = Pack<T, N>;
  const uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= units) return;
  const uint32_t nh = u / half_units;  // row * heads + head
  const uint32_t row = nh / heads;
  const uint32_t half = half_units * N;
  const uint32_t i = (u - nh * half_units) * N;
  const uint32_t xb = row * x_row_stride + (nh - row * heads) * 2 * half + i;
  const uint32_t yb = nh * 2 * half + i;
  const uint32_t t = row * 2 * half + i;
  const P x1 = *reinterpret_cast<const P*>(x + xb), x2 = *reinterpret_cast<const P*>(x + xb + half);
  const P c1 = *reinterpret_cast<const P*>(cos + t), c2 = *reinterpret_cast<const P*>(cos + t + half);
  const P s1 = *reinterpret_cast<const P*>(sin + t), s2 = *reinterpret_cast<const P*>(sin + t + half);
  P y1, y2;
#pragma unroll
  for (int k = 0; k < N; ++k) rotate(x1.v[k], x2.v[k], c1.v[k], c2.v[k], s1.v[k], s2.v[k], sign, y1.v[k], y2.v[k]);
  *reinterpret_cast<P*>(y + yb) = y1;
  *reinterpret_cast<P*>(y + yb + half) = y2;
}

constexpr int kThreads = 256;

// Launches rope_vec_kernel<T, BYTES / sizeof(T)> when the shape, stride and pointers allow it; false otherwise.
template <class T, int BYTES>
bool launch_vec(const void* x, int64_t x_row_stride, const void* c, const void* s, void* y, int64_t rows,
                int64_t heads, int64_t half, float sign, cudaStream_t stream) {
  constexpr int N = BYTES / static_cast<int>(sizeof(T));
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % BYTES == 0; };
  if (half % N != 0 || x_row_stride % N != 0 || !aligned(x) || !aligned(c) || !aligned(s) || !aligned(y)) return false;
  // Every element offset (x, y, cos, sin) stays below 2^31.
  const int64_t row_elems = heads * 2 * half;
  if (rows * row_elems > INT32_MAX || (rows - 1) * x_row_stride + row_elems > INT32_MAX) return false;
  const int64_t units = rows * heads * (half / N);
  const auto blocks = static_cast<unsigned>((units + kThreads - 1) / kThreads);
  rope_vec_kernel<T, N><<<blocks, kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(c), static_cast<const T*>(s), static_cast<T*>(y),
      static_cast<uint32_t>(x_row_stride), static_cast<uint32_t>(units), static_cast<uint32_t>(heads),
      static_cast<uint32_t>(half / N), sign);
  return true;
}

template <class T>
void launch(const void* x, int64_t x_row_stride, const void* c, const void* s, void* y, int64_t rows, int64_t heads,
            int64_t half, float sign, cudaStream_t stream) {
  const int64_t pairs = rows * heads * half;
  if (pairs == 0) return;
  if (launch_vec<T, 16>(x, x_row_stride, c, s, y, rows, heads, half, sign, stream) ||
      launch_vec<T, 8>(x, x_row_stride, c, s, y, rows, heads, half, sign, stream))
    return;
  const auto blocks = static_cast<unsigned>((pairs + kThreads - 1) / kThreads);
  rope_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(c),
                                                  static_cast<const T*>(s), static_cast<T*>(y), x_row_stride, pairs,
                                                  heads, half, sign);
}

}  // namespace

void rope(const void* x, int64_t x_row_stride, const void* cos, const void* sin, void* y, int64_t rows, int64_t heads,
          int64_t head_dim, float sin_sign, DType dtype, void* stream) {
  if (head_dim % 2 != 0)
    throw std::runtime_error("rope kernel: head_dim must be even, got " + std::to_string(head_dim));
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t half = head_dim / 2;
  dispatch(dtype, [&](auto zero) {
    launch<decltype(zero)>(x, x_row_stride, cos, sin, y, rows, heads, half, sin_sign, st);
  });
  check_launch("rope kernel");
}

}  // namespace ft::kernels
