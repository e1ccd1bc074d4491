#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/block.cuh"
#include "kernels/convert.cuh"
#include "kernels/swiglu.h"

namespace ft::kernels {
namespace {

template <class T, int V>
__device__ __forceinline__ Pack<T, V> load(const Matrix& m, int64_t row, int64_t col) {
  return *reinterpret_cast<const Pack<T, V>*>(static_cast<const T*>(m.data) + row * m.ld + col);
}
template <class T, int V>
__device__ __forceinline__ void store(const Matrix& m, int64_t row, int64_t col, const Pack<T, V>& p) {
  *reinterpret_cast<Pack<T, V>*>(static_cast<T*>(m.data) + row * m.ld + col) = p;
}

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + __expf(-x));
}

// The tanh approximation of GELU as PyTorch's CUDA kernel computes it: 0.5 x (1 + tanh(sqrt(2/pi) (x + k x^3))).
constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
  const float inner = kGeluBeta * (x + kGeluKappa * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// d gelu_tanh / dx, in the order of PyTorch's GeluBackwardCUDAKernelImpl.
__device__ __forceinline__ float gelu_tanh_slope(float x) {
  const float x_sq = x * x;
  const float inner = kGeluBeta * (x + kGeluKappa * x_sq * x);
  const float t = tanhf(inner);
  const float left = 0.5f * x;
  const float right = 1.0f + t;
  return 0.5f * right + left * (1.0f - t * t) * (kGeluBeta * (1.0f + 3.0f * kGeluKappa * x_sq));
}

// One thread per V consecutive columns of one row, over a grid of at most kMaxBlocks blocks (grid-stride), so an
// amax costs one atomic per block. The amax is of the rounded outputs, as a later pass over them would find it.
template <class T, int V, GateAct A>
__global__ void forward_kernel(Matrix gate, Matrix up, Matrix out, float* amax, int64_t rows, int64_t vec_cols) {
  float m = 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * vec_cols; i += stride) {
    const int64_t row = i / vec_cols, col = (i % vec_cols) * V;
    const auto g = load<T, V>(gate, row, col), u = load<T, V>(up, row, col);
    Pack<T, V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float gf = to_f(g.v[k]);
      if constexpr (A == GateAct::kSilu) {
        y.v[k] = from_f<T>(gf * sigmoid(gf) * to_f(u.v[k]));
      } else {
        y.v[k] = from_f<T>(gelu_tanh(gf) * to_f(u.v[k]));
      }
      m = fmaxf(m, fabsf(to_f(y.v[k])));
    }
    store<T, V>(out, row, col, y);
  }
  if (amax == nullptr) return;  // the same for the whole block
  m = block_max(m);
  if (threadIdx.x == 0) atomic_max_nonneg(amax, m);
}

template <class T, int V, GateAct A>
__global__ void backward_kernel(Matrix d_out, Matrix gate, Matrix up, Matrix d_gate, Matrix d_up, float* d_gate_amax,
                                float* d_up_amax, int64_t rows, int64_t vec_cols) {
  float mg = 0.0f, mu = 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * vec_cols; i += stride) {
    const int64_t row = i / vec_cols, col = (i % vec_cols) * V;
    const auto d = load<T, V>(d_out, row, col), g = load<T, V>(gate, row, col), u = load<T, V>(up, row, col);
    Pack<T, V> dg, du;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float gf = to_f(g.v[k]), df = to_f(d.v[k]);
      if constexpr (A == GateAct::kSilu) {
        const float s = sigmoid(gf);
        du.v[k] = from_f<T>(df * gf * s);
        dg.v[k] = from_f<T>(df * to_f(u.v[k]) * s * (1.0f + gf * (1.0f - s)));
      } else {
        du.v[k] = from_f<T>(df * gelu_tanh(gf));
        dg.v[k] = from_f<T>(df * to_f(u.v[k]) * gelu_tanh_slope(gf));
      }
      mg = fmaxf(mg, fabsf(to_f(dg.v[k])));
      mu = fmaxf(mu, fabsf(to_f(du.v[k])));
    }
    store<T, V>(d_gate, row, col, dg);
    store<T, V>(d_up, row, col, du);
  }
  if (d_gate_amax == nullptr) return;  // the same for the whole block
  mg = block_max(mg);
  mu = block_max(mu);
  if (threadIdx.x == 0) {
    atomic_max_nonneg(d_gate_amax, mg);
    atomic_max_nonneg(d_up_amax, mu);
  }
}

