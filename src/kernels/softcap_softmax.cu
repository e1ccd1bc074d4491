#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/softcap_softmax.h"

namespace ft::kernels {
namespace {

constexpr int kMaxBlock = 512;

// The columns a row may see: [0, end); a causal row ends after its own position.
__device__ __forceinline__ int64_t visible_end(const SoftcapRows& a, int64_t query) {
  if (!a.causal) return a.cols;
  return max(int64_t{0}, min(a.cols, query + a.offset + 1));
}

// One block per row; thread t takes the vectors t, t + B, ... of V columns. Pass 1 reads the visible vectors for the
// row's max and sum, pass 2 reads them again (from cache) and writes t and the probabilities.
template <class T, int V>
__global__ void __launch_bounds__(kMaxBlock) forward_kernel(SoftcapRows a, T* scores, T* probs) {
  const int64_t row = blockIdx.x, query = row % a.queries;
  T* s = scores + row * a.cols;
  T* p = probs + row * a.cols;
  const bool* m = a.mask ? a.mask + (row / a.rows_per_batch) * a.mask_batch_stride + query * a.cols : nullptr;
  const int64_t end = visible_end(a, query), vecs = a.cols / V, live = (end + V - 1) / V;
  const float k = a.scale / a.cap;
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t j = threadIdx.x; j < live; j += blockDim.x) {
    const Pack<T, V> x = load<T, V>(s, j * V);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t c = j * V + i;
      if (c < end && (m == nullptr || m[c])) acc = add_value(acc, a.cap * tanhf(to_f(x.v[i]) * k));
    }
  }
  const MaxSum total = block_max_sum(acc);
  const float inv = total.s > 0.0f ? 1.0f / total.s : 0.0f;
  for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
    Pack<T, V> out;
    if (j < live) {
      Pack<T, V> x = load<T, V>(s, j * V);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int64_t c = j * V + i;
        const float t = tanhf(to_f(x.v[i]) * k);
        x.v[i] = from_f<T>(t);
        const bool seen = c < end && (m == nullptr || m[c]);
        out.v[i] = from_f<T>(seen ? __expf(a.cap * t - total.m) * inv : 0.0f);
      }
      store<T, V>(s, j * V, x);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) out.v[i] = from_f<T>(0.0f);
    }
    store<T, V>(p, j * V, out);
  }
}

// One block per row: dot = sum(grad probs) over the visible columns, then grad <- probs (grad - dot) (1 - t^2) scale.
template <class T, int V>
__global__ void __launch_bounds__(kMaxBlock) backward_kernel(SoftcapRows a, const T* tanh_s, const T* probs, T* grad) {
  const int64_t row = blockIdx.x, query = row % a.queries;
  const T* t = tanh_s + row * a.cols;
  const T* p = probs + row * a.cols;
  T* g = grad + row * a.cols;
  const int64_t end = visible_end(a, query), vecs = a.cols / V, live = (end + V - 1) / V;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < live; j += blockDim.x) {
    const Pack<T, V> gp = load<T, V>(g, j * V), pp = load<T, V>(p, j * V);
#pragma unroll
    for (int i = 0; i < V; ++i) dot += to_f(gp.v[i]) * to_f(pp.v[i]);
  }
  dot = block_sum(dot);
  for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
    Pack<T, V> out;
    if (j < live) {
      const Pack<T, V> gp = load<T, V>(g, j * V), pp = load<T, V>(p, j * V), tp = load<T, V>(t, j * V);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float pr = to_f(pp.v[i]), th = to_f(tp.v[i]);
        // probs is 0 wherever the row cannot see (masked, or past the causal end where t holds raw scores).
        out.v[i] = from_f<T>(pr == 0.0f ? 0.0f : pr * (to_f(gp.v[i]) - dot) * (1.0f - th * th) * a.scale);
      }
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) out.v[i] = from_f<T>(0.0f);
    }
    store<T, V>(g, j * V, out);
  }
}

// Threads per row: enough for about two vectors each, a multiple of 32, at most kMaxBlock.
int block_for(int64_t vecs) {
  const int64_t want = (vecs + 1) / 2;
  return static_cast<int>(std::min<int64_t>(kMaxBlock, std::max<int64_t>(32, (want + 31) / 32 * 32)));
}

template <class T>
bool aligned(int64_t cols, std::initializer_list<const void*> ptrs) {
  constexpr int kWide = 16 / sizeof(T);
  if (cols % kWide != 0) return false;
  for (const void* q : ptrs) {
    if (reinterpret_cast<uintptr_t>(q) % 16 != 0) return false;
  }
  return true;
}

// Calls launch(V, threads) with V the widest vector (16 bytes of T) that the row length and every pointer allow,
// else 1, and the block size for rows of that many vectors.
template <class T, class Launch>
void launch_rows(const SoftcapRows& a, std::initializer_list<const void*> ptrs, Launch&& launch) {
  constexpr int kWide = 16 / sizeof(T);
  if (aligned<T>(a.cols, ptrs)) {
    launch(std::integral_constant<int, kWide>{}, block_for(a.cols / kWide));
  } else {
    launch(std::integral_constant<int, 1>{}, block_for(a.cols));
  }
}

void check_rows(const SoftcapRows& a, const char* what) {
  if (a.rows > 0x7fffffff) throw std::runtime_error(std::string(what) + ": more than 2^31 - 1 rows");
  if (a.cols <= 0 || a.queries <= 0 || a.rows_per_batch <= 0 || a.rows_per_batch % a.queries != 0) {
    throw std::runtime_error(std::string(what) + ": bad row layout");
  }
  if (!(a.cap > 0.0f)) throw std::runtime_error(std::string(what) + ": the soft-cap must be positive");
}

}  // namespace

void softcap_softmax_forward(const SoftcapRows& a, void* scores, void* probs, DType dtype, void* stream) {
  check_rows(a, "softcap_softmax_forward");
  if (a.rows == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    launch_rows<T>(a, {scores, probs}, [&](auto v, int block) {
      forward_kernel<T, decltype(v)::value>
          <<<static_cast<unsigned>(a.rows), block, 0, st>>>(a, static_cast<T*>(scores), static_cast<T*>(probs));
    });
  });
  check_launch("softcap_softmax forward kernel");
}

void softcap_softmax_backward(const SoftcapRows& a, const void* t, const void* probs, void* grad, DType dtype,
                              void* stream) {
  check_rows(a, "softcap_softmax_backward");
  if (a.rows == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    launch_rows<T>(a, {t, probs, grad}, [&](auto v, int block) {
      backward_kernel<T, decltype(v)::value><<<static_cast<unsigned>(a.rows), block, 0, st>>>(
          a, static_cast<const T*>(t), static_cast<const T*>(probs), static_cast<T*>(grad));
    });
  });
  check_launch("softcap_softmax backward kernel");
}

}  // namespace ft::kernels
