// Attention over packed short pieces (kernels/short_attention.h): one block per 64 queries (forward, dQ) or 64 keys
// (dK, dV) and one head, four warps of 16 rows each. A tile's whole key window (128 keys) fits in shared memory, so
// the softmax is exact in one pass (no running rescale), and everything between the tensor-core GEMMs is per row.
#include <cuda_runtime.h>
#include <mma.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/short_attention.h"

namespace ft::kernels {
namespace {

using namespace nvcuda;

constexpr int kTile = 64;           // queries of a forward or dQ block; keys of a dK/dV block
constexpr int kWindow = 2 * kTile;  // keys a query tile reaches; queries that reach a key tile
constexpr int kWarps = 4;           // each owns 16 of the tile's 64 rows
constexpr int kThreads = 32 * kWarps;
constexpr int kPad = 8;   // 16-bit elements added to each shared row: rows shift banks, fragments stay 32-byte aligned
constexpr int kPadF = 4;  // the same for F32 rows
constexpr float kLog2e = 1.4426950408889634f;

static_assert(kShortPieceMax <= kWindow - kTile + 1, "a query tile's keys must fit the window");

template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T, class Major>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// The kernels' arguments: shape, pointers, and the shared-memory row strides that follow from D.
template <class T>
struct Args {
  ShortAttentionShape shape;
  const T *q, *k, *v, *d_out;
  T* out;  // written by the forward, read by the backward
  const int32_t* piece_start;
  float* lse;  // the same
  float* delta;
  T *d_q, *d_k, *d_v;
};

// Copies `rows` rows of D elements from token `first` on (row stride `stride` elements) into shared memory with
// row stride `ld`; rows outside [0, tokens) become zeros.
template <class T, int D>
__device__ void load_rows(T* dst, int ld, const T* src, int64_t stride, int64_t first, int rows, int64_t tokens) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kPerRow = D / kVec;
  for (int idx = threadIdx.x; idx < rows * kPerRow; idx += kThreads) {
    const int r = idx / kPerRow, c = (idx % kPerRow) * kVec;
    const int64_t t = first + r;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (t >= 0 && t < tokens) val = *reinterpret_cast<const uint4*>(src + t * stride + c);
    *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
  }
}

// Columns [16 lo, 16 hi + 16) of C[16, *] (F32, row stride ldc) = A[16, K] (row-major) times B^T, with B given as
// Bt[*, K] row-major.
template <class T, int K>
__device__ void mm_abt(const T* a, int lda, const T* bt, int ldb, float* c, int ldc, int lo, int hi) {
  FragA<T> fa[K / 16];
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) wmma::load_matrix_sync(fa[kk], a + kk * 16, lda);
  for (int n = lo; n <= hi; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      FragB<T, wmma::col_major> fb;
      wmma::load_matrix_sync(fb, bt + n * 16 * ldb + kk * 16, ldb);
      wmma::mma_sync(acc, fa[kk], fb, acc);
    }
    wmma::store_matrix_sync(c + n * 16, acc, ldc, wmma::mem_row_major);
  }
}

// acc[n] += A[16, 16 lo : 16 hi + 16] (row-major) times B[16 lo : 16 hi + 16, N] (row-major): the product over the
// inner tiles lo..hi only (the others are masked out), one accumulator per 16 columns.
template <class T, int N>
__device__ void mm_ab_acc(const T* a, int lda, const T* b, int ldb, FragC (&acc)[N / 16], int lo, int hi) {
  for (int kk = lo; kk <= hi; ++kk) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, a + kk * 16, lda);
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      FragB<T, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, b + kk * 16 * ldb + n * 16, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

template <int N>
__device__ void zero(FragC (&acc)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n) wmma::fill_fragment(acc[n], 0.0f);
}

template <int N>
__device__ void store_all(float* c, int ldc, FragC (&acc)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n) wmma::store_matrix_sync(c + n * 16, acc[n], ldc, wmma::mem_row_major);
}

