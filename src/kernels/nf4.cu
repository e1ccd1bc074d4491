#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/nf4.h"

namespace ft::kernels {
namespace {

constexpr float kE4m3Max = 448.0f;

// The lookup tables in shared memory, filled by the first 256 threads (blockDim.x >= 256).
struct SharedTables {
  float dynamic[256];
  float code[16];
};

__device__ __forceinline__ void fill(SharedTables& shared, const Nf4Tables& tables) {
  if (threadIdx.x < 256) shared.dynamic[threadIdx.x] = tables.dynamic_map[threadIdx.x];
  if (threadIdx.x < 16) shared.code[threadIdx.x] = tables.code[threadIdx.x];
  __syncthreads();
}

// The block's absmax. __fmul_rn / __fadd_rn: two roundings as the ATen path, never contracted into an FMA (the
// kernels build with --use_fast_math).
__device__ __forceinline__ float block_absmax(const Nf4View& w, const float* map, int64_t block) {
  if (w.absmax != nullptr) return w.absmax[block];
  const float scaled = __fmul_rn(map[w.absmax_codes[block]], w.absmax2[block / w.blocksize2]);
  return __fadd_rn(scaled, *w.offset);
}

// The F32 values of the 8 elements of group i (4 packed bytes), which never straddle a block (blocksize is a
// multiple of 8).
__device__ __forceinline__ void group_values(const Nf4View& w, const SharedTables& t, int64_t i, float (&v)[8]) {
  const uint32_t bytes = *reinterpret_cast<const uint32_t*>(w.packed + i * 4);
  const float absmax = block_absmax(w, t.dynamic, (i * 8) / w.blocksize);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uint32_t byte = (bytes >> (8 * b)) & 0xFFu;  // little-endian: byte b of the group
    v[2 * b] = __fmul_rn(t.code[byte >> 4], absmax);
    v[2 * b + 1] = __fmul_rn(t.code[byte & 0xFu], absmax);
  }
}

__device__ __forceinline__ uint8_t e4m3(float v, float scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(v, scale), __NV_SATFINITE, __NV_E4M3));
}

// One thread per group of 8 elements.
template <class T>
__global__ void dequantize_kernel(Nf4View w, Nf4Tables tables, T* out) {
  __shared__ SharedTables t;
  fill(t, tables);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // the group of 8
  if (i * 8 >= w.n) return;
  float v[8];
  group_values(w, t, i, v);
  Pack<T, 8> y;
#pragma unroll
  for (int k = 0; k < 8; ++k) y.v[k] = from_f<T>(v[k]);
  *reinterpret_cast<Pack<T, 8>*>(out + i * 8) = y;
}

// One thread block per row: the row's amax, then its codes (the second read of the packed row hits L2).
__global__ void to_fp8_rows_kernel(Nf4View w, Nf4Tables tables, int64_t cols, uint8_t* codes, float* scale) {
  __shared__ SharedTables t;
  fill(t, tables);
  const int64_t groups = cols / 8, first = static_cast<int64_t>(blockIdx.x) * groups;
  float amax = 0.0f;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    float v[8];
    group_values(w, t, first + g, v);
#pragma unroll
    for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(v[k]));
  }
  amax = block_max(amax);
  const float s = amax > 0.0f ? __fmul_rn(amax, 1.0f / kE4m3Max) : 1.0f;
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
  uint8_t* out = codes + first * 8;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    float v[8];
    group_values(w, t, first + g, v);
    Pack<uint8_t, 8> q;
#pragma unroll
    for (int k = 0; k < 8; ++k) q.v[k] = e4m3(v[k], s);
    store<uint8_t, 8>(out, g * 8, q);
  }
}

// 64 x 64 tiles through shared memory, 256 threads: each converts two groups of 8 of a tile row, then writes 4
// bytes of the transposed tile at a time.
constexpr int kTile = 64;

__global__ void to_fp8_transposed_kernel(Nf4View w, Nf4Tables tables, int64_t rows, int64_t cols, const float* scale,
                                         uint8_t* codes_t, int64_t ld) {
  __shared__ SharedTables t;
  __shared__ uint8_t tile[kTile][kTile + 4];
  fill(t, tables);
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int j = threadIdx.x; j < kTile * kTile / 8; j += blockDim.x) {
    const int tr = j / (kTile / 8), tc = (j % (kTile / 8)) * 8;
    const int64_t r = r0 + tr, c = c0 + tc;
    if (r >= rows || c >= cols) continue;
    float v[8];
    group_values(w, t, (r * cols + c) / 8, v);
    const float s = scale[r];
#pragma unroll
    for (int k = 0; k < 8; ++k) tile[tr][tc + k] = e4m3(v[k], s);
  }
  __syncthreads();
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int i = 0; i < kTile; i += 16) {
    const int64_t c = c0 + ty + i, r = r0 + tx * 4;  // out row c, out columns r .. r + 3
    if (c < cols && r < rows) {
      const uchar4 v = make_uchar4(tile[tx * 4][ty + i], tile[tx * 4 + 1][ty + i], tile[tx * 4 + 2][ty + i],
                                   tile[tx * 4 + 3][ty + i]);
      *reinterpret_cast<uchar4*>(codes_t + c * ld + r) = v;
    }
  }
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

void nf4_to_fp8_rows(const Nf4View& w, const Nf4Tables& tables, int64_t rows, int64_t cols, uint8_t* codes,
                     float* scale, void* stream) {
  if (rows == 0 || cols == 0) return;
  to_fp8_rows_kernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(w, tables, cols, codes,
                                                                                                 scale);
  check_launch("nf4_to_fp8_rows");
}

void nf4_to_fp8_transposed(const Nf4View& w, const Nf4Tables& tables, int64_t rows, int64_t cols, const float* scale,
                           uint8_t* codes_t, int64_t ld, void* stream) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  to_fp8_transposed_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(w, tables, rows, cols, scale, codes_t,
                                                                                ld);
  check_launch("nf4_to_fp8_transposed");
}

}  // namespace ft::kernels
