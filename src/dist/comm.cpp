#include "dist/comm.h"

#include <cstring>

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

std::vector<std::string> all_gather_strings(dist::Communicator& comm, const std::string& value) {
  if (comm.world_size() == 1) return {value};
  auto length = at::full({1}, static_cast<int64_t>(value.size()), at::kLong);
  std::vector<at::Tensor> lengths{length};
  comm.all_reduce_(lengths, dist::ReduceOp::kMax);
  const int64_t max_len = lengths[0].item<int64_t>() + 8;
  auto local = at::zeros({max_len}, at::kByte);  // U8 [max_len]: 8-byte length, then the bytes
  const auto size = static_cast<int64_t>(value.size());
  std::memcpy(local.data_ptr<uint8_t>(), &size, sizeof(size));
  std::memcpy(local.data_ptr<uint8_t>() + 8, value.data(), value.size());
  auto gathered = at::zeros({max_len * comm.world_size()}, at::kByte);
  auto local_dev = local.to(comm.device());
  auto gathered_dev = gathered.to(comm.device());
  comm.all_gather(gathered_dev, local_dev);
  gathered = gathered_dev.cpu();
  std::vector<std::string> out;
  for (int r = 0; r < comm.world_size(); ++r) {
    const uint8_t* base = gathered.data_ptr<uint8_t>() + r * max_len;
    int64_t n = 0;
    std::memcpy(&n, base, sizeof(n));
    out.emplace_back(reinterpret_cast<const char*>(base + 8), static_cast<size_t>(n));
  }
  return out;
}

std::string broadcast_string(Communicator& comm, const std::string& value) {
  if (comm.world_size() == 1) return value;
  return all_gather_strings(comm, comm.rank() == 0 ? value : std::string()).at(0);
}

nlohmann::json broadcast_json(Communicator& comm, const nlohmann::json& value) {
  return nlohmann::json::parse(broadcast_string(comm, comm.rank() == 0 ? value.dump() : std::string()));
}

std::vector<double> all_reduce_sum(Communicator& comm, std::vector<double> values) {
  if (comm.world_size() == 1) return values;
  std::vector<at::Tensor> t{at::tensor(values, at::TensorOptions().dtype(at::kDouble))};
  comm.all_reduce_(t, ReduceOp::kSum);
  const auto summed = t[0].cpu();
  return std::vector<double>(summed.data_ptr<double>(), summed.data_ptr<double>() + summed.numel());
}

bool any_rank(Communicator& comm, bool flag) {
  return all_reduce_sum(comm, {flag ? 1.0 : 0.0})[0] > 0.0;
}

}  // namespace ft::dist
