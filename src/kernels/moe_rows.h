// The row traffic of a mixture-of-experts layer around its grouped GEMMs (model/moe_rows.h): summing each token's k
// expert rows back into one, optionally weighted by the router, and that sum's backward. One pass over the rows
// instead of ATen's product, permutation copy, and sum over k (three [S, hidden] round trips forward, more backward).
// Plain CUDA: no LibTorch header; the caller passes raw pointers and a stream. Rows are contiguous, `hidden` apart.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// out [n, hidden] (dtype): out[t] = sum over j < k of rnd(y[s] * w[s]) with s = inverse[t k + j], in F32 in the
// order j = 0, 1, ... and rounded once; rnd rounds the product to dtype. y [S, hidden] (dtype); w [S] in w_dtype
// (dtype or F32), or null for unit weights (no product, no rounding); inverse I64 [n k].
void moe_combine_rows(const void* y, const void* w, DType w_dtype, const int64_t* inverse, int64_t n, int64_t k,
                      int64_t hidden, void* out, DType dtype, void* stream);

// The backward of the weighted moe_combine_rows, slot by slot: with t = order[s] / k the token of slot s,
// grad_y[s] = rnd(grad_out[t] * w[s]) (dtype) and grad_w[s] = sum over the row of rnd_w(grad_out[t] * y[s]) in F32
// (rnd_w rounds to w_dtype, as a product in w's dtype is). grad_out [n, hidden], y and grad_y [S, hidden] (dtype),
// w [S] (w_dtype), order I64 [S], grad_w F32 [S].
void moe_combine_rows_backward(const void* grad_out, const void* y, const void* w, DType w_dtype, const int64_t* order,
                               int64_t slots, int64_t k, int64_t hidden, void* grad_y, float* grad_w, DType dtype,
                               void* stream);

}  // namespace ft::kernels
