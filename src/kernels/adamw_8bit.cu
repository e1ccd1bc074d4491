#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "kernels/adamw_8bit.h"
#include "kernels/block.cuh"
#include "kernels/convert.cuh"

namespace ft::kernels {
namespace {

// A warp per absmax block, 8 consecutive elements per lane: the block's absmax is a warp shuffle reduction (no block
// barrier), the codes move as one 8-byte load and store per lane and 16-bit weights and gradients as one 16-byte one,
// and a lane's 16 binary searches are independent chains the compiler interleaves. Same arithmetic per element as
// one thread per element; the absmax is a maximum, the same in any order.
constexpr int kPerLane = static_cast<int>(kAdamW8bitBlock) / 32;
constexpr int kWarps = 8;  // absmax blocks per CTA
constexpr int kThreads = 32 * kWarps;
static_assert(kThreads == 256, "the CTA loads the two 256-entry maps one entry per thread");

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

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// A lane's 8 elements [i, i + 8) of a tensor, moved as vectors of up to 16 bytes (the codes: one of 8) where `vector`
// (the whole run inside the tensor and the base aligned to the vector; i is a multiple of 8), else one by one up to n.
template <class T>
constexpr int kVector = 16 / sizeof(T) < kPerLane ? 16 / sizeof(T) : kPerLane;

template <class T>
__device__ __forceinline__ void load_run(const void* base, int64_t i, int64_t n, bool vector, T (&out)[kPerLane]) {
  constexpr int V = kVector<T>;
  if (vector) {
#pragma unroll
    for (int k = 0; k < kPerLane; k += V) {
      const Pack<T, V> p = load<T, V>(base, i + k);
#pragma unroll
      for (int j = 0; j < V; ++j) out[k + j] = p.v[j];
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) out[k] = i + k < n ? static_cast<const T*>(base)[i + k] : T{};
}
template <class T>
__device__ __forceinline__ void store_run(void* base, int64_t i, int64_t n, bool vector, const T (&in)[kPerLane]) {
  constexpr int V = kVector<T>;
  if (vector) {
#pragma unroll
    for (int k = 0; k < kPerLane; k += V) {
      Pack<T, V> p;
#pragma unroll
      for (int j = 0; j < V; ++j) p.v[j] = in[k + j];
      store<T, V>(base, i + k, p);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    if (i + k < n) static_cast<T*>(base)[i + k] = in[k];
  }
}

struct StepConstants {
  float correction2, step_size, inv_scale, decay;
};

__device__ __forceinline__ StepConstants step_constants(const AdamW8bitScalars& s) {
  const float step = fmaxf(s.step[0], 1.0f);  // a first step skipped by found_inf left the count at 0
  const float correction1 = 1.0f - __powf(s.beta1, step);
  const float correction2 = sqrtf(1.0f - __powf(s.beta2, step));
  return {correction2, __fdividef(-s.lr * correction2, correction1), s.grad_scale ? 1.0f / s.grad_scale[0] : 1.0f,
          1.0f - s.lr * s.weight_decay};
}

// Grid-stride over the absmax blocks, one per warp. `aligned`: every tensor's base allows the vector moves.
template <class T, bool kKahan>
__global__ void __launch_bounds__(kThreads) adamw_8bit_kernel(AdamW8bitTensors t, AdamW8bitScalars s, bool aligned) {
  if (s.found_inf && s.found_inf[0] != 0.0f) return;
  __shared__ float map1[256], map2[256];
  map1[threadIdx.x] = t.map1[threadIdx.x];
  map2[threadIdx.x] = t.map2[threadIdx.x];
  __syncthreads();
  const StepConstants c = step_constants(s);
  const int lane = threadIdx.x % 32;
  const int64_t blocks = (t.n + kAdamW8bitBlock - 1) / kAdamW8bitBlock;
  for (int64_t b = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; b < blocks; b += int64_t(gridDim.x) * kWarps) {
    const int64_t i = b * kAdamW8bitBlock + lane * kPerLane;
    const bool vector = aligned && i + kPerLane <= t.n;
    T grad[kPerLane], param[kPerLane], comp[kPerLane];
    uint8_t code1[kPerLane], code2[kPerLane];
    load_run(t.grad, i, t.n, vector, grad);
    load_run(t.codes1, i, t.n, vector, code1);
    load_run(t.codes2, i, t.n, vector, code2);
    float m[kPerLane], v[kPerLane];  // F32 moments
    bool live[kPerLane];
    float max_m = 0.0f, max_v = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const float g_raw = to_f(grad[k]);
      live[k] = i + k < t.n && isfinite(g_raw);
      const float g = g_raw * c.inv_scale;
      m[k] = v[k] = 0.0f;
      if (live[k]) {
        v[k] = map2[code2[k]] * t.absmax2[b];
        v[k] = v[k] * s.beta2 + (1.0f - s.beta2) * g * g;
        m[k] = map1[code1[k]] * t.absmax1[b];
        m[k] = m[k] * s.beta1 + (1.0f - s.beta1) * g;
      }
      max_m = fmaxf(max_m, fabsf(m[k]));
      max_v = fmaxf(max_v, fabsf(v[k]));
    }
    const float absmax_m = warp_max(max_m), absmax_v = warp_max(max_v);
    if (lane == 0) {
      t.absmax1[b] = absmax_m;
      t.absmax2[b] = absmax_v;
    }
    load_run(t.param, i, t.n, vector, param);
    if constexpr (kKahan) load_run(t.compensation, i, t.n, vector, comp);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      if (!live[k]) continue;  // the weight stays as it was
      const float p = to_f(param[k]);
      const float stepped = p + c.step_size * __fdividef(m[k], sqrtf(v[k]) + c.correction2 * s.eps);
      if constexpr (kKahan) {
        add_compensated(param[k], comp[k], p, (s.weight_decay > 0.0f ? stepped * c.decay : stepped) - p);
      } else {
        // As bitsandbytes: the stepped weight is stored in its dtype, then decayed from that value and stored again.
        T rounded = from_f<T>(stepped);
        if (s.weight_decay > 0.0f) rounded = from_f<T>(to_f(rounded) * c.decay);
        param[k] = rounded;
      }
    }
    store_run(t.param, i, t.n, vector, param);
    if constexpr (kKahan) store_run(t.compensation, i, t.n, vector, comp);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      code1[k] = signed_code(map1, m[k], absmax_m);
      code2[k] = static_cast<uint8_t>(nearest_code(map2, 0.0f, __fdividef(v[k], absmax_v)));
    }
    store_run(t.codes1, i, t.n, vector, code1);
    store_run(t.codes2, i, t.n, vector, code2);
  }
}

template <class T>
void launch(const AdamW8bitTensors& t, const AdamW8bitScalars& s, cudaStream_t stream) {
  const int64_t blocks = (t.n + kAdamW8bitBlock - 1) / kAdamW8bitBlock;
  if (blocks == 0) return;
  // Enough resident CTAs to fill the GPU (each loads the two maps once); longer tensors take the grid-stride loop.
  const int64_t ctas = (blocks + kWarps - 1) / kWarps;
  const unsigned grid = static_cast<unsigned>(ctas < 1024 ? ctas : 1024);
  // A lane's run starts at a multiple of 8 elements: its vectors need bases aligned to them (a gradient can be a view
  // into a DDP bucket at any element offset).
  constexpr uintptr_t kBytes = kVector<T> * sizeof(T);
  const bool aligned = aligned_to(t.param, kBytes) && aligned_to(t.grad, kBytes) &&
                       (t.compensation == nullptr || aligned_to(t.compensation, kBytes)) &&
                       aligned_to(t.codes1, kVector<uint8_t>) && aligned_to(t.codes2, kVector<uint8_t>);
  if (t.compensation != nullptr) {
    adamw_8bit_kernel<T, true><<<grid, kThreads, 0, stream>>>(t, s, aligned);
  } else {
    adamw_8bit_kernel<T, false><<<grid, kThreads, 0, stream>>>(t, s, aligned);
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