// Writes a warp's 16 rows of D F32 values (shared, row stride ldc) times row_scale[r] (or `scale` when null) to
// global rows first + r < tokens with row stride `stride`.
template <class T, int D>
__device__ void write_rows(T* dst, int64_t stride, int64_t first, int64_t tokens, const float* c, int ldc,
                           const float* row_scale, float scale) {
  constexpr int kVec = 16 / sizeof(T);
  const int lane = threadIdx.x % 32;
  for (int idx = lane; idx < 16 * (D / kVec); idx += 32) {
    const int r = idx / (D / kVec), col = (idx % (D / kVec)) * kVec;
    const int64_t t = first + r;
    if (t >= tokens) continue;
    const float s = row_scale != nullptr ? row_scale[r] : scale;
    Pack<T, kVec> p;
#pragma unroll
    for (int e = 0; e < kVec; ++e) p.v[e] = from_f<T>(c[r * ldc + col + e] * s);
    store<T, kVec>(dst, t * stride + col, p);
  }
}

// Shared memory of one block, carved in 128-byte-aligned pieces.
struct Carver {
  unsigned char* base;
  size_t used = 0;
  template <class T>
  __device__ T* take(size_t count) {
    T* p = reinterpret_cast<T*>(base + used);
    used += (count * sizeof(T) + 127) / 128 * 128;
    return p;
  }
};

template <class T, int D>
struct Layout {
  static constexpr int ld = D + kPad;          // Q, K, V, dO rows
  static constexpr int ldS = kWindow + kPadF;  // F32 scores, probabilities, GEMM results
  static constexpr int ldP = kWindow + kPad;   // 16-bit probabilities / score gradients
  static constexpr size_t round(size_t bytes) { return (bytes + 127) / 128 * 128; }
  static constexpr size_t rows16(int rows) { return round(size_t(rows) * ld * sizeof(T)); }
  static constexpr size_t common = round(size_t(kTile) * ldS * 4) + round(size_t(kTile) * ldP * sizeof(T));
  static constexpr size_t scratch = round(kWarps * 256 * 4);
  static constexpr size_t forward = rows16(kTile) + 2 * rows16(kWindow) + common + round(kTile * 4) + round(kTile * 8);
  static constexpr size_t dq =
      2 * rows16(kTile) + 2 * rows16(kWindow) + common + scratch + 2 * round(kTile * 4) + round(kTile * 8);
  static constexpr size_t dkdv =
      2 * rows16(kTile) + 2 * rows16(kWindow) + common + scratch + 2 * round(kWindow * 4) + round(kWindow * 8);
};

// The key tiles (16 keys each, indices into the window that starts at key k0) a warp's 16 queries from `row0` can
// see: from the piece start of its first query (piece starts never decrease along the tokens) to its last query.
// Everything outside them is masked, so the warp's GEMMs and softmax skip it: a piece of 20 tokens makes a warp
// work on 2-3 of the 8 tiles.
struct TileRange {
  int lo = 0, hi = -1;  // inclusive; empty when hi < lo
};

__device__ __forceinline__ TileRange query_tiles(const int32_t* piece_start, int64_t row0, int64_t k0, int64_t n) {
  if (row0 >= n) return {};
  const int64_t last = min(row0 + 15, n - 1);
  return {static_cast<int>((piece_start[row0] - k0) / 16), static_cast<int>((last - k0) / 16)};
}

// The piece start of each of a tile's 64 queries (INT64_MAX past the end: such a query sees nothing).
__device__ __forceinline__ void load_firsts(int64_t* first, const int32_t* piece_start, int64_t q0, int64_t n) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) first[r] = q0 + r < n ? piece_start[q0 + r] : INT64_MAX;
}

