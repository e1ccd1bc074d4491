#include <cstdint>
#include <stdexcept>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/moe_rows.h"

namespace ft::kernels {
namespace {

// A product rounded to T, read back as F32 (what an ATen product in T stores).
template <class T>
__device__ __forceinline__ float rounded(float v) {
  return to_f(from_f<T>(v));
}

// One block per token: V columns per thread and pass, the k rows summed in order.
template <class T, class W, int V>
__global__ void combine_kernel(const T* y, const W* w, const int64_t* inverse, int k, int64_t hidden, T* out) {
  const int64_t t = blockIdx.x;
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < hidden; c += static_cast<int64_t>(blockDim.x) * V) {
    float acc[V] = {};
    for (int j = 0; j < k; ++j) {
      const int64_t s = inverse[t * k + j];
      const auto p = load<T, V>(y, s * hidden + c);
      if (w != nullptr) {
        const float wv = to_f(w[s]);
        for (int i = 0; i < V; ++i) acc[i] += rounded<T>(__fmul_rn(to_f(p.v[i]), wv));  // no FMA: ATen rounds it
      } else {
        for (int i = 0; i < V; ++i) acc[i] += to_f(p.v[i]);
      }
    }
    Pack<T, V> q;
    for (int i = 0; i < V; ++i) q.v[i] = from_f<T>(acc[i]);
    store<T, V>(out, t * hidden + c, q);
  }
}

// One block per slot: the token's gradient row read once for both outputs.
template <class T, class W, int V>
__global__ void combine_backward_kernel(const T* grad_out, const T* y, const W* w, const int64_t* order, int k,
                                        int64_t hidden, T* grad_y, float* grad_w) {
  const int64_t s = blockIdx.x, t = order[s] / k;
  const float wv = to_f(w[s]);
  float dot = 0.0f;
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < hidden; c += static_cast<int64_t>(blockDim.x) * V) {
    const auto g = load<T, V>(grad_out, t * hidden + c);
    const auto p = load<T, V>(y, s * hidden + c);
    Pack<T, V> q;
    for (int i = 0; i < V; ++i) {
      const float gv = to_f(g.v[i]);
      q.v[i] = from_f<T>(gv * wv);
      dot += rounded<W>(__fmul_rn(gv, to_f(p.v[i])));  // the product rounded before the sum, as ATen's
    }
    store<T, V>(grad_y, s * hidden + c, q);
  }
  dot = block_sum(dot);
  if (threadIdx.x == 0) grad_w[s] = dot;
}

// Elements per 16-byte access where every row start is 16-byte aligned, else 1.
template <class T>
int vector_width(int64_t hidden, const void* a, const void* b) {
  constexpr int v = 16 / sizeof(T);
  const bool ok =
      hidden % v == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  return ok ? v : 1;
}

// Threads per block: enough for one pass over the row at `v` per thread, a multiple of 32, at most 256.
unsigned threads_for(int64_t hidden, int v) {
  const int64_t per_pass = (hidden / v + 31) / 32 * 32;
  return static_cast<unsigned>(per_pass < 32 ? 32 : (per_pass > 256 ? 256 : per_pass));
}

// Calls f(T{}, W{}) for the row dtype and the weights' dtype (F32, or the rows' own).
template <class F>
void dispatch_pair(DType dtype, DType w_dtype, F&& f) {
  if (w_dtype != DType::kF32 && w_dtype != dtype) {
    throw std::invalid_argument("moe rows: the weights' dtype must be F32 or the rows' own");
  }
  dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    if (w_dtype == DType::kF32) {
      f(T{}, float{});
    } else {
      f(T{}, T{});
    }
  });
}

}  // namespace

void moe_combine_rows(const void* y, const void* w, DType w_dtype, const int64_t* inverse, int64_t n, int64_t k,
                      int64_t hidden, void* out, DType dtype, void* stream) {
  if (n == 0 || hidden == 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  dispatch_pair(dtype, w_dtype, [&](auto t, auto wt) {
    using T = decltype(t);
    using W = decltype(wt);
    const auto* yt = static_cast<const T*>(y);
    const auto* ww = static_cast<const W*>(w);
    auto* o = static_cast<T*>(out);
    const int kk = static_cast<int>(k);
    const auto blocks = static_cast<unsigned>(n);
    if (vector_width<T>(hidden, y, out) > 1) {
      constexpr int v = 16 / sizeof(T);
      combine_kernel<T, W, v><<<blocks, threads_for(hidden, v), 0, st>>>(yt, ww, inverse, kk, hidden, o);
    } else {
      combine_kernel<T, W, 1><<<blocks, threads_for(hidden, 1), 0, st>>>(yt, ww, inverse, kk, hidden, o);
    }
  });
  check_launch("moe_combine_rows");
}

void moe_combine_rows_backward(const void* grad_out, const void* y, const void* w, DType w_dtype, const int64_t* order,
                               int64_t slots, int64_t k, int64_t hidden, void* grad_y, float* grad_w, DType dtype,
                               void* stream) {
  if (slots == 0 || hidden == 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  dispatch_pair(dtype, w_dtype, [&](auto t, auto wt) {
    using T = decltype(t);
    using W = decltype(wt);
    const auto* g = static_cast<const T*>(grad_out);
    const auto* yt = static_cast<const T*>(y);
    const auto* ww = static_cast<const W*>(w);
    auto* gy = static_cast<T*>(grad_y);
    const int kk = static_cast<int>(k);
    const auto blocks = static_cast<unsigned>(slots);
    if (vector_width<T>(hidden, grad_out, y) > 1 && vector_width<T>(hidden, grad_y, grad_y) > 1) {
      constexpr int v = 16 / sizeof(T);
      combine_backward_kernel<T, W, v>
          <<<blocks, threads_for(hidden, v), 0, st>>>(g, yt, ww, order, kk, hidden, gy, grad_w);
    } else {
      combine_backward_kernel<T, W, 1>
          <<<blocks, threads_for(hidden, 1), 0, st>>>(g, yt, ww, order, kk, hidden, gy, grad_w);
    }
  });
  check_launch("moe_combine_rows_backward");
}

}  // namespace ft::kernels
