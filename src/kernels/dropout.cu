#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/dropout.h"

namespace ft::kernels {
namespace {

constexpr int kGroup = 8;  // elements per Philox block: 4 words of two 16-bit draws

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): ten rounds of two 32-bit
// multiplications over a 128-bit counter, the 64-bit key bumped by the Weyl constants between rounds.
__device__ __forceinline__ uint4 philox(uint4 ctr, uint2 key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(kM0, ctr.x), lo0 = kM0 * ctr.x;
    const uint32_t hi1 = __umulhi(kM1, ctr.z), lo1 = kM1 * ctr.z;
    ctr = make_uint4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
    key.x += kW0;
    key.y += kW1;
  }
  return ctr;
}

// Bit k of the result: element k of group g is kept (kernels/dropout.h).
__device__ __forceinline__ uint32_t keep_bits(uint64_t seed, uint64_t offset, uint64_t g, uint32_t keep_below) {
  const uint64_t c = offset / 4;
  const uint4 r = philox(make_uint4(static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32),
                                    static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32)),
                         make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
  const uint32_t words[4] = {r.x, r.y, r.z, r.w};
  uint32_t bits = 0;
#pragma unroll
  for (int k = 0; k < kGroup; ++k) {
    const uint32_t half = (words[k / 2] >> (16 * (k % 2))) & 0xFFFFu;
    bits |= (half < keep_below ? 1u : 0u) << k;
  }
  return bits;
}

struct Stream {
  const void* in;
  void* out;
};

template <class T, bool kVector>
__device__ __forceinline__ void mask_group(Stream s, int64_t base, int64_t n, uint32_t bits, float scale) {
  const T* in = static_cast<const T*>(s.in);
  T* out = static_cast<T*>(s.out);
  if (kVector && base + kGroup <= n) {
    constexpr int V = sizeof(T) >= 4 ? 4 : 8;  // 16-byte accesses
    static_assert(kGroup % V == 0, "a group is whole vectors");
#pragma unroll
    for (int part = 0; part < kGroup / V; ++part) {
      const auto x = load<T, V>(in, base + part * V);
      Pack<T, V> y;
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = from_f<T>((bits >> (part * V + k)) & 1u ? to_f(x.v[k]) * scale : 0.0f);
      store<T, V>(out, base + part * V, y);
    }
  } else {
    const int count = static_cast<int>(n - base < kGroup ? n - base : kGroup);
    for (int k = 0; k < count; ++k) out[base + k] = from_f<T>((bits >> k) & 1u ? to_f(in[base + k]) * scale : 0.0f);
  }
}

// One thread per group of 8 consecutive elements (grid-stride); with kVector, whole groups move as 16-byte vectors.
template <class T, bool kVector, bool kTwo>
__global__ void dropout_kernel(Stream a, Stream b, int64_t n, uint32_t keep_below, float scale, uint64_t seed,
                               uint64_t offset) {
  const int64_t groups = (n + kGroup - 1) / kGroup;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const uint32_t bits = keep_bits(seed, offset, static_cast<uint64_t>(g), keep_below);
    mask_group<T, kVector>(a, g * kGroup, n, bits, scale);
    if (kTwo) mask_group<T, kVector>(b, g * kGroup, n, bits, scale);
  }
}

template <class T, bool kTwo>
void launch(Stream a, Stream b, int64_t n, float p, uint64_t seed, uint64_t offset, cudaStream_t stream) {
  const int64_t groups = (n + kGroup - 1) / kGroup;
  if (groups == 0) return;
  constexpr int kBlock = 256;
  const int64_t blocks = (groups + kBlock - 1) / kBlock;
  const unsigned grid = static_cast<unsigned>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
  const double keep = 1.0 - static_cast<double>(p);
  const auto keep_below = static_cast<uint32_t>(std::lround(std::ldexp(keep, 16)));
  const auto scale = static_cast<float>(1.0 / keep);
  const bool vector =
      aligned_to(a.in, 16) && aligned_to(a.out, 16) && (!kTwo || (aligned_to(b.in, 16) && aligned_to(b.out, 16)));
  if (vector) {
    dropout_kernel<T, true, kTwo><<<grid, kBlock, 0, stream>>>(a, b, n, keep_below, scale, seed, offset);
  } else {
    dropout_kernel<T, false, kTwo><<<grid, kBlock, 0, stream>>>(a, b, n, keep_below, scale, seed, offset);
  }
}

}  // namespace

void dropout_apply(const void* in, void* out, int64_t n, float p, uint64_t seed, uint64_t offset, DType dtype,
                   void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  dispatch(dtype, [&](auto zero) { launch<decltype(zero), false>({in, out}, {in, out}, n, p, seed, offset, st); });
  check_launch("dropout kernel");
}

void dropout_apply2(const void* in_a, void* out_a, const void* in_b, void* out_b, int64_t n, float p, uint64_t seed,
                    uint64_t offset, DType dtype, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  dispatch(dtype,
           [&](auto zero) { launch<decltype(zero), true>({in_a, out_a}, {in_b, out_b}, n, p, seed, offset, st); });
  check_launch("dropout kernel");
}

}  // namespace ft::kernels
