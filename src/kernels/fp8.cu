#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/fp8.h"

namespace ft::kernels {
namespace {

constexpr float kE4m3Max = 448.0f;

// amax / 448 as ATen's CUDA kernel divides a tensor of T by a scalar: times the F32 reciprocal of the scalar, in F32,
// rounded once to T.
template <class T>
__device__ __forceinline__ float scale_of(float amax, bool in_f32) {
  const float s = __fmul_rn(amax, 1.0f / kE4m3Max);
  return in_f32 ? s : to_f<T>(from_f<T>(s));
}

// One thread block per row, V elements per access (16-byte loads where the row allows): the row's amax, then its
// codes (the second read hits L2). v = x, or x * col_scale in F32.
template <class T, int V>
__global__ void quantize_rows_kernel(const T* x, const float* col_scale, int64_t cols, uint8_t* codes, float* scale) {
  const T* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  uint8_t* out = codes + static_cast<int64_t>(blockIdx.x) * cols;
  auto values = [&](int64_t c, float(&v)[V]) {
    const Pack<T, V> p = load<T, V>(row, c);
    for (int k = 0; k < V; ++k) v[k] = to_f<T>(p.v[k]);
    if (col_scale != nullptr) {
      const Pack<float, V> s = load<float, V>(col_scale, c);
      for (int k = 0; k < V; ++k) v[k] = __fmul_rn(v[k], s.v[k]);
    }
  };
  float amax = 0.0f;
  for (int64_t c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
    float v[V];
    values(c, v);
    for (int k = 0; k < V; ++k) amax = fmaxf(amax, fabsf(v[k]));
  }
  amax = block_max(amax);
  const float s = amax > 0.0f ? scale_of<T>(amax, col_scale != nullptr) : 1.0f;
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
  for (int64_t c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
    float v[V];
    values(c, v);
    Pack<uint8_t, V> q;
    for (int k = 0; k < V; ++k) {
      q.v[k] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(v[k], s), __NV_SATFINITE, __NV_E4M3));
    }
    store<uint8_t, V>(out, c, q);
  }
}

// 64 x 64 tiles through shared memory; each of the 16 x 16 threads moves 4 bytes at a time.
constexpr int kTile = 64;

__global__ void transpose_bytes_kernel(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int i = 0; i < kTile; i += 16) {
    const int64_t r = r0 + ty + i, c = c0 + tx * 4;
    if (r < rows && c < cols) {
      const uchar4 v = *reinterpret_cast<const uchar4*>(in + r * cols + c);
      tile[ty + i][tx * 4] = v.x;
      tile[ty + i][tx * 4 + 1] = v.y;
      tile[ty + i][tx * 4 + 2] = v.z;
      tile[ty + i][tx * 4 + 3] = v.w;
    }
  }
  __syncthreads();
  for (int i = 0; i < kTile; i += 16) {
    const int64_t c = c0 + ty + i, r = r0 + tx * 4;  // out row c, out columns r .. r + 3
    if (c < cols && r < rows) {
      const uchar4 v = make_uchar4(tile[tx * 4][ty + i], tile[tx * 4 + 1][ty + i], tile[tx * 4 + 2][ty + i],
                                   tile[tx * 4 + 3][ty + i]);
      *reinterpret_cast<uchar4*>(out + c * rows + r) = v;
    }
  }
}

}  // namespace

void fp8_quantize_rows(const void* x, DType dtype, const float* col_scale, int64_t rows, int64_t cols, uint8_t* codes,
                       float* scale, void* stream) {
  if (rows == 0 || cols == 0) return;
  const int threads = cols >= 4096 ? 512 : 256;
  const auto st = static_cast<cudaStream_t>(stream);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    constexpr int V = 16 / sizeof(T);
    // Whole 16-byte vectors when every row starts aligned (x, codes and col_scale alike), else one element at a time.
    const bool vectors = cols % V == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(codes) % V == 0 &&
                         reinterpret_cast<uintptr_t>(col_scale) % (V * sizeof(float)) == 0;
    const auto* xt = static_cast<const T*>(x);
    if (vectors) {
      quantize_rows_kernel<T, V><<<static_cast<unsigned>(rows), threads, 0, st>>>(xt, col_scale, cols, codes, scale);
    } else {
      quantize_rows_kernel<T, 1><<<static_cast<unsigned>(rows), threads, 0, st>>>(xt, col_scale, cols, codes, scale);
    }
  });
  check_launch("fp8_quantize_rows");
}

void transpose_bytes(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out, void* stream) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  transpose_bytes_kernel<<<grid, dim3(16, 16), 0, static_cast<cudaStream_t>(stream)>>>(in, rows, cols, out);
  check_launch("transpose_bytes");
}

}  // namespace ft::kernels
