// Checks that turn CUDA runtime status codes into ft::Error with file and line.
#pragma once

#ifdef FT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <string>

#include "util/error.h"

#define FT_CHECK_CUDA(expr)                                                                   \
  do {                                                                                        \
    const cudaError_t ft_status_ = (expr);                                                    \
    if (ft_status_ != cudaSuccess)                                                            \
      ::ft::detail::check_failed(__FILE__, __LINE__, #expr,                                   \
                                 std::string("CUDA error: ") + cudaGetErrorString(ft_status_)); \
  } while (false)
#endif