// The widest vector (16 bytes) every matrix allows: aligned pointers and row strides, and cols divisible by it.
template <class T>
int vector_width(int64_t cols, std::initializer_list<Matrix> ms) {
  int v = static_cast<int>(16 / sizeof(T));
  auto fits = [&](int w) {
    if (cols % w != 0) return false;
    for (const Matrix& m : ms) {
      if (reinterpret_cast<uintptr_t>(m.data) % (w * sizeof(T)) != 0 || m.ld % w != 0) return false;
    }
    return true;
  };
  while (v > 1 && !fits(v)) v /= 2;
  return v;
}

constexpr int64_t kMaxBlocks = 4096;

template <class T, int V, class K, class... Args>
void launch_v(K kernel, int64_t rows, int64_t cols, cudaStream_t stream, Args... args) {
  const int64_t threads = rows * (cols / V);
  if (threads == 0) return;
  constexpr int kBlock = 256;
  const int64_t blocks = std::min((threads + kBlock - 1) / kBlock, kMaxBlocks);
  kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(args..., rows, cols / V);
}

}  // namespace

namespace {

// Calls f(std::integral_constant<int, V>()) for the widest vector V that the matrices allow.
template <class T, class F>
void with_vector_width(int64_t cols, std::initializer_list<Matrix> ms, F f) {
  switch (vector_width<T>(cols, ms)) {
    case 8:
      return f(std::integral_constant<int, 8>());
    case 4:
      return f(std::integral_constant<int, 4>());
    case 2:
      return f(std::integral_constant<int, 2>());
    default:
      return f(std::integral_constant<int, 1>());
  }
}

template <class T, GateAct A>
void forward_t(Matrix gate, Matrix up, Matrix out, float* amax, int64_t rows, int64_t cols, cudaStream_t st) {
  with_vector_width<T>(cols, {gate, up, out}, [&](auto v) {
    constexpr int V = decltype(v)::value;
    launch_v<T, V>(forward_kernel<T, V, A>, rows, cols, st, gate, up, out, amax);
  });
}

template <class T, GateAct A>
void backward_t(Matrix d_out, Matrix gate, Matrix up, Matrix d_gate, Matrix d_up, GradAmax amax, int64_t rows,
                int64_t cols, cudaStream_t st) {
  with_vector_width<T>(cols, {d_out, gate, up, d_gate, d_up}, [&](auto v) {
    constexpr int V = decltype(v)::value;
    launch_v<T, V>(backward_kernel<T, V, A>, rows, cols, st, d_out, gate, up, d_gate, d_up, amax.d_gate, amax.d_up);
  });
}

}  // namespace

void swiglu_forward(Matrix gate, Matrix up, Matrix out, int64_t rows, int64_t cols, DType dtype, void* stream,
                    GateAct act, float* out_amax) {
  auto st = static_cast<cudaStream_t>(stream);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    if (act == GateAct::kGeluTanh) {
      forward_t<T, GateAct::kGeluTanh>(gate, up, out, out_amax, rows, cols, st);
    } else {
      forward_t<T, GateAct::kSilu>(gate, up, out, out_amax, rows, cols, st);
    }
  });
  check_launch("gated activation forward kernel");
}

void swiglu_backward(Matrix d_out, Matrix gate, Matrix up, Matrix d_gate, Matrix d_up, int64_t rows, int64_t cols,
                     DType dtype, void* stream, GateAct act, GradAmax amax) {
  auto st = static_cast<cudaStream_t>(stream);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    if (act == GateAct::kGeluTanh) {
      backward_t<T, GateAct::kGeluTanh>(d_out, gate, up, d_gate, d_up, amax, rows, cols, st);
    } else {
      backward_t<T, GateAct::kSilu>(d_out, gate, up, d_gate, d_up, amax, rows, cols, st);
    }
  });
  check_launch("gated activation backward kernel");
}

}  // namespace ft::kernels
