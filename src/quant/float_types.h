// The floating-point dtypes the quantizers read and the dequantizers write (NF4 and FP8 alike).
#pragma once

#include <c10/core/ScalarType.h>

namespace ft::quant {

inline bool is_supported_float(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf;
}

}  // namespace ft::quant
