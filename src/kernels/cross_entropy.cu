#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/cross_entropy.h"

namespace ft::kernels {
namespace {

constexpr int kBlock = 512;

// One block per row; thread t reads the vectors t, t + B, ... of V columns each.
template <class T, int V>
__global__ void __launch_bounds__(kBlock) cross_entropy_kernel(CrossEntropyRows a) {
  const int64_t row = blockIdx.x;
  T* x = static_cast<T*>(a.logits) + row * a.ld;
  const int64_t vecs = a.cols / V;
  const int64_t label = a.labels[row];
  if (label == a.ignore_index) {
    if (threadIdx.x == 0) a.loss[row] = 0.0f;
    if (!a.grad) return;
    Pack<T, V> zero;
#pragma unroll
    for (int i = 0; i < V; ++i) zero.v[i] = from_f<T>(0.0f);
    for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) *reinterpret_cast<Pack<T, V>*>(x + j * V) = zero;
    return;
  }
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
    const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(x + j * V);
    float f[V];
    float vmax = -INFINITY;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      f[i] = to_f(p.v[i]);
      vmax = fmaxf(vmax, f[i]);
    }
    const float m = fmaxf(acc.m, vmax);
    if (m == -INFINITY) continue;
    float s = acc.s * __expf(acc.m - m);
#pragma unroll
    for (int i = 0; i < V; ++i) s += __expf(f[i] - m);
    acc = {m, s};
  }
  const MaxSum total = block_max_sum(acc);
  const float lse = total.m + __logf(total.s);
  const bool in_range = label >= 0 && label < a.cols;
  const float x_label = in_range ? to_f(x[label]) : NAN;  // read by every thread before any gradient is written
  __syncthreads();
  if (threadIdx.x == 0) a.loss[row] = lse - x_label;
  if (!a.grad) return;
  for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
    const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(x + j * V);
    Pack<T, V> g;
#pragma unroll
    for (int i = 0; i < V; ++i) g.v[i] = from_f<T>(__expf(to_f(p.v[i]) - lse));
    *reinterpret_cast<Pack<T, V>*>(x + j * V) = g;
  }
  __syncthreads();  // the label's column was written as a plain softmax entry above
  if (threadIdx.x == 0 && in_range) x[label] = from_f<T>(__expf(x_label - lse) - 1.0f);
}

template <class T>
void launch(const CrossEntropyRows& a, cudaStream_t stream) {
  constexpr int kWide = 16 / sizeof(T);
  const bool aligned = reinterpret_cast<uintptr_t>(a.logits) % 16 == 0 && a.ld % kWide == 0 && a.cols % kWide == 0;
  const auto grid = static_cast<unsigned>(a.rows);
  if (aligned) {
    cross_entropy_kernel<T, kWide><<<grid, kBlock, 0, stream>>>(a);
  } else {
    cross_entropy_kernel<T, 1><<<grid, kBlock, 0, stream>>>(a);
  }
}

}  // namespace

void cross_entropy_rows(const CrossEntropyRows& a, DType dtype, void* stream) {
  if (a.rows == 0) return;
  if (a.cols <= 0 || a.ld < a.cols) throw std::runtime_error("cross_entropy_rows: bad logits shape");
  if (a.rows > 0x7fffffff) throw std::runtime_error("cross_entropy_rows: more than 2^31 - 1 rows");
  dispatch(dtype, [&](auto z) { launch<decltype(z)>(a, static_cast<cudaStream_t>(stream)); });
  check_launch("cross_entropy_rows kernel");
}

}  // namespace ft::kernels
