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

// The block's absmax; group2 = block / blocksize2 (the caller's division or shift), its entry of absmax2 when
// double-quantized. __fmul_rn / __fadd_rn: two roundings as the ATen path, never contracted into an FMA (the kernels
// build with --use_fast_math).
__device__ __forceinline__ float block_absmax(const Nf4View& w, const float* map, int64_t block, int64_t group2) {
  if (w.absmax != nullptr) return w.absmax[block];
  const float scaled = __fmul_rn(map[w.absmax_codes[block]], w.absmax2[group2]);
  return __fadd_rn(scaled, *w.offset);
}

// The F32 values of the 8 elements of group i (4 packed bytes), which never straddle a block (blocksize is a
// multiple of 8).
__device__ __forceinline__ void group_values(const Nf4View& w, const SharedTables& t, int64_t i, float (&v)[8]) {
  const uint32_t bytes = *reinterpret_cast<const uint32_t*>(w.packed + i * 4);
  const int64_t block = (i * 8) / w.blocksize;
  const float absmax = block_absmax(w, t.dynamic, block, w.absmax != nullptr ? 0 : block / w.blocksize2);
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

// The lookup-table kernels (the fast path of nf4_to_fp8_rows / nf4_to_fp8_transposed). Within one absmax block every
// element is one of 16 values, RN(code[n] * absmax), so its e4m3 code is one of 16 bytes: a unit of 16 elements
// (8 packed bytes) is converted by looking its nibbles up in that table with byte permutes, and four neighbouring
// lanes, whose units share the block, build the table together (4 IEEE divisions each per 64 elements instead of
// 64). Units start at multiples of 16 elements and a lane group's 64 elements lie in one block: cols and blocksize
// are multiples of 64. Block indices are shifts (blocksize and blocksize2 are powers of two).
struct BlockShifts {
  int block, block2;  // log2(blocksize), log2(blocksize2) (the latter unused without double quantization)
};

__device__ __forceinline__ float absmax_of(const Nf4View& w, const float* map, int64_t element, BlockShifts shifts) {
  const int64_t block = element >> shifts.block;
  return block_absmax(w, map, block, block >> shifts.block2);
}

// One thread per unit of 16 elements (8 packed bytes, one load): the bits of dequantize_kernel with the block index
// by shifts, and twice the work per thread (the 64-bit divisions per group of 8 and the 4-byte loads held the
// element-wise kernel well below the memory bandwidth). A unit lies in one block: blocksize is a power of two >= 16.
template <class T>
__global__ void dequantize_units_kernel(Nf4View w, Nf4Tables tables, BlockShifts shifts, int64_t units, T* out) {
  __shared__ SharedTables t;
  fill(t, tables);
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= units) return;
  const uint2 packed = __ldg(reinterpret_cast<const uint2*>(w.packed) + u);
  const float absmax = absmax_of(w, t.dynamic, u * 16, shifts);
  const uint32_t words[2] = {packed.x, packed.y};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    Pack<T, 8> y;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint32_t byte = (words[half] >> (8 * b)) & 0xFFu;  // little-endian: byte b of the half
      y.v[2 * b] = from_f<T>(__fmul_rn(t.code[byte >> 4], absmax));
      y.v[2 * b + 1] = from_f<T>(__fmul_rn(t.code[byte & 0xFu], absmax));
    }
    *reinterpret_cast<Pack<T, 8>*>(out + u * 16 + 8 * half) = y;
  }
}

// Nibble n of the result = element n of the 8 in `word` (element 2i is the high nibble of byte i).
__device__ __forceinline__ uint32_t in_element_order(uint32_t word) {
  return ((word >> 4) & 0x0F0F0F0Fu) | ((word << 4) & 0xF0F0F0F0u);
}

// Four table bytes, one for each of the 4 nibbles of `nibbles` (the low 16 bits): nibbles 0-7 pick from table[0..1],
// 8-15 from table[2..3]; bit 3 of each nibble then chooses between the two picks, byte by byte.
__device__ __forceinline__ uint32_t lookup4(const uint32_t (&table)[4], uint32_t nibbles) {
  const uint32_t index = nibbles & 0x7777u;
  const uint32_t low = __byte_perm(table[0], table[1], index), high = __byte_perm(table[2], table[3], index);
  const uint32_t upper = __byte_perm(0u, 0xFFFFFFFFu, (nibbles >> 1) & 0x4444u);  // 0xFF where bit 3 is set
  return (high & upper) | (low & ~upper);
}

// The e4m3 codes of the unit's 16 elements, in order, from its 8 packed bytes and its block's table.
__device__ __forceinline__ uint4 lookup16(const uint32_t (&table)[4], uint2 packed) {
  const uint32_t a = in_element_order(packed.x), b = in_element_order(packed.y);
  return make_uint4(lookup4(table, a), lookup4(table, a >> 16), lookup4(table, b), lookup4(table, b >> 16));
}

