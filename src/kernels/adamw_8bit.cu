#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "kernels/adamw_8bit.h"
#include "kernels/block.cuh"
#include "kernels/convert.cuh"

namespace ft::kernels {
namespace {

constexpr int kThreads = static_cast<int>(kAdamW8bitBlock);  // one thread per element of an absmax block

// bitsandbytes' quantize_2D: a binary search of the ascending map for x (|x| <= 1), then the nearer of the two
// entries around x, a tie going to the searched one. `lower` is the value below the map's first entry (-1 signed,
// 0 unsigned). NaN (the 0 / 0 of an all-zero block) compares false throughout and ends at index 0.
__device__ __forceinline__ int nearest_code(const float* map, float lower, float x) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float upper = 1.0f;
  float val = map[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = map[pivot];
  }
  if (x > val) return x > (upper + val) * 0.5f ? upper_pivot : pivot;
  return x < (lower + val) * 0.5f ? lower_pivot : pivot;
}

// exp_avg's code, moved one entry towards m's side where rounding gave it the other sign (as bitsandbytes does; the
// byte wraps as theirs does).
__device__ __forceinline__ uint8_t signed_code(const float* map, float m, float absmax) {
  int c = nearest_code(map, -1.0f, __fdividef(m, absmax));
  if (signbit(map[c]) != signbit(m)) c += m > 0.0f ? 1 : -1;
  return static_cast<uint8_t>(c);
}

// Grid-stride over the absmax blocks: thread j takes element j of each.
template <class T, bool kKahan>
__global__ void __launch_bounds__(kThreads) adamw_8bit_kernel(AdamW8bitTensors t, AdamW8bitScalars s) {
  if (s.found_inf && s.found_inf[0] != 0.0f) return;
  __shared__ float map1[256], map2[256];
  map1[threadIdx.x] = t.map1[threadIdx.x];
  map2[threadIdx.x] = t.map2[threadIdx.x];
  __syncthreads();
  const float step = fmaxf(s.step[0], 1.0f);  // a first step skipped by found_inf left the count at 0
  const float correction1 = 1.0f - __powf(s.beta1, step);
  const float correction2 = sqrtf(1.0f - __powf(s.beta2, step));
  const float step_size = __fdividef(-s.lr * correction2, correction1);
  const float inv_scale = s.grad_scale ? 1.0f / s.grad_scale[0] : 1.0f;
  T* param = static_cast<T*>(t.param);
  const T* grad = static_cast<const T*>(t.grad);
  T* comp = static_cast<T*>(t.compensation);
  const int64_t blocks = (t.n + kThreads - 1) / kThreads;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t i = b * kThreads + threadIdx.x;
    const bool valid = i < t.n;
    const float g_raw = valid ? to_f(grad[i]) : 0.0f;
    const bool live = valid && isfinite(g_raw);
    const float g = g_raw * inv_scale;
    float m = 0.0f, v = 0.0f;  // F32 moments
    if (live) {
      v = map2[t.codes2[i]] * t.absmax2[b];
      v = v * s.beta2 + (1.0f - s.beta2) * g * g;
      m = map1[t.codes1[i]] * t.absmax1[b];
      m = m * s.beta1 + (1.0f - s.beta1) * g;
    }
    const float absmax_m = block_max(fabsf(m)), absmax_v = block_max(fabsf(v));
    if (threadIdx.x == 0) {
      t.absmax1[b] = absmax_m;
      t.absmax2[b] = absmax_v;
    }
    if (live) {
      const float p = to_f(param[i]);
      const float decay = 1.0f - s.lr * s.weight_decay;
      const float stepped = p + step_size * __fdividef(m, sqrtf(v) + correction2 * s.eps);
      if constexpr (kKahan) {
        add_compensated(param[i], comp[i], p, (s.weight_decay > 0.0f ? stepped * decay : stepped) - p);
      } else {
        // As bitsandbytes: the stepped weight is stored in its dtype, then decayed from that value and stored again.
        T rounded = from_f<T>(stepped);
        if (s.weight_decay > 0.0f) rounded = from_f<T>(to_f(rounded) * decay);
        param[i] = rounded;
      }
    }
    if (valid) {
      t.codes1[i] = signed_code(map1, m, absmax_m);
      t.codes2[i] = static_cast<uint8_t>(nearest_code(map2, 0.0f, __fdividef(v, absmax_v)));
    }
  }
}

template <class T>
void launch(const AdamW8bitTensors& t, const AdamW8bitScalars& s, cudaStream_t stream) {
  const int64_t blocks = (t.n + kThreads - 1) / kThreads;
  if (blocks == 0) return;
  // Enough resident blocks to fill the GPU; each loads the two maps once.
  const unsigned grid = static_cast<unsigned>(blocks < 8192 ? blocks : 8192);
  if (t.compensation != nullptr) {
    adamw_8bit_kernel<T, true><<<grid, kThreads, 0, stream>>>(t, s);
  } else {
    adamw_8bit_kernel<T, false><<<grid, kThreads, 0, stream>>>(t, s);
  }
}

}  // namespace

void adamw_8bit_step(const AdamW8bitTensors& t, const AdamW8bitScalars& s, DType dtype, void* stream) {
  if (dtype == DType::kF32 && t.compensation != nullptr)
    throw std::invalid_argument("adamw_8bit_step: F32 parameters need no compensation");
  dispatch(dtype, [&](auto zero) { launch<decltype(zero)>(t, s, static_cast<cudaStream_t>(stream)); });
  check_launch("AdamW 8-bit kernel");
}

}  // namespace ft::kernels
