#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/add_rms_norm.h"
#include "kernels/block.cuh"
#include "kernels/convert.cuh"

namespace ft::kernels {
namespace {

// One block per row (forward) or per run of rows (backward); thread t owns the vectors t, t + B, ..., t + (K-1) B of
// V consecutive columns each, so a row stays in registers between its reduction and its second use, and a thread
// always sees the same columns (its weight-gradient partials need no atomics).
constexpr int kMaxBlock = 512;
constexpr int64_t kMaxCols = 16384;

template <class TR, class TD, class TW, class TO, int V, int K>
__global__ void __launch_bounds__(kMaxBlock) forward_kernel(AddRmsNormForward a) {
  const int64_t row = blockIdx.x, vecs = a.cols / V, base = row * a.cols;
  float s[K][V];
  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (j < vecs) {
      const auto r = load<TR, V>(a.residual, base + j * V);
      if (a.delta != nullptr) {
        const auto d = load<TD, V>(a.delta, base + j * V);
        Pack<TR, V> sum;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          sum.v[i] = from_f<TR>(to_f(r.v[i]) + to_f(d.v[i]));
          s[k][i] = to_f(sum.v[i]);  // the stored (rounded) sum, as the composite path normalizes it
        }
        store<TR, V>(a.sum, base + j * V, sum);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) s[k][i] = to_f(r.v[i]);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) squares += s[k][i] * s[k][i];
    }
  }
  const float rstd = rsqrtf(block_sum(squares) / static_cast<float>(a.cols) + a.eps);
  if (threadIdx.x == 0) a.rstd[row] = rstd;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (j < vecs) {
      const auto w = load<TW, V>(a.weight, j * V);
      Pack<TO, V> out;
#pragma unroll
      for (int i = 0; i < V; ++i) out.v[i] = from_f<TO>(s[k][i] * rstd * (to_f(w.v[i]) + a.weight_offset));
      store<TO, V>(a.normed, base + j * V, out);
    }
  }
}

// Rows [blockIdx.x * rows_per_block, ...): d sum = grad_sum + rstd * (g w) - sum * rstd^3 * mean(g w sum), and the
// block's partial weight gradient sum over its rows of g * (sum * rstd), in F32, written once at the end.
template <class TR, class TD, class TW, class TO, int V, int K>
__global__ void __launch_bounds__(kMaxBlock) backward_kernel(AddRmsNormBackward a, int64_t rows_per_block) {
  const int64_t vecs = a.cols / V;
  const int64_t first = blockIdx.x * rows_per_block;
  const int64_t last = first + rows_per_block < a.rows ? first + rows_per_block : a.rows;
  const float inv_cols = 1.0f / static_cast<float>(a.cols);
  float dw[K][V];
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int i = 0; i < V; ++i) dw[k][i] = 0.0f;
  }
  for (int64_t row = first; row < last; ++row) {
    const int64_t base = row * a.cols;
    const float rstd = a.rstd[row];
    float s[K][V], g[K][V];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j < vecs) {
        const auto sv = load<TR, V>(a.sum, base + j * V);
        const auto gv = load<TO, V>(a.grad_normed, base + j * V);
        const auto w = load<TW, V>(a.weight, j * V);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          s[k][i] = to_f(sv.v[i]);
          g[k][i] = to_f(gv.v[i]);
          dot += g[k][i] * (to_f(w.v[i]) + a.weight_offset) * s[k][i];
          dw[k][i] += g[k][i] * (s[k][i] * rstd);
        }
      }
    }
    const float c = block_sum(dot) * inv_cols * rstd * rstd * rstd;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j < vecs) {
        const auto w = load<TW, V>(a.weight, j * V);
        float gh[V];
#pragma unroll
        for (int i = 0; i < V; ++i) gh[i] = rstd * (g[k][i] * (to_f(w.v[i]) + a.weight_offset)) - s[k][i] * c;
        if (a.grad_sum != nullptr) {
          const auto gs = load<TR, V>(a.grad_sum, base + j * V);
#pragma unroll
          for (int i = 0; i < V; ++i) gh[i] += to_f(gs.v[i]);
        }
        Pack<TR, V> gr;
#pragma unroll
        for (int i = 0; i < V; ++i) gr.v[i] = from_f<TR>(gh[i]);
        store<TR, V>(a.grad_residual, base + j * V, gr);
        if (a.grad_delta != nullptr) {
          Pack<TD, V> gd;
#pragma unroll
          for (int i = 0; i < V; ++i) gd.v[i] = from_f<TD>(gh[i]);
          store<TD, V>(a.grad_delta, base + j * V, gd);
        }
      }
    }
  }
  if (a.weight_partial == nullptr) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (j < vecs) {
#pragma unroll
      for (int i = 0; i < V; ++i) a.weight_partial[blockIdx.x * a.cols + j * V + i] = dw[k][i];
    }
  }
}

