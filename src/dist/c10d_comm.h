// The multi-process Communicator: TCPStore rendezvous, then ProcessGroupGloo (CPU) or ProcessGroupNCCL (CUDA),
// wrapped in a c10d::ProcessGroup that DistributedDataParallel hands to c10d::Reducer.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "dist/comm.h"
#include "util/error.h"

namespace ft::dist {

class C10dCommunicator final : public Communicator {
 public:
  // Connects to the store (hosting it on rank 0 unless env.use_agent_store), then builds the backend; blocks until
  // every rank has joined or `timeout` passes. `backend` is "gloo" or "nccl" (see resolve_backend).
  C10dCommunicator(const DistEnv& env, const std::string& backend, at::Device device, std::chrono::seconds timeout);
  ~C10dCommunicator() override;

  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }
  std::string backend() const override { return backend_; }
  at::Device device() const override { return device_; }
  void all_reduce_(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  void broadcast_(std::vector<at::Tensor>& tensors, int root) override;
  void barrier() override;
  void all_gather(at::Tensor& output, const at::Tensor& input) override;
  void reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) override;

  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return pg_; }

  // An ft::Error for a failed collective `what`: the backend's message plus which ranks stopped sending
  // heartbeats (probed through the store for a few seconds), or that the store itself is gone.
  Error translate(const std::exception& e, const std::string& what) const;

 private:
  void heartbeat_loop();
  // "lost rank 1", "lost ranks 1, 3", a store-unreachable note, or "" when every peer still beats.
  std::string diagnose_lost_ranks() const;

  DistEnv env_;
  std::string backend_;
  at::Device device_;
  std::chrono::seconds timeout_;
  c10::intrusive_ptr<c10d::Store> tcp_store_;   // the TCPStore (server on rank 0 unless the agent hosts it)
  c10::intrusive_ptr<c10d::Store> store_;       // PrefixStore over it, per restart attempt
  c10::intrusive_ptr<c10d::Store> hb_store_;    // the heartbeat thread's own connection
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;

  mutable std::atomic<bool> failed_{false};  // a collective failed: do not wait for peers at shutdown

  std::mutex hb_mutex_;
  std::condition_variable hb_cv_;
  bool hb_stop_ = false;
  std::thread hb_thread_;
};

}  // namespace ft::dist