// The 16-byte table of the block shared by lanes 4k .. 4k + 3: each lane computes bytes 4q .. 4q + 3 (q = lane % 4),
// as group_values and e4m3 do element by element. Every lane of the warp calls it.
__device__ __forceinline__ void block_table(const float* code, float absmax, float scale, uint32_t (&table)[4]) {
  const int lane = threadIdx.x % 32, q = lane % 4;
  uint32_t mine = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) mine |= static_cast<uint32_t>(e4m3(__fmul_rn(code[4 * q + i], absmax), scale)) << (8 * i);
#pragma unroll
  for (int j = 0; j < 4; ++j) table[j] = __shfl_sync(0xffffffffu, mine, (lane & ~3) + j);
}

// max |RN(code[n] * absmax)| over the unit's nibbles n. The code table ascends, so |code| falls then rises and its
// maximum over a set of nibbles is at the set's smallest or largest one.
__device__ __forceinline__ float unit_amax(const float* code, float absmax, uint2 packed) {
  uint32_t lo = 0x0F0F0F0Fu, hi = 0u;
  const uint32_t words[2] = {packed.x, packed.y};
#pragma unroll
  for (const uint32_t word : words) {
    const uint32_t even = (word >> 4) & 0x0F0F0F0Fu, odd = word & 0x0F0F0F0Fu;
    lo = __vminu4(lo, __vminu4(even, odd));
    hi = __vmaxu4(hi, __vmaxu4(even, odd));
  }
  lo = __vminu4(lo, lo >> 16);
  lo = __vminu4(lo, lo >> 8);
  hi = __vmaxu4(hi, hi >> 16);
  hi = __vmaxu4(hi, hi >> 8);
  const float largest = fmaxf(fabsf(code[lo & 0xFu]), fabsf(code[hi & 0xFu]));
  return __fmul_rn(largest, fabsf(absmax));
}

// One warp per row, eight rows per block: the row's amax over its units, then its codes (the second read of the
// packed row hits the caches). Lanes past the row's last unit take part in the shuffles only. The loops are unrolled
// so that several loads are in flight per lane.
__global__ void to_fp8_rows_lut_kernel(Nf4View w, Nf4Tables tables, BlockShifts shifts, int64_t rows, int64_t cols,
                                       uint8_t* codes, float* scale) {
  __shared__ SharedTables t;
  fill(t, tables);
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t units = cols / 16, first = row * cols;  // first: the row's first element
  const auto* packed = reinterpret_cast<const uint2*>(w.packed + first / 2);
  float amax = 0.0f;
#pragma unroll 4
  for (int64_t u = lane; u < units; u += 32) {
    const uint2 p = __ldg(packed + u);
    amax = fmaxf(amax, unit_amax(t.code, absmax_of(w, t.dynamic, first + u * 16, shifts), p));
  }
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float s = amax > 0.0f ? __fmul_rn(amax, 1.0f / kE4m3Max) : 1.0f;
  if (lane == 0) scale[row] = s;
  auto* out = reinterpret_cast<uint4*>(codes + first);
#pragma unroll 2
  for (int64_t base = 0; base < units; base += 32) {
    const int64_t u = base + lane;
    const bool mine = u < units;
    const uint2 p = mine ? __ldg(packed + u) : make_uint2(0u, 0u);
    uint32_t table[4];
    block_table(t.code, mine ? absmax_of(w, t.dynamic, first + u * 16, shifts) : 0.0f, s, table);
    if (mine) out[u] = lookup16(table, p);
  }
}

// 64 x 64 tiles, 256 threads: thread i converts unit i % 4 of tile row i / 4 into shared memory, then writes 16
// bytes of transposed row i / 4. Rows past the weight's last (rows is a multiple of 16) are neither read nor written.
__global__ void to_fp8_transposed_lut_kernel(Nf4View w, Nf4Tables tables, BlockShifts shifts, int64_t rows,
                                             int64_t cols, const float* scale, uint8_t* codes_t, int64_t ld) {
  __shared__ SharedTables t;
  __shared__ uint32_t tile[kTile][kTile / 4 + 1];  // [tile row][4 codes]; the pad spreads a column over the banks
  fill(t, tables);
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tr = threadIdx.x / 4, q = threadIdx.x % 4;
  const int64_t r = r0 + tr, element = r * cols + c0 + 16 * q;
  const bool inside = r < rows;
  const uint2 p = inside ? __ldg(reinterpret_cast<const uint2*>(w.packed + element / 2)) : make_uint2(0u, 0u);
  uint32_t table[4];
  block_table(t.code, inside ? absmax_of(w, t.dynamic, element, shifts) : 0.0f, inside ? scale[r] : 1.0f, table);
  const uint4 v = lookup16(table, p);
  tile[tr][4 * q] = v.x;
  tile[tr][4 * q + 1] = v.y;
  tile[tr][4 * q + 2] = v.z;
  tile[tr][4 * q + 3] = v.w;
  __syncthreads();
  const int c = threadIdx.x / 4;  // out row c0 + c, out columns r0 + 16q .. + 15
  if (r0 + 16 * q >= rows) return;
  const auto* bytes = reinterpret_cast<const uint8_t*>(&tile[0][0]);
  constexpr int kPitch = (kTile / 4 + 1) * 4;  // bytes per tile row
  uint32_t out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint8_t* column = bytes + (16 * q + 4 * k) * kPitch + c;
    out[k] = column[0] | (column[kPitch] << 8) | (column[2 * kPitch] << 16) |
             (static_cast<uint32_t>(column[3 * kPitch]) << 24);
  }
  *reinterpret_cast<uint4*>(codes_t + (c0 + c) * ld + r0 + 16 * q) = make_uint4(out[0], out[1], out[2], out[3]);
}

