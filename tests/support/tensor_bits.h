// Bit-for-bit comparison of tensors, for tests against reference implementations.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ft::test {

// Same dtype, shape and bytes (so -0.0 != 0.0 and NaN payloads count); on a mismatch, the first differing element.
inline ::testing::AssertionResult bits_equal(const at::Tensor& ours, const at::Tensor& theirs) {
  if (ours.scalar_type() != theirs.scalar_type()) {
    return ::testing::AssertionFailure() << "dtype " << ours.scalar_type() << " vs " << theirs.scalar_type();
  }
  if (ours.sizes() != theirs.sizes()) {
    return ::testing::AssertionFailure() << "shape " << ours.sizes() << " vs " << theirs.sizes();
  }
  const auto as_ints = [](const at::Tensor& t) {
    const at::Tensor c = t.contiguous().reshape({-1});
    switch (c.element_size()) {
      case 1:
        return c.view(at::kByte).to(at::kLong);
      case 2:
        return c.view(at::kShort).to(at::kLong);
      default:
        return c.view(at::kInt).to(at::kLong);
    }
  };
  const at::Tensor diff = (as_ints(ours) != as_ints(theirs)).nonzero();
  if (diff.numel() == 0) return ::testing::AssertionSuccess();
  const int64_t i = diff[0].item<int64_t>();
  const at::Tensor a = ours.reshape({-1}), b = theirs.reshape({-1});
  return ::testing::AssertionFailure() << diff.numel() << " of " << ours.numel() << " elements differ, first at " << i
                                       << ": " << a[i].item<double>() << " vs " << b[i].item<double>();
}

}  // namespace ft::test
