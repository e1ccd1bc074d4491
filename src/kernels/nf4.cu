#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/nf4.h"

namespace ft::kernels {
namespace {

// The block's absmax. __fmul_rn / __fadd_rn: two roundings as the ATen path, never contracted into an FMA (the
// kernels build with --use_fast_math).
__device__ __forceinline__ float block_absmax(const Nf4View& w, const float* map, int64_t block) {
  if (w.absmax != nullptr) return w.absmax[block];
  const float scaled = __fmul_rn(map[w.absmax_codes[block]], w.absmax2[block / w.blocksize2]);
  return __fadd_rn(scaled, *w.offset);
}

// One thread per 8 elements (4 packed bytes), which never straddle a block (blocksize is a multiple of 8).
// blockDim.x >= 256.
template <class T>
__global__ void dequantize_kernel(Nf4View w, Nf4Tables tables, T* out) {
  __shared__ float dynamic[256];
  __shared__ float code[16];
  if (threadIdx.x < 256) dynamic[threadIdx.x] = tables.dynamic_map[threadIdx.x];
  if (threadIdx.x < 16) code[threadIdx.x] = tables.code[threadIdx.x];
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // the group of 8
  if (i * 8 >= w.n) return;
  const uint32_t bytes = *reinterpret_cast<const uint32_t*>(w.packed + i * 4);
  const float absmax = block_absmax(w, dynamic, (i * 8) / w.blocksize);
  Pack<T, 8> y;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uint32_t byte = (bytes >> (8 * b)) & 0xFFu;  // little-endian: byte b of the group
    y.v[2 * b] = from_f<T>(__fmul_rn(code[byte >> 4], absmax));
    y.v[2 * b + 1] = from_f<T>(__fmul_rn(code[byte & 0xFu], absmax));
  }
  *reinterpret_cast<Pack<T, 8>*>(out + i * 8) = y;
}

}  // namespace

void nf4_dequantize(const Nf4View& w, const Nf4Tables& tables, void* out, DType dtype, void* stream) {
  const int64_t groups = w.n / 8;
  if (groups == 0) return;
  constexpr int kBlock = 256;
  const auto grid = static_cast<unsigned>((groups + kBlock - 1) / kBlock);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    dequantize_kernel<T><<<grid, kBlock, 0, static_cast<cudaStream_t>(stream)>>>(w, tables, static_cast<T*>(out));
  });
  check_launch("nf4_dequantize");
}

}  // namespace ft::kernels