// grad_weight[c] = sum over b of partial[b, c]: 32 columns per block, 8 lanes per column each summing every 8th
// partial row, then the 8 lane totals in lane order. Deterministic.
template <class TW>
__global__ void weight_grad_kernel(const float* partial, int64_t blocks, int64_t cols, void* grad_weight) {
  __shared__ float totals[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
    for (int64_t b = threadIdx.y; b < blocks; b += 8) acc += partial[b * cols + c];
  }
  totals[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
#pragma unroll
    for (int y = 0; y < 8; ++y) t += totals[y][threadIdx.x];
    static_cast<TW*>(grad_weight)[c] = from_f<TW>(t);
  }
}

// Calls f(TR{}, TD{}, TW{}, TO{}) for a supported combination; returns false otherwise.
template <class F>
bool dispatch_types(NormTypes t, F&& f) {
  const bool same = t.residual == t.delta && t.delta == t.weight && t.weight == t.out;
  if (same) {
    dispatch(t.residual, [&](auto z) { f(z, z, z, z); });
    return true;
  }
  const bool mixed = t.residual == DType::kF32 && t.weight == DType::kF32 && t.delta != DType::kF32;
  if (mixed && t.out == t.delta) {  // feeding GEMMs under autocast
    dispatch(t.delta, [&](auto z) { f(float{}, z, float{}, z); });
    return true;
  }
  if (mixed && t.out == DType::kF32) {  // the final norm under autocast: F32 hidden states
    dispatch(t.delta, [&](auto z) { f(float{}, z, float{}, float{}); });
    return true;
  }
  return false;
}

bool aligned(const void* p, size_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The shape of a launch: vector width V (8, else 1), vectors per thread K and threads per block.
struct Shape {
  int v, k, block;
};

Shape shape_of(int64_t cols, std::initializer_list<std::pair<const void*, size_t>> ptrs) {
  bool wide = cols % 8 == 0;
  for (const auto& [p, size] : ptrs) wide = wide && aligned(p, 8 * size);
  const int v = wide ? 8 : 1;
  const int64_t vecs = cols / v;
  for (int k = 1; k <= (wide ? 4 : 32); k *= 2) {
    const int64_t threads = (vecs + k - 1) / k;
    if (threads <= kMaxBlock) return {v, k, static_cast<int>(std::max<int64_t>(32, (threads + 31) / 32 * 32))};
  }
  throw std::runtime_error("add_rms_norm: " + std::to_string(cols) + " columns exceed the kernel's limit");
}

// Calls f(kernel-template tag) with V and K as compile-time constants.
template <int V, int K>
struct VK {
  static constexpr int v = V, k = K;
};
template <class F>
void dispatch_shape(const Shape& s, F&& f) {
  if (s.v == 8) {
    switch (s.k) {
      case 1:
        return f(VK<8, 1>{});
      case 2:
        return f(VK<8, 2>{});
      default:
        return f(VK<8, 4>{});
    }
  }
  switch (s.k) {
    case 1:
      return f(VK<1, 1>{});
    case 2:
      return f(VK<1, 2>{});
    case 4:
      return f(VK<1, 4>{});
    case 8:
      return f(VK<1, 8>{});
    case 16:
      return f(VK<1, 16>{});
    default:
      return f(VK<1, 32>{});
  }
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Row blocks of the backward: as many as the device keeps resident at once (capped by the rows).
template <class Kernel>
int64_t resident_blocks(Kernel kernel, int block, int64_t rows) {
  int device = 0, sms = 0, per_sm = 0;
  check(cudaGetDevice(&device), "add_rms_norm: cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "add_rms_norm: SM count");
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, 0), "add_rms_norm: occupancy");
  return std::max<int64_t>(1, std::min<int64_t>(rows, static_cast<int64_t>(sms) * std::max(per_sm, 1)));
}

}  // namespace

