// The cross-entropy kernel's ATen glue (model/linear_cross_entropy.h); only in builds with the kernels.
#include "kernels/cross_entropy.h"
#include "model/kernel_dtype.h"
#include "model/linear_cross_entropy.h"
#include "util/error.h"

namespace ft::model {

bool fused_cross_entropy_rows_available(const at::Tensor& logits) {
  return logits.is_cuda() && logits.dim() == 2 && kernel_supports(logits.scalar_type()) && logits.stride(1) == 1;
}

at::Tensor fused_cross_entropy_rows(at::Tensor& logits, const at::Tensor& labels, int64_t ignore_index, bool grad) {
  FT_CHECK(fused_cross_entropy_rows_available(logits), "fused cross-entropy: logits must be a CUDA [n, V] matrix");
  const at::Tensor label = labels.contiguous();                                           // I64 [n]
  at::Tensor row_loss = at::empty({logits.size(0)}, logits.options().dtype(at::kFloat));  // F32 [n]
  kernels::CrossEntropyRows a{logits.data_ptr(),
                              logits.stride(0),
                              label.data_ptr<int64_t>(),
                              row_loss.data_ptr<float>(),
                              logits.size(0),
                              logits.size(1),
                              ignore_index,
                              grad};
  kernels::cross_entropy_rows(a, kernel_dtype(logits.scalar_type()), stream_of(logits));
  return row_loss;
}

}  // namespace ft::model
