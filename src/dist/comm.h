// Collectives behind one interface, so the training loop reads the same for one process and for many.
// SingleProcessCommunicator needs no backend at all; C10dCommunicator (dist/c10d_comm.h) runs Gloo or NCCL.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/env.h"

namespace ft::dist {

enum class ReduceOp { kSum, kAvg, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "single", "gloo" or "nccl".
  virtual std::string backend() const = 0;
  // The device collectives run on (CPU for gloo and single, cuda:LOCAL_RANK for nccl).
  virtual at::Device device() const = 0;

  // In place on every rank. Tensors may be on any device; with NCCL, CPU tensors travel through the GPU.
  virtual void all_reduce_(std::vector<at::Tensor>& tensors, ReduceOp op) = 0;
  // Overwrites `tensors` on every rank with rank `root`'s values.
  virtual void broadcast_(std::vector<at::Tensor>& tensors, int root) = 0;
  virtual void barrier() = 0;
  // output [world_size * N] <- every rank's input [N], in rank order (contiguous, same dtype).
  virtual void all_gather(at::Tensor& output, const at::Tensor& input) = 0;
  // output [N] <- op over ranks of slice [rank * N, (rank + 1) * N) of input [world_size * N].
  virtual void reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) = 0;

  bool is_main() const { return rank() == 0; }
};

// World size 1: every collective is the identity (all_gather/reduce_scatter copy).
class SingleProcessCommunicator final : public Communicator {
 public:
  explicit SingleProcessCommunicator(at::Device device = at::kCPU) : device_(device) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "single"; }
  at::Device device() const override { return device_; }
  void all_reduce_(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  void broadcast_(std::vector<at::Tensor>& tensors, int root) override;
  void barrier() override {}
  void all_gather(at::Tensor& output, const at::Tensor& input) override;
  void reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) override;

 private:
  at::Device device_;
};

// "auto" -> nccl for a CUDA device, gloo otherwise; "nccl" | "gloo" as given. Throws ConfigError for other names
// and for nccl on a CPU device or a build without NCCL.
std::string resolve_backend(const std::string& backend, at::Device device);

// A single-process communicator when !env.distributed(), else a C10dCommunicator that has rendezvoused with
// all ranks (blocks until they arrive or `timeout` passes). For nccl, `device` must be cuda:LOCAL_RANK.
std::unique_ptr<Communicator> make_communicator(const DistEnv& env, const std::string& backend, at::Device device,
                                                std::chrono::seconds timeout);

// Every rank's `value`, in rank order, gathered on every rank (a collective: every rank calls it).
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& value);
// Rank 0's `value` on every rank (a collective; other ranks' values are ignored): one rank decides, e.g. after reading
// the shared run directory once, and every rank acts on the same answer.
std::string broadcast_string(Communicator& comm, const std::string& value);
nlohmann::json broadcast_json(Communicator& comm, const nlohmann::json& value);

// Host values summed element-wise over every rank in one collective (itself on a single process).
std::vector<double> all_reduce_sum(Communicator& comm, std::vector<double> values);
// Whether any rank has `flag` set (a collective).
bool any_rank(Communicator& comm, bool flag);

}  // namespace ft::dist