int log2_exact(int64_t v) {  // log2 of a power of two, else -1
  if (v <= 0 || (v & (v - 1)) != 0) return -1;
  int k = 0;
  while ((int64_t{1} << k) < v) ++k;
  return k;
}

// Whether the lookup-table kernels take this weight; fills their shifts.
bool lut_path(const Nf4View& w, const Nf4Tables& tables, int64_t cols, BlockShifts& shifts) {
  shifts.block = log2_exact(w.blocksize);
  shifts.block2 = w.absmax != nullptr ? 0 : log2_exact(w.blocksize2);
  if (cols % 64 != 0 || shifts.block < 6 || shifts.block2 < 0) return false;
  if (reinterpret_cast<uintptr_t>(w.packed) % 8 != 0) return false;
  for (int n = 1; n < 16; ++n) {
    if (!(tables.code[n - 1] < tables.code[n])) return false;  // unit_amax needs an ascending code table
  }
  return true;
}

}  // namespace

void nf4_dequantize(const Nf4View& w, const Nf4Tables& tables, void* out, DType dtype, void* stream) {
  const int64_t groups = w.n / 8;
  if (groups == 0) return;
  constexpr int kBlock = 256;
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const BlockShifts shifts{log2_exact(w.blocksize), w.absmax != nullptr ? 0 : log2_exact(w.blocksize2)};
  const bool units =
      w.n % 16 == 0 && shifts.block >= 4 && shifts.block2 >= 0 && reinterpret_cast<uintptr_t>(w.packed) % 8 == 0;
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    if (units) {
      const int64_t n_units = w.n / 16;
      const auto grid = static_cast<unsigned>((n_units + kBlock - 1) / kBlock);
      dequantize_units_kernel<T><<<grid, kBlock, 0, cuda_stream>>>(w, tables, shifts, n_units, static_cast<T*>(out));
    } else {
      const auto grid = static_cast<unsigned>((groups + kBlock - 1) / kBlock);
      dequantize_kernel<T><<<grid, kBlock, 0, cuda_stream>>>(w, tables, static_cast<T*>(out));
    }
  });
  check_launch("nf4_dequantize");
}

void nf4_to_fp8_rows(const Nf4View& w, const Nf4Tables& tables, int64_t rows, int64_t cols, uint8_t* codes,
                     float* scale, void* stream) {
  if (rows == 0 || cols == 0) return;
  BlockShifts shifts{};
  if (lut_path(w, tables, cols, shifts) && reinterpret_cast<uintptr_t>(codes) % 16 == 0) {
    constexpr int kRowsPerBlock = 8;
    const auto grid = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    to_fp8_rows_lut_kernel<<<grid, 32 * kRowsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(w, tables, shifts, rows,
                                                                                               cols, codes, scale);
    check_launch("nf4_to_fp8_rows");
    return;
  }
  to_fp8_rows_kernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(w, tables, cols, codes,
                                                                                                 scale);
  check_launch("nf4_to_fp8_rows");
}

void nf4_to_fp8_transposed(const Nf4View& w, const Nf4Tables& tables, int64_t rows, int64_t cols, const float* scale,
                           uint8_t* codes_t, int64_t ld, void* stream) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  BlockShifts shifts{};
  // The lookup-table kernel writes 16 bytes at a time; the tiles' columns start at multiples of 16 rows.
  if (lut_path(w, tables, cols, shifts) && reinterpret_cast<uintptr_t>(codes_t) % 16 == 0 && ld % 16 == 0) {
    to_fp8_transposed_lut_kernel<<<grid, 256, 0, cuda_stream>>>(w, tables, shifts, rows, cols, scale, codes_t, ld);
    check_launch("nf4_to_fp8_transposed");
    return;
  }
  to_fp8_transposed_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(w, tables, rows, cols, scale, codes_t,
                                                                                ld);
  check_launch("nf4_to_fp8_transposed");
}

}  // namespace ft::kernels