// Forward: S = Q K^T over the window [q0 - 64, q0 + 64), an exact softmax per row under the piece mask, O = P V.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) forward_kernel(Args<T> a) {
  using L = Layout<T, D>;
  extern __shared__ __align__(128) unsigned char smem[];
  Carver sm{smem};
  T* qs = sm.take<T>(kTile * L::ld);
  T* ks = sm.take<T>(kWindow * L::ld);
  T* vs = sm.take<T>(kWindow * L::ld);
  float* s = sm.take<float>(kTile * L::ldS);
  T* p = sm.take<T>(kTile * L::ldP);
  float* inv_sum = sm.take<float>(kTile);
  int64_t* first = sm.take<int64_t>(kTile);

  const ShortAttentionShape& sh = a.shape;
  const int h = blockIdx.y, hk = h / (sh.heads / sh.kv_heads);
  const int64_t q0 = int64_t(blockIdx.x) * kTile, k0 = q0 - kTile, n = sh.tokens;
  const int64_t q_stride = int64_t(sh.heads) * D, kv_stride = int64_t(sh.kv_heads) * D;
  load_rows<T, D>(qs, L::ld, a.q + h * D, q_stride, q0, kTile, n);
  load_rows<T, D>(ks, L::ld, a.k + hk * D, kv_stride, k0, kWindow, n);
  load_rows<T, D>(vs, L::ld, a.v + hk * D, kv_stride, k0, kWindow, n);
  load_firsts(first, a.piece_start, q0, n);
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
  const TileRange t = query_tiles(a.piece_start, q0 + r0, k0, n);
  if (t.hi < t.lo) return;  // no query of this warp exists (no block-wide barrier follows)
  mm_abt<T, D>(qs + r0 * L::ld, L::ld, ks, L::ld, s + r0 * L::ldS, L::ldS, t.lo, t.hi);  // F32 [16, tiles]
  __syncwarp();
  {  // the softmax: two lanes per row, each over every other column of the warp's tiles
    const int r = lane / 2, half = lane % 2;
    const int64_t i = q0 + r0 + r;
    const int64_t lo_key = first[r0 + r];
    float* row = s + (r0 + r) * L::ldS;
    const float scale2 = sh.scale * kLog2e;  // base 2
    float m = -INFINITY;
    for (int c = t.lo * 16 + half; c < (t.hi + 1) * 16; c += 2) {
      const int64_t j = k0 + c;
      row[c] = (j >= lo_key && j <= i) ? row[c] * scale2 : -INFINITY;
      m = fmaxf(m, row[c]);
    }
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    float sum = 0.0f;
    for (int c = t.lo * 16 + half; c < (t.hi + 1) * 16; c += 2) {
      const float e = row[c] == -INFINITY ? 0.0f : exp2f(row[c] - m);
      sum += e;
      p[(r0 + r) * L::ldP + c] = from_f<T>(e);  // unnormalised, as flash attention rounds it
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (half == 0) {
      inv_sum[r0 + r] = sum > 0.0f ? 1.0f / sum : 0.0f;
      if (i < n) a.lse[h * n + i] = m + log2f(sum);
    }
  }
  __syncwarp();
  FragC acc[D / 16];
  zero(acc);
  mm_ab_acc<T, D>(p + r0 * L::ldP, L::ldP, vs, L::ld, acc, t.lo, t.hi);
  store_all(s + r0 * L::ldS, L::ldS, acc);  // the warp's rows of S are free again
  __syncwarp();
  write_rows<T, D>(a.out + h * D, q_stride, q0 + r0, n, s + r0 * L::ldS, L::ldS, inv_sum + r0, 1.0f);
}

