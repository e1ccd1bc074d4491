// Device building blocks shared by the kernels: aligned vector loads and stores, block-wide reductions in a fixed
// order (so every run gives the same bits), and the host-side launch check.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ft::kernels {

// V consecutive elements moved as one aligned load or store (16 bytes for 16-bit types at V = 8).
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <class T, int V>
__device__ __forceinline__ Pack<T, V> load(const void* base, int64_t offset) {
  return *reinterpret_cast<const Pack<T, V>*>(static_cast<const T*>(base) + offset);
}
template <class T, int V>
__device__ __forceinline__ void store(void* base, int64_t offset, const Pack<T, V>& p) {
  *reinterpret_cast<Pack<T, V>*>(static_cast<T*>(base) + offset) = p;
}

// Sum over the block (warp shuffles, then the warps' totals in one warp); every thread gets it. blockDim.x is a
// multiple of 32.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_totals[32];
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  float t = lane < static_cast<int>(blockDim.x / 32) ? warp_totals[lane] : 0.0f;
  for (int off = 16; off > 0; off /= 2) t += __shfl_xor_sync(0xffffffffu, t, off);
  __syncthreads();  // warp_totals is reused by the next call
  return t;
}

// A running softmax denominator: s = sum of exp(x - m) over the values seen, m their maximum.
struct MaxSum {
  float m, s;
};

// Symmetric in its arguments up to float addition's commutativity, so every lane of a butterfly gets the same bits.
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

// Adds one value x to a running MaxSum (one exponential).
__device__ __forceinline__ MaxSum add_value(MaxSum a, float x) {
  if (x > a.m) return {x, a.s * __expf(a.m - x) + 1.0f};
  return {a.m, a.s + __expf(x - a.m)};
}

// The block's MaxSum (warp butterflies, then the warps' results in one butterfly); every thread gets it.
// blockDim.x is a multiple of 32.
__device__ __forceinline__ MaxSum block_max_sum(MaxSum v) {
  __shared__ float warp_m[32], warp_s[32];
  for (int off = 16; off > 0; off /= 2) {
    v = combine(v, MaxSum{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)});
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_m[warp] = v.m;
    warp_s[warp] = v.s;
  }
  __syncthreads();
  MaxSum t = lane < static_cast<int>(blockDim.x / 32) ? MaxSum{warp_m[lane], warp_s[lane]} : MaxSum{-INFINITY, 0.0f};
  for (int off = 16; off > 0; off /= 2) {
    t = combine(t, MaxSum{__shfl_xor_sync(0xffffffffu, t.m, off), __shfl_xor_sync(0xffffffffu, t.s, off)});
  }
  __syncthreads();  // warp_m / warp_s are reused by the next call
  return t;
}

// The block's maximum (of non-negative values); every thread gets it. blockDim.x is a multiple of 32.
__device__ __forceinline__ float block_max(float v) {
  __shared__ float warp_max[32];
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  float t = lane < static_cast<int>(blockDim.x / 32) ? warp_max[lane] : 0.0f;
  for (int off = 16; off > 0; off /= 2) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, off));
  __syncthreads();
  return t;
}

// A non-negative float's bits order as the float does, so an integer atomicMax is a float max (amax reductions).
__device__ __forceinline__ void atomic_max_nonneg(float* target, float v) {
  atomicMax(reinterpret_cast<int*>(target), __float_as_int(v));
}

// Whether the device pointer p allows vector moves of `bytes` (a power of two) at offsets that are multiples of it.
inline bool aligned_to(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Throws with the CUDA error of the last launch, if any.
inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + " launch failed: " + cudaGetErrorString(err));
}

}  // namespace ft::kernels
