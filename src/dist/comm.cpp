#include "dist/comm.h"

#include <fmt/format.h>

#include "util/error.h"

namespace ft::dist {

void SingleProcessCommunicator::all_reduce_(std::vector<at::Tensor>& tensors, ReduceOp op) {
  (void)tensors;  // sum, mean and max over one rank are the identity
  (void)op;
}

void SingleProcessCommunicator::broadcast_(std::vector<at::Tensor>& tensors, int root) {
  (void)tensors;
  FT_CHECK(root == 0, fmt::format("broadcast root {} in a single-process run", root));
}

void SingleProcessCommunicator::all_gather(at::Tensor& output, const at::Tensor& input) {
  FT_CHECK(output.numel() == input.numel(), "all_gather: output must hold world_size * input.numel() elements");
  output.view({-1}).copy_(input.reshape({-1}));
}

void SingleProcessCommunicator::reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  (void)op;
  FT_CHECK(output.numel() == input.numel(), "reduce_scatter: input must hold world_size * output.numel() elements");
  output.view({-1}).copy_(input.reshape({-1}));
}

std::string resolve_backend(const std::string& backend, at::Device device) {
  if (backend == "auto") return device.is_cuda() ? "nccl" : "gloo";
  if (backend == "gloo") return backend;
  if (backend == "nccl") {
    if (!device.is_cuda()) {
      throw ConfigError("distributed.backend: nccl needs a CUDA device, but run.device resolved to " + device.str(),
                        "use distributed.backend: gloo (or auto) on CPU");
    }
#if !defined(FT_WITH_CUDA) || !defined(FT_WITH_NCCL_HEADERS)
    throw ConfigError("distributed.backend: nccl, but this build has no NCCL support",
                      "rebuild with the CUDA toolkit and NCCL headers, or use gloo");
#endif
    return backend;
  }
  throw ConfigError(fmt::format("distributed.backend: unknown backend '{}'", backend), "use auto, nccl or gloo");
}

}  // namespace ft::dist