// P (F32, normalised) of a warp's 16 rows from its scores in place, over the tiles `t`: query i = q0 + r0 + r
// against key k0 + c; two lanes per row.
template <class T, int D>
__device__ void probabilities(const Args<T>& a, float* s, int64_t q0, int64_t k0, int r0, const float* row_lse,
                              const int64_t* first, TileRange t) {
  using L = Layout<T, D>;
  const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const float scale2 = a.shape.scale * kLog2e;
  const int64_t i = q0 + r0 + r, lo_key = first[r0 + r];
  const float lse = row_lse[r0 + r];
  float* row = s + (r0 + r) * L::ldS;
  for (int c = t.lo * 16 + half; c < (t.hi + 1) * 16; c += 2) {
    const int64_t j = k0 + c;
    row[c] = (j >= lo_key && j <= i) ? exp2f(row[c] * scale2 - lse) : 0.0f;
  }
}

// delta = rowsum(dO * O) of a warp's 16 queries (into row_delta and the global delta for the dK/dV kernel), and
// their lse into row_lse; two lanes per row, each over half of D in 16-byte vectors.
template <class T, int D>
__device__ void row_stats(const Args<T>& a, const T* dos, int h, int64_t q0, int r0, float* row_lse, float* row_delta) {
  using L = Layout<T, D>;
  constexpr int kVec = 16 / sizeof(T);
  const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int64_t n = a.shape.tokens, q_stride = int64_t(a.shape.heads) * D, i = q0 + r0 + r;
  float dot = 0.0f;
  if (i < n) {
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); c += kVec) {
      const Pack<T, kVec> o = load<T, kVec>(a.out, i * q_stride + h * D + c);
      const Pack<T, kVec> g = load<T, kVec>(dos, (r0 + r) * L::ld + c);
#pragma unroll
      for (int e = 0; e < kVec; ++e) dot += to_f(o.v[e]) * to_f(g.v[e]);
    }
  }
  dot += __shfl_xor_sync(0xffffffffu, dot, 1);
  if (half == 0) {
    row_delta[r0 + r] = dot;
    row_lse[r0 + r] = i < n ? a.lse[h * n + i] : 0.0f;
    if (i < n) a.delta[h * n + i] = dot;
  }
  __syncwarp();
}

// dQ (and delta for the dK/dV kernel): recompute P, dP = dO V^T, dS = P (dP - delta), dQ = scale dS K.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(Args<T> a) {
  using L = Layout<T, D>;
  extern __shared__ __align__(128) unsigned char smem[];
  Carver sm{smem};
  T* qs = sm.take<T>(kTile * L::ld);
  T* dos = sm.take<T>(kTile * L::ld);
  T* ks = sm.take<T>(kWindow * L::ld);
  T* vs = sm.take<T>(kWindow * L::ld);
  float* s = sm.take<float>(kTile * L::ldS);
  T* ds = sm.take<T>(kTile * L::ldP);
  float* scratch = sm.take<float>(kWarps * 256);
  float* row_lse = sm.take<float>(kTile);
  float* row_delta = sm.take<float>(kTile);
  int64_t* first = sm.take<int64_t>(kTile);

  const ShortAttentionShape& sh = a.shape;
  const int h = blockIdx.y, hk = h / (sh.heads / sh.kv_heads);
  const int64_t q0 = int64_t(blockIdx.x) * kTile, k0 = q0 - kTile, n = sh.tokens;
  const int64_t q_stride = int64_t(sh.heads) * D, kv_stride = int64_t(sh.kv_heads) * D;
  load_rows<T, D>(qs, L::ld, a.q + h * D, q_stride, q0, kTile, n);
  load_rows<T, D>(dos, L::ld, a.d_out + h * D, q_stride, q0, kTile, n);
  load_rows<T, D>(ks, L::ld, a.k + hk * D, kv_stride, k0, kWindow, n);
  load_rows<T, D>(vs, L::ld, a.v + hk * D, kv_stride, k0, kWindow, n);
  load_firsts(first, a.piece_start, q0, n);
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
  const TileRange t = query_tiles(a.piece_start, q0 + r0, k0, n);
  if (t.hi < t.lo) return;  // no query of this warp exists (no block-wide barrier follows)
  row_stats<T, D>(a, dos, h, q0, r0, row_lse, row_delta);
  mm_abt<T, D>(qs + r0 * L::ld, L::ld, ks, L::ld, s + r0 * L::ldS, L::ldS, t.lo, t.hi);
  __syncwarp();
  probabilities<T, D>(a, s, q0, k0, r0, row_lse, first, t);
  __syncwarp();
  float* tile = scratch + warp * 256;
  for (int nt = t.lo; nt <= t.hi; ++nt) {  // dP one 16 x 16 tile at a time, straight into dS
    mm_abt<T, D>(dos + r0 * L::ld, L::ld, vs + nt * 16 * L::ld, L::ld, tile, 16, 0, 0);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int r = e / 16, c = nt * 16 + e % 16;
      ds[(r0 + r) * L::ldP + c] = from_f<T>(s[(r0 + r) * L::ldS + c] * (tile[e] - row_delta[r0 + r]));
    }
    __syncwarp();
  }
  FragC acc[D / 16];
  zero(acc);
  mm_ab_acc<T, D>(ds + r0 * L::ldP, L::ldP, ks, L::ld, acc, t.lo, t.hi);
  store_all(s + r0 * L::ldS, L::ldS, acc);
  __syncwarp();
  write_rows<T, D>(a.d_q + h * D, q_stride, q0 + r0, n, s + r0 * L::ldS, L::ldS, nullptr, sh.scale);
}

