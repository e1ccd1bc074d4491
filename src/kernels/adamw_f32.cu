// Built without --use_fast_math (kernels/CMakeLists.txt): the arithmetic must round as PyTorch's kernel does, which
// is compiled with IEEE division and square root, no flush to zero, and the accurate powf. The operations below are
// the intrinsics of PyTorch 2.11's adam_math for F32 (ATen/native/cuda/fused_adam_utils.cuh), fma where it has one
// (two explicit ones per moment, and the weight decay, which nvcc contracts there), so the bits are the same.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/adamw_f32.h"
#include "kernels/block.cuh"

namespace ft::kernels {
namespace {

// The hyper-parameters rounded to F32 once, and the bias corrections from the step count, as PyTorch's functor
// computes them per thread before its element loop.
struct Coefficients {
  float beta1, beta2, eps, lr_decay, step_size, bias2_sqrt;
  bool decay;
};

__device__ __forceinline__ Coefficients coefficients(const AdamWF32Scalars& s) {
  Coefficients k;
  const float lr = static_cast<float>(s.lr), weight_decay = static_cast<float>(s.weight_decay);
  const float step = s.step[0];
  k.beta1 = static_cast<float>(s.beta1);
  k.beta2 = static_cast<float>(s.beta2);
  k.eps = static_cast<float>(s.eps);
  k.decay = weight_decay != 0.0f;
  k.lr_decay = __fmul_rn(lr, weight_decay);
  k.step_size = __fdiv_rn(lr, __fsub_rn(1.0f, powf(k.beta1, step)));
  k.bias2_sqrt = __fsqrt_rn(__fsub_rn(1.0f, powf(k.beta2, step)));
  return k;
}

// One element: p, m, v updated in place from the gradient g (already divided by grad_scale).
__device__ __forceinline__ void update(float& p, float g, float& m, float& v, const Coefficients& k) {
  if (k.decay) p = __fmaf_rn(-k.lr_decay, p, p);
  m = __fmaf_rn(k.beta1, m, __fmaf_rn(-k.beta1, g, g));
  const float g2 = __fmul_rn(g, g);
  v = __fmaf_rn(k.beta2, v, __fmaf_rn(-k.beta2, g2, g2));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.bias2_sqrt), k.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(k.step_size, m), denom));
}

constexpr int kVec = 4;  // 16-byte loads

// The parameter's max |p| without changing it (a skipped step's amax).
__device__ float unchanged_max(const AdamWF32Tensors& t) {
  float amax = 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < t.n; i += stride) {
    amax = fmaxf(amax, fabsf(t.param[i]));
  }
  return amax;
}

// One thread per kVec consecutive elements (grid-stride); kVector: whole groups as aligned vectors.
template <bool kVector>
__global__ void adamw_f32_kernel(AdamWF32Tensors t, AdamWF32Scalars s) {
  const bool skip = s.found_inf && s.found_inf[0] != 0.0f;  // the same for every thread
  if (skip && !t.amax) return;
  float amax = 0.0f;
  if (skip) {
    amax = unchanged_max(t);
  } else {
    const Coefficients k = coefficients(s);
    const float scale = s.grad_scale ? s.grad_scale[0] : 1.0f;
    const int64_t groups = (t.n + kVec - 1) / kVec;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t gi = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; gi < groups; gi += stride) {
      const int64_t base = gi * kVec;
      if (kVector && base + kVec <= t.n) {
        auto p = load<float, kVec>(t.param, base), m = load<float, kVec>(t.exp_avg, base);
        auto v = load<float, kVec>(t.exp_avg_sq, base);
        const auto g = load<float, kVec>(t.grad, base);
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          update(p.v[i], s.grad_scale ? __fdiv_rn(g.v[i], scale) : g.v[i], m.v[i], v.v[i], k);
          amax = fmaxf(amax, fabsf(p.v[i]));
        }
        store<float, kVec>(t.param, base, p);
        store<float, kVec>(t.exp_avg, base, m);
        store<float, kVec>(t.exp_avg_sq, base, v);
      } else {
        for (int64_t i = base; i < t.n && i < base + kVec; ++i) {
          const float g = s.grad_scale ? __fdiv_rn(t.grad[i], scale) : t.grad[i];
          update(t.param[i], g, t.exp_avg[i], t.exp_avg_sq[i], k);
          amax = fmaxf(amax, fabsf(t.param[i]));
        }
      }
    }
  }
  if (!t.amax) return;
  amax = block_max(amax);
  if (threadIdx.x == 0) atomic_max_nonneg(t.amax, amax);
}

}  // namespace

void adamw_f32_step(const AdamWF32Tensors& t, const AdamWF32Scalars& s, void* stream) {
  const int64_t groups = (t.n + kVec - 1) / kVec;
  if (groups == 0) return;
  constexpr int kBlock = 256;
  const int64_t blocks = (groups + kBlock - 1) / kBlock;
  const unsigned grid = static_cast<unsigned>(blocks < (int64_t{1} << 16) ? blocks : (int64_t{1} << 16));
  auto st = static_cast<cudaStream_t>(stream);
  const bool vector =
      aligned_to(t.param, 16) && aligned_to(t.grad, 16) && aligned_to(t.exp_avg, 16) && aligned_to(t.exp_avg_sq, 16);
  if (vector) {
    adamw_f32_kernel<true><<<grid, kBlock, 0, st>>>(t, s);
  } else {
    adamw_f32_kernel<false><<<grid, kBlock, 0, st>>>(t, s);
  }
  check_launch("AdamW F32 kernel");
}

}  // namespace ft::kernels
