// Element types of the plain CUDA kernels (no LibTorch types cross this boundary).
#pragma once

namespace ft::kernels {

enum class DType { kF32, kBF16, kF16 };

}  // namespace ft::kernels