// The query tiles (indices into the window of queries that starts at k0) that see a warp's 16 keys from `key0`:
// from the keys themselves (causal) to the last query whose piece starts at or before the warp's last key.
__device__ __forceinline__ TileRange key_tiles(const int64_t* q_first, int64_t key0, int64_t k0, int64_t n) {
  if (key0 >= n) return {};
  const int64_t last_key = min(key0 + 15, n - 1);
  int last = -1;
  for (int c = threadIdx.x % 32; c < kWindow; c += 32) {
    if (q_first[c] <= last_key) last = c;  // ascending per lane
  }
  for (int off = 16; off > 0; off /= 2) last = max(last, __shfl_xor_sync(0xffffffffu, last, off));
  return {static_cast<int>((key0 - k0) / 16), last / 16};
}

// dK and dV of 64 keys [k0, k0 + 64) of one KV head, summed over the heads of its group: the queries that see them
// are [k0, k0 + 128). P^T = exp2(K Q^T - lse), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta),
// dK += scale dS^T Q.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(Args<T> a) {
  using L = Layout<T, D>;
  extern __shared__ __align__(128) unsigned char smem[];
  Carver sm{smem};
  T* ks = sm.take<T>(kTile * L::ld);
  T* vs = sm.take<T>(kTile * L::ld);
  T* qs = sm.take<T>(kWindow * L::ld);
  T* dos = sm.take<T>(kWindow * L::ld);
  float* s = sm.take<float>(kTile * L::ldS);
  T* p = sm.take<T>(kTile * L::ldP);
  float* scratch = sm.take<float>(kWarps * 256);
  float* q_lse = sm.take<float>(kWindow);
  float* q_delta = sm.take<float>(kWindow);
  int64_t* q_first = sm.take<int64_t>(kWindow);

  const ShortAttentionShape& sh = a.shape;
  const int hk = blockIdx.y, group = sh.heads / sh.kv_heads;
  const int64_t k0 = int64_t(blockIdx.x) * kTile, n = sh.tokens;
  const int64_t q_stride = int64_t(sh.heads) * D, kv_stride = int64_t(sh.kv_heads) * D;
  load_rows<T, D>(ks, L::ld, a.k + hk * D, kv_stride, k0, kTile, n);
  load_rows<T, D>(vs, L::ld, a.v + hk * D, kv_stride, k0, kTile, n);
  for (int c = threadIdx.x; c < kWindow; c += kThreads) q_first[c] = k0 + c < n ? a.piece_start[k0 + c] : INT64_MAX;
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
  const TileRange t = key_tiles(q_first, k0 + r0, k0, n);
  const float scale2 = sh.scale * kLog2e;
  float* tile = scratch + warp * 256;
  FragC dk[D / 16], dv[D / 16];
  zero(dk);
  zero(dv);
  for (int g = 0; g < group; ++g) {
    const int h = hk * group + g;
    __syncthreads();  // the previous head's queries are no longer read
    load_rows<T, D>(qs, L::ld, a.q + h * D, q_stride, k0, kWindow, n);
    load_rows<T, D>(dos, L::ld, a.d_out + h * D, q_stride, k0, kWindow, n);
    for (int c = threadIdx.x; c < kWindow; c += kThreads) {
      const bool valid = k0 + c < n;
      q_lse[c] = valid ? a.lse[h * n + k0 + c] : 0.0f;
      q_delta[c] = valid ? a.delta[h * n + k0 + c] : 0.0f;
    }
    __syncthreads();
    if (t.hi < t.lo) continue;  // this warp has no key (it still meets the barriers above)
    mm_abt<T, D>(ks + r0 * L::ld, L::ld, qs, L::ld, s + r0 * L::ldS, L::ldS, t.lo, t.hi);  // S^T: keys x queries
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      const int64_t j = k0 + r0 + r;
      for (int c = t.lo * 16 + lane; c < (t.hi + 1) * 16; c += 32) {
        const int64_t i = k0 + c;
        float& x = s[(r0 + r) * L::ldS + c];
        x = (j >= q_first[c] && j <= i) ? exp2f(x * scale2 - q_lse[c]) : 0.0f;
        p[(r0 + r) * L::ldP + c] = from_f<T>(x);
      }
    }
    __syncwarp();
    mm_ab_acc<T, D>(p + r0 * L::ldP, L::ldP, dos, L::ld, dv, t.lo, t.hi);
    for (int nt = t.lo; nt <= t.hi; ++nt) {  // dP^T one tile at a time, straight into dS^T (over P^T)
      mm_abt<T, D>(vs + r0 * L::ld, L::ld, dos + nt * 16 * L::ld, L::ld, tile, 16, 0, 0);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int r = e / 16, c = nt * 16 + e % 16;
        p[(r0 + r) * L::ldP + c] = from_f<T>(s[(r0 + r) * L::ldS + c] * (tile[e] - q_delta[c]));
      }
      __syncwarp();
    }
    mm_ab_acc<T, D>(p + r0 * L::ldP, L::ldP, qs, L::ld, dk, t.lo, t.hi);
  }
  if (t.hi < t.lo) return;
  store_all(s + r0 * L::ldS, L::ldS, dk);
  __syncwarp();
  write_rows<T, D>(a.d_k + hk * D, kv_stride, k0 + r0, n, s + r0 * L::ldS, L::ldS, nullptr, sh.scale);
  __syncwarp();
  store_all(s + r0 * L::ldS, L::ldS, dv);
  __syncwarp();
  write_rows<T, D>(a.d_v + hk * D, kv_stride, k0 + r0, n, s + r0 * L::ldS, L::ldS, nullptr, 1.0f);
}

