// Cross-entropy over rows of logits in one CUDA kernel, for the fused loss of model/linear_cross_entropy.h: per row
// the F32 log-sum-exp and loss, and, in place of the logits, the gradient of the summed loss. Reads the logits twice
// and writes them once, where the ATen composite (upcast, log_softmax, gather, exp, scatter) moves ~4x the bytes.
// Plain CUDA: no LibTorch header.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

struct CrossEntropyRows {
  void* logits;           // [rows, cols], rows `ld` elements apart, in the kernel's dtype; the gradient when `grad`
  int64_t ld;             // row stride of logits in elements (>= cols)
  const int64_t* labels;  // I64 [rows]: a class in [0, cols) or ignore_index
  float* loss;            // F32 [rows]: logsumexp - logit[label]; 0 for an ignored row, NaN for a label out of range
  int64_t rows;
  int64_t cols;
  int64_t ignore_index;
  bool grad;  // overwrite logits with softmax - one_hot(label) (the label's entry rounded once from F32);
              // an ignored row becomes zeros
};

void cross_entropy_rows(const CrossEntropyRows& a, DType dtype, void* stream);

}  // namespace ft::kernels