bool add_rms_norm_supported(NormTypes types) {
  return dispatch_types(types, [](auto, auto, auto, auto) {});
}

void add_rms_norm_forward(const AddRmsNormForward& a, NormTypes types, void* stream) {
  if (a.rows == 0 || a.cols == 0) return;
  if (a.cols > kMaxCols) throw std::runtime_error("add_rms_norm: more than 16384 columns");
  const bool ok = dispatch_types(types, [&](auto r, auto d, auto w, auto o) {
    using TR = decltype(r);
    using TD = decltype(d);
    using TW = decltype(w);
    using TO = decltype(o);
    const Shape s = shape_of(a.cols, {{a.residual, sizeof(TR)},
                                      {a.delta, sizeof(TD)},
                                      {a.weight, sizeof(TW)},
                                      {a.sum, sizeof(TR)},
                                      {a.normed, sizeof(TO)}});
    dispatch_shape(s, [&](auto vk) {
      using P = decltype(vk);
      forward_kernel<TR, TD, TW, TO, P::v, P::k>
          <<<static_cast<unsigned>(a.rows), s.block, 0, static_cast<cudaStream_t>(stream)>>>(a);
    });
  });
  if (!ok) throw std::runtime_error("add_rms_norm: unsupported dtype combination");
  check_launch("add_rms_norm forward kernel");
}

namespace {

template <class F>
void with_backward_kernel(const AddRmsNormBackward& a, NormTypes types, F&& f) {
  const bool ok = dispatch_types(types, [&](auto r, auto d, auto w, auto o) {
    using TR = decltype(r);
    using TD = decltype(d);
    using TW = decltype(w);
    using TO = decltype(o);
    const Shape s = shape_of(a.cols, {{a.grad_sum, sizeof(TR)},
                                      {a.grad_normed, sizeof(TO)},
                                      {a.sum, sizeof(TR)},
                                      {a.weight, sizeof(TW)},
                                      {a.grad_residual, sizeof(TR)},
                                      {a.grad_delta, sizeof(TD)},
                                      {a.weight_partial, sizeof(float)}});
    dispatch_shape(s, [&](auto vk) {
      using P = decltype(vk);
      f(backward_kernel<TR, TD, TW, TO, P::v, P::k>, s.block, w);
    });
  });
  if (!ok) throw std::runtime_error("add_rms_norm: unsupported dtype combination");
}

}  // namespace

int64_t add_rms_norm_backward_blocks(int64_t rows, int64_t cols, NormTypes types) {
  if (rows == 0 || cols == 0) return 0;
  if (cols > kMaxCols) throw std::runtime_error("add_rms_norm: more than 16384 columns");
  // The occupancy depends on the kernel, not the pointers: ask with the aligned (widest) variant's shape the
  // backward will pick for freshly allocated tensors; the partial count only has to be fixed, not optimal.
  AddRmsNormBackward probe{};
  probe.cols = cols;
  int64_t blocks = 1;
  with_backward_kernel(probe, types,
                       [&](auto kernel, int block, auto) { blocks = resident_blocks(kernel, block, rows); });
  return blocks;
}

void add_rms_norm_backward(const AddRmsNormBackward& a, NormTypes types, void* stream) {
  if (a.rows == 0 || a.cols == 0) return;
  if (a.cols > kMaxCols) throw std::runtime_error("add_rms_norm: more than 16384 columns");
  const int64_t blocks = add_rms_norm_backward_blocks(a.rows, a.cols, types);
  const int64_t rows_per_block = (a.rows + blocks - 1) / blocks;
  const auto st = static_cast<cudaStream_t>(stream);
  with_backward_kernel(a, types, [&](auto kernel, int block, auto w) {
    kernel<<<static_cast<unsigned>(blocks), block, 0, st>>>(a, rows_per_block);
    check_launch("add_rms_norm backward kernel");
    if (a.weight_partial == nullptr) return;
    using TW = decltype(w);
    const dim3 threads(32, 8);
    weight_grad_kernel<TW><<<static_cast<unsigned>((a.cols + 31) / 32), threads, 0, st>>>(a.weight_partial, blocks,
                                                                                          a.cols, a.grad_weight);
    check_launch("add_rms_norm weight gradient kernel");
  });
}

}  // namespace ft::kernels