void check_shape(const ShortAttentionShape& sh, DType dtype, const char* what) {
  if (!short_attention_supports(sh.head_dim, dtype)) {
    throw std::runtime_error(std::string(what) + ": head_dim must be 64 or 128 and the dtype BF16 or F16");
  }
  if (sh.kv_heads <= 0 || sh.heads % sh.kv_heads != 0) {
    throw std::runtime_error(std::string(what) + ": heads must be a multiple of kv_heads");
  }
  if (sh.tokens < 0 || (sh.tokens + kTile - 1) / kTile > INT_MAX) {
    throw std::runtime_error(std::string(what) + ": bad token count");
  }
}

// Launches `kernel` over (token tiles, heads) with `bytes` of dynamic shared memory (past the default 48 KB).
template <class T, int D, class Kernel>
void run(Kernel kernel, size_t bytes, int64_t tiles, int heads, cudaStream_t stream, const Args<T>& args,
         const char* what) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) !=
      cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": cannot reserve " + std::to_string(bytes) +
                             " bytes of shared memory: " + cudaGetErrorString(cudaGetLastError()));
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(heads));
  kernel<<<grid, kThreads, bytes, stream>>>(args);
  check_launch(what);
}

// Calls f(T{}, std::integral_constant<int, D>{}) for the supported element types and head sizes.
template <class F>
void dispatch_short(DType dtype, int head_dim, F&& f) {
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, float>) {
      if (head_dim == 64) f(zero, std::integral_constant<int, 64>{});
      if (head_dim == 128) f(zero, std::integral_constant<int, 128>{});
    }
  });
}

}  // namespace

