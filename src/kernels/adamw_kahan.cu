#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "kernels/adamw_kahan.h"
#include "kernels/block.cuh"
#include "kernels/convert.cuh"

namespace ft::kernels {
namespace {

// The step's coefficients, from the device scalars (every thread computes them; the pow in double keeps the bias
// corrections exact to F32 for any step count).
struct Coefficients {
  float inv_scale, one_minus_beta1, beta2, one_minus_beta2, eps, lr, lr_decay, inv_bias1, inv_bias2_sqrt;
};

__device__ __forceinline__ Coefficients coefficients(const KahanAdamWScalars& s) {
  const double step = s.step[0] < 1.0f ? 1.0 : static_cast<double>(s.step[0]);
  Coefficients k;
  k.inv_scale = s.grad_scale ? 1.0f / s.grad_scale[0] : 1.0f;
  k.one_minus_beta1 = static_cast<float>(1.0 - s.beta1);
  k.beta2 = static_cast<float>(s.beta2);
  k.one_minus_beta2 = static_cast<float>(1.0 - s.beta2);
  k.eps = s.eps;
  k.lr = s.lr;
  k.lr_decay = s.lr * s.weight_decay;
  k.inv_bias1 = static_cast<float>(1.0 / (1.0 - pow(s.beta1, step)));
  k.inv_bias2_sqrt = static_cast<float>(1.0 / sqrt(1.0 - pow(s.beta2, step)));
  return k;
}

template <class T>
__device__ __forceinline__ void update(T& p, T grad, T& m, float& v, T& c, const Coefficients& k) {
  const float g = to_f(grad) * k.inv_scale;
  float mf = to_f(m);
  mf += k.one_minus_beta1 * (g - mf);
  m = from_f<T>(mf);
  v = k.beta2 * v + k.one_minus_beta2 * g * g;
  const float pf = to_f(p);
  const float denom = sqrtf(v) * k.inv_bias2_sqrt + k.eps;
  add_compensated(p, c, pf, -k.lr * (to_f(m) * k.inv_bias1) / denom - k.lr_decay * pf);
}

constexpr int kVec = 8;  // 16-byte loads of the 16-bit tensors, two of exp_avg_sq

// One thread per kVec consecutive elements (grid-stride); kVector: whole groups as aligned vectors.
template <class T, bool kVector>
__global__ void adamw_kahan_kernel(KahanAdamWTensors t, KahanAdamWScalars s) {
  if (s.found_inf && s.found_inf[0] != 0.0f) return;
  const Coefficients k = coefficients(s);
  T* param = static_cast<T*>(t.param);
  const T* grad = static_cast<const T*>(t.grad);
  T* exp_avg = static_cast<T*>(t.exp_avg);
  T* comp = static_cast<T*>(t.compensation);
  const int64_t groups = (t.n + kVec - 1) / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const int64_t base = g * kVec;
    if (kVector && base + kVec <= t.n) {
      auto p = load<T, kVec>(param, base), m = load<T, kVec>(exp_avg, base), c = load<T, kVec>(comp, base);
      const auto gr = load<T, kVec>(grad, base);
      auto v0 = load<float, 4>(t.exp_avg_sq, base), v1 = load<float, 4>(t.exp_avg_sq, base + 4);
#pragma unroll
      for (int i = 0; i < kVec; ++i) update(p.v[i], gr.v[i], m.v[i], i < 4 ? v0.v[i] : v1.v[i - 4], c.v[i], k);
      store<T, kVec>(param, base, p);
      store<T, kVec>(exp_avg, base, m);
      store<T, kVec>(comp, base, c);
      store<float, 4>(t.exp_avg_sq, base, v0);
      store<float, 4>(t.exp_avg_sq, base + 4, v1);
    } else {
      for (int64_t i = base; i < t.n && i < base + kVec; ++i)
        update(param[i], grad[i], exp_avg[i], t.exp_avg_sq[i], comp[i], k);
    }
  }
}

template <class T>
void launch(const KahanAdamWTensors& t, const KahanAdamWScalars& s, cudaStream_t stream) {
  const int64_t groups = (t.n + kVec - 1) / kVec;
  if (groups == 0) return;
  constexpr int kBlock = 256;
  const int64_t blocks = (groups + kBlock - 1) / kBlock;
  const unsigned grid = static_cast<unsigned>(blocks < (int64_t{1} << 16) ? blocks : (int64_t{1} << 16));
  const bool vector = aligned_to(t.param, 16) && aligned_to(t.grad, 16) && aligned_to(t.exp_avg, 16) &&
                      aligned_to(t.exp_avg_sq, 16) && aligned_to(t.compensation, 16);
  if (vector) {
    adamw_kahan_kernel<T, true><<<grid, kBlock, 0, stream>>>(t, s);
  } else {
    adamw_kahan_kernel<T, false><<<grid, kBlock, 0, stream>>>(t, s);
  }
}

}  // namespace

void adamw_kahan_step(const KahanAdamWTensors& t, const KahanAdamWScalars& s, DType dtype, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kBF16:
      launch<__nv_bfloat16>(t, s, st);
      break;
    case DType::kF16:
      launch<__half>(t, s, st);
      break;
    case DType::kF32:
      throw std::invalid_argument("adamw_kahan_step: F32 parameters step without compensation");
  }
  check_launch("AdamW Kahan kernel");
}

}  // namespace ft::kernels
