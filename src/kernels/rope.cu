#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/convert.cuh"
#include "kernels/rope.h"

namespace ft::kernels {
namespace {

// One thread per rotated pair (i, i + D/2) of one head of one row; consecutive threads take consecutive i, so the
// loads of a warp are contiguous.
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
  const float x1 = to_f(x[xbase + i]), x2 = to_f(x[xbase + i + half]);
  const float c1 = to_f(cos[t + i]), c2 = to_f(cos[t + i + half]);
  const float s1 = sign * to_f(sin[t + i]), s2 = sign * to_f(sin[t + i + half]);
  y[base + i] = from_f<T>(x1 * c1 - x2 * s1);
  y[base + i + half] = from_f<T>(x2 * c2 + x1 * s2);
}

template <class T>
void launch(const void* x, int64_t x_row_stride, const void* c, const void* s, void* y, int64_t rows, int64_t heads,
            int64_t half, float sign, cudaStream_t stream) {
  const int64_t pairs = rows * heads * half;
  if (pairs == 0) return;
  constexpr int kThreads = 256;
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
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("rope kernel launch failed: ") + cudaGetErrorString(err));
}

}  // namespace ft::kernels