bool short_attention_supports(int head_dim, DType dtype) {
  return (head_dim == 64 || head_dim == 128) && (dtype == DType::kBF16 || dtype == DType::kF16);
}

void short_attention_forward(const ShortAttentionShape& sh, const void* q, const void* k, const void* v,
                             const int32_t* piece_start, void* out, float* lse, DType dtype, void* stream) {
  check_shape(sh, dtype, "short_attention_forward");
  if (sh.tokens == 0 || sh.heads == 0) return;
  const int64_t tiles = (sh.tokens + kTile - 1) / kTile;
  dispatch_short(dtype, sh.head_dim, [&](auto zero, auto dim) {
    using T = decltype(zero);
    constexpr int D = decltype(dim)::value;
    Args<T> a{};
    a.shape = sh;
    a.q = static_cast<const T*>(q);
    a.k = static_cast<const T*>(k);
    a.v = static_cast<const T*>(v);
    a.piece_start = piece_start;
    a.lse = lse;
    a.out = static_cast<T*>(out);
    run<T, D>(forward_kernel<T, D>, Layout<T, D>::forward, tiles, sh.heads, static_cast<cudaStream_t>(stream), a,
              "short attention forward kernel");
  });
}

void short_attention_backward(const ShortAttentionShape& sh, const void* q, const void* k, const void* v,
                              const void* out, const int32_t* piece_start, const float* lse,
                              const ShortAttentionGrads& g, DType dtype, void* stream) {
  check_shape(sh, dtype, "short_attention_backward");
  if (sh.tokens == 0 || sh.heads == 0) return;
  const int64_t tiles = (sh.tokens + kTile - 1) / kTile;
  dispatch_short(dtype, sh.head_dim, [&](auto zero, auto dim) {
    using T = decltype(zero);
    constexpr int D = decltype(dim)::value;
    Args<T> a{};
    a.shape = sh;
    a.q = static_cast<const T*>(q);
    a.k = static_cast<const T*>(k);
    a.v = static_cast<const T*>(v);
    a.out = static_cast<T*>(const_cast<void*>(out));  // read only by the backward kernels
    a.d_out = static_cast<const T*>(g.d_out);
    a.piece_start = piece_start;
    a.lse = const_cast<float*>(lse);  // read only by the backward kernels
    a.delta = g.delta;
    a.d_q = static_cast<T*>(g.d_q);
    a.d_k = static_cast<T*>(g.d_k);
    a.d_v = static_cast<T*>(g.d_v);
    const auto st = static_cast<cudaStream_t>(stream);
    run<T, D>(dq_kernel<T, D>, Layout<T, D>::dq, tiles, sh.heads, st, a, "short attention dQ kernel");
    run<T, D>(dkdv_kernel<T, D>, Layout<T, D>::dkdv, tiles, sh.kv_heads, st, a, "short attention dK/dV kernel");
  });
}

}  // namespace ft::kernels
