#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/fp8_cast.h"

namespace ft::kernels {
namespace {

using bf16 = __nv_bfloat16;

// torchao's amax_to_scale: max / max(amax, 1e-12) in F64, rounded to F32; `pow2` keeps its exponent only.
__device__ __forceinline__ float scale_of(float amax, Fp8Code code, bool pow2) {
  const double max = code == Fp8Code::kE4m3 ? 448.0 : 57344.0;
  const float s = static_cast<float>(max / fmax(static_cast<double>(amax), 1e-12));
  return pow2 ? __int_as_float(__float_as_int(s) & 0x7f800000) : s;
}

__device__ __forceinline__ uint8_t code_of(float v, float scale, Fp8Code code) {
  return static_cast<uint8_t>(
      __nv_cvt_float_to_fp8(__fmul_rn(v, scale), __NV_SATFINITE, code == Fp8Code::kE4m3 ? __NV_E4M3 : __NV_E5M2));
}

// Grid-stride over groups of V elements (16 bytes of T), whole groups as one load (x 16-byte aligned), four of them
// per thread in flight (the loads issue before the first max waits on one); the last partial group element by element.
template <class T>
__global__ void tensor_amax_kernel(const T* x, int64_t n, float* amax) {
  constexpr int V = 16 / sizeof(T);
  float m = 0.0f;
  const int64_t groups = (n + V - 1) / V, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (const int64_t whole = n / V; g + 3 * stride < whole; g += 4 * stride) {
    Pack<T, V> p[4];
    for (int u = 0; u < 4; ++u) p[u] = load<T, V>(x, (g + u * stride) * V);
    for (int u = 0; u < 4; ++u) {
      for (int k = 0; k < V; ++k) m = fmaxf(m, fabsf(to_f(p[u].v[k])));
    }
  }
  for (; g < groups; g += stride) {
    if ((g + 1) * V <= n) {
      const auto p = load<T, V>(x, g * V);
      for (int k = 0; k < V; ++k) m = fmaxf(m, fabsf(to_f(p.v[k])));
    } else {
      for (int64_t i = g * V; i < n; ++i) m = fmaxf(m, fabsf(to_f(x[i])));
    }
  }
  m = block_max(m);
  if (threadIdx.x == 0) atomic_max_nonneg(amax, m);
}

// One block per row: the row's amax, then its codes (the second read hits L2). T: BF16 or F32.
template <class T, int V>
__global__ void rows_cast_kernel(const T* x, int64_t cols, Fp8Code code, uint8_t* codes, float* inverse) {
  const T* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  uint8_t* out = codes + static_cast<int64_t>(blockIdx.x) * cols;
  float m = 0.0f;
  for (int64_t c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
    const auto p = load<T, V>(row, c);
    for (int k = 0; k < V; ++k) m = fmaxf(m, fabsf(to_f(p.v[k])));
  }
  const float s = scale_of(block_max(m), code, true);
  if (threadIdx.x == 0) inverse[blockIdx.x] = __frcp_rn(s);
  for (int64_t c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
    const auto p = load<T, V>(row, c);
    Pack<uint8_t, V> q;
    for (int k = 0; k < V; ++k) q.v[k] = code_of(to_f(p.v[k]), s, code);
    store<uint8_t, V>(out, c, q);
  }
}

// Column amax: each thread keeps two adjacent columns' maxima over a slab of kSlab rows (a warp reads 128
// consecutive bytes of a row), then one atomic per column and thread.
constexpr int kSlab = 128;

template <class T>
__global__ void columns_amax_kernel(const T* x, int64_t rows, int64_t cols, float* amax) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 2;
  if (c >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kSlab;
  float m0 = 0.0f, m1 = 0.0f;
  for (int64_t r = r0; r < rows && r < r0 + kSlab; ++r) {
    const auto v = load<T, 2>(x, r * cols + c);
    m0 = fmaxf(m0, fabsf(to_f(v.v[0])));
    m1 = fmaxf(m1, fabsf(to_f(v.v[1])));
  }
  atomic_max_nonneg(amax + c, m0);
  atomic_max_nonneg(amax + c + 1, m1);
}

// 64 x 64 tiles through shared memory: a tile of x [rows, cols] in, its codes out transposed, scaled per column.
constexpr int kTile = 64;

template <class T>
__global__ void columns_cast_kernel(const T* x, int64_t rows, int64_t cols, Fp8Code code, const float* amax,
                                    uint8_t* codes_t, float* inverse) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;  // 16 x 16
  for (int i = 0; i < kTile; i += 16) {
    const int64_t r = r0 + ty + i, c = c0 + tx * 4;
    if (r < rows && c < cols) {
      const auto p = load<T, 4>(x, r * cols + c);
      for (int k = 0; k < 4; ++k) tile[ty + i][tx * 4 + k] = to_f(p.v[k]);
    }
  }
  __syncthreads();
  for (int i = 0; i < kTile; i += 16) {
    const int64_t c = c0 + ty + i, r = r0 + tx * 4;  // out row c, out columns r .. r + 3
    if (c < cols && r < rows) {
      const float s = scale_of(amax[c], code, true);
      if (blockIdx.y == 0 && tx == 0) inverse[c] = __frcp_rn(s);
      Pack<uint8_t, 4> q;
      for (int k = 0; k < 4; ++k) q.v[k] = code_of(tile[tx * 4 + k][ty + i], s, code);
      store<uint8_t, 4>(codes_t, c * rows + r, q);
    }
  }
}

// One tile of 64 rows x 16 V columns of x [rows, cols] (cols a multiple of V) per block of 256 threads, each
// loading V elements (BF16 or F32) at a time: its codes written in place and, through shared memory, transposed into
// codes_t [cols, ld_t] as 16-byte pieces of rows; rows rows .. ld_t - 1 of the tile are zero codes.
template <class T, int V>
__global__ void tensor_cast_both_kernel(const T* x, int64_t rows, int64_t cols, Fp8Code code, const float* amax,
                                        uint8_t* codes, uint8_t* codes_t, int64_t ld_t, float* inverse) {
  constexpr int kCols = 16 * V, kWords = V / 4;    // columns per tile; 4-code words per thread and row
  __shared__ uint32_t tile[kTile][kCols / 4 + 1];  // codes [row in tile][column in tile], four to a word
  const float s = scale_of(*amax, code, false);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *inverse = __frcp_rn(s);
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int lane = threadIdx.x % 16;  // columns V lane .. V lane + V - 1 of the tile
  const int64_t c = c0 + V * lane;
#pragma unroll
  for (int i = 0; i < kTile / 16; ++i) {
    const int tr = threadIdx.x / 16 + 16 * i;
    const int64_t r = r0 + tr;
    Pack<uint8_t, V> q{};  // zero codes outside x
    if (r < rows && c < cols) {
      const auto p = load<T, V>(x, r * cols + c);
      for (int k = 0; k < V; ++k) q.v[k] = code_of(to_f(p.v[k]), s, code);
      store<uint8_t, V>(codes, r * cols + c, q);
    }
    for (int w = 0; w < kWords; ++w) tile[tr][lane * kWords + w] = reinterpret_cast<const uint32_t*>(q.v)[w];
  }
  __syncthreads();
  // kCols transposed rows of 64 codes each: 4 kCols pieces of 16 bytes, kWords of them per thread.
  for (int j = 0; j < kWords; ++j) {
    const int piece = threadIdx.x + 256 * j, out_col = piece / 4, seg = 16 * (piece % 4);
    const int64_t oc = c0 + out_col, orow = r0 + seg;
    if (oc >= cols || orow >= ld_t) continue;
    Pack<uint8_t, 16> t;
    for (int k = 0; k < 16; ++k) t.v[k] = static_cast<uint8_t>(tile[seg + k][out_col / 4] >> (8 * (out_col % 4)));
    store<uint8_t, 16>(codes_t, oc * ld_t + orow, t);
  }
}

unsigned grid_for(int64_t groups, int threads) {
  const int64_t blocks = (groups + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

template <class T>
void cast_tensorwise_both(const T* x, int64_t rows, int64_t cols, Fp8Code code, float* amax, bool amax_known,
                          uint8_t* codes, uint8_t* codes_t, int64_t ld_t, float* inverse, cudaStream_t st) {
  const int64_t n = rows * cols;
  constexpr int kThreads = 256, kGroup = 16 / sizeof(T);
  if (!amax_known) {
    cudaMemsetAsync(amax, 0, sizeof(float), st);
    tensor_amax_kernel<T><<<grid_for((n + kGroup - 1) / kGroup, kThreads), kThreads, 0, st>>>(x, n, amax);
  }
  const auto grid = [&](int tile_cols) {
    return dim3(static_cast<unsigned>((cols + tile_cols - 1) / tile_cols),
                static_cast<unsigned>((ld_t + kTile - 1) / kTile));
  };
  if (cols % 8 == 0) {  // 16-byte loads of BF16 (two of F32)
    tensor_cast_both_kernel<T, 8>
        <<<grid(128), kThreads, 0, st>>>(x, rows, cols, code, amax, codes, codes_t, ld_t, inverse);
  } else {
    tensor_cast_both_kernel<T, 4>
        <<<grid(64), kThreads, 0, st>>>(x, rows, cols, code, amax, codes, codes_t, ld_t, inverse);
  }
}

template <class T>
void cast_rows_pow2(const T* x, int64_t rows, int64_t cols, Fp8Code code, uint8_t* codes, float* inverse,
                    cudaStream_t st) {
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte load
  const int threads = cols >= 4096 ? 512 : 256;
  if (cols % V == 0 && aligned_to(x, 16) && aligned_to(codes, V)) {
    rows_cast_kernel<T, V><<<static_cast<unsigned>(rows), threads, 0, st>>>(x, cols, code, codes, inverse);
  } else {
    rows_cast_kernel<T, 1><<<static_cast<unsigned>(rows), threads, 0, st>>>(x, cols, code, codes, inverse);
  }
}

template <class T>
void cast_columns_pow2(const T* x, int64_t rows, int64_t cols, Fp8Code code, float* amax_scratch, uint8_t* codes_t,
                       float* inverse, cudaStream_t st) {
  cudaMemsetAsync(amax_scratch, 0, sizeof(float) * static_cast<size_t>(cols), st);
  const dim3 amax_grid(static_cast<unsigned>((cols / 2 + 127) / 128),
                       static_cast<unsigned>((rows + kSlab - 1) / kSlab));
  columns_amax_kernel<T><<<amax_grid, 128, 0, st>>>(x, rows, cols, amax_scratch);
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  columns_cast_kernel<T><<<grid, dim3(16, 16), 0, st>>>(x, rows, cols, code, amax_scratch, codes_t, inverse);
}

}  // namespace

void fp8_cast_tensorwise_both(const void* x, bool f32, int64_t rows, int64_t cols, Fp8Code code, float* amax,
                              bool amax_known, uint8_t* codes, uint8_t* codes_t, int64_t ld_t, float* inverse,
                              void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (f32) {
    cast_tensorwise_both(static_cast<const float*>(x), rows, cols, code, amax, amax_known, codes, codes_t, ld_t,
                         inverse, st);
  } else {
    cast_tensorwise_both(static_cast<const bf16*>(x), rows, cols, code, amax, amax_known, codes, codes_t, ld_t, inverse,
                         st);
  }
  check_launch("fp8_cast_tensorwise_both");
}

void fp8_cast_rows_pow2(const void* x, bool f32, int64_t rows, int64_t cols, Fp8Code code, uint8_t* codes,
                        float* inverse, void* stream) {
  if (rows == 0 || cols == 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  if (f32) {
    cast_rows_pow2(static_cast<const float*>(x), rows, cols, code, codes, inverse, st);
  } else {
    cast_rows_pow2(static_cast<const bf16*>(x), rows, cols, code, codes, inverse, st);
  }
  check_launch("fp8_cast_rows_pow2");
}

void fp8_cast_columns_pow2(const void* x, bool f32, int64_t rows, int64_t cols, Fp8Code code, float* amax_scratch,
                           uint8_t* codes_t, float* inverse, void* stream) {
  if (rows == 0 || cols == 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  if (f32) {
    cast_columns_pow2(static_cast<const float*>(x), rows, cols, code, amax_scratch, codes_t, inverse, st);
  } else {
    cast_columns_pow2(static_cast<const bf16*>(x), rows, cols, code, amax_scratch, codes_t, inverse, st);
  }
  check_launch("fp8_cast_columns_pow2");
}

}  // namespace ft::kernels
