// USE_C10D_* switch the backend headers on (TorchConfig usually defines them already); the CUDA wheel's
// libraries contain both backends. NCCL code needs nccl.h too, hence FT_NCCL.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#if defined(FT_WITH_CUDA) && defined(FT_WITH_NCCL_HEADERS)
#define FT_NCCL 1
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#endif

#include "dist/c10d_comm.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef FT_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>

#include "util/error.h"
#include "util/fmt.h"

namespace ft::dist {
namespace {

constexpr std::chrono::milliseconds kHeartbeatInterval{1000};
constexpr int kMonitorEvery = 5;  // heartbeats between checks of the peers' heartbeats
constexpr std::chrono::seconds kExitWait{30};  // longest rank 0 waits for the others at shutdown

std::string hb_key(int rank) { return fmt::format("hb/{}", rank); }

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

std::shared_ptr<::gloo::transport::Device> gloo_device(const DistEnv& env) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  // All ranks on this host: loopback works even where the hostname does not resolve (containers).
  if (is_loopback(env.master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  // AVG is a SUM followed by a division: Gloo has no AVG.
  return op == ReduceOp::kMax ? c10d::ReduceOp(c10d::ReduceOp::MAX) : c10d::ReduceOp(c10d::ReduceOp::SUM);
}

}  // namespace

C10dCommunicator::C10dCommunicator(const DistEnv& env, const std::string& backend, at::Device device,
                                   std::chrono::seconds timeout)
    : env_(env), backend_(backend), device_(device), timeout_(timeout) {
  FT_CHECK(env.distributed(), "C10dCommunicator needs WORLD_SIZE > 1");
  const auto timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.isServer = !env.use_agent_store && env.rank == 0;
  if (!env.use_agent_store) opts.numWorkers = static_cast<std::size_t>(env.world_size);
  opts.waitWorkers = true;
  opts.timeout = timeout_ms;
  opts.multiTenant = true;
  try {
    tcp_store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    throw Error(fmt::format("rank {}: cannot {} the rendezvous store at {}:{}: {}", env.rank,
                            opts.isServer ? "host" : "connect to", env.master_addr, env.master_port, first_line(e)),
                opts.isServer ? "is MASTER_PORT already in use? pick a free port"
                              : "check MASTER_ADDR/MASTER_PORT and that rank 0 (or torchrun) started within "
                                "distributed.timeout_s");
  }
  const std::string prefix = fmt::format("ft/attempt_{}", env.restart_count);
  store_ = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp_store_);
  hb_store_ = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp_store_->clone());

  pg_ = c10::make_intrusive<c10d::ProcessGroup>(store_, env.rank, env.world_size);
  try {
    if (backend == "gloo") {
      auto gloo_opts = c10d::ProcessGroupGloo::Options::create(timeout_ms);
      gloo_opts->devices.push_back(gloo_device(env));
      auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env.rank, env.world_size, gloo_opts);
      pg_->setBackend(c10::kCPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
      pg_->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    } else if (backend == "nccl") {
#ifdef FT_NCCL
      FT_CHECK(device.is_cuda(), "nccl needs a CUDA device");
      c10::cuda::set_device(device.index());
      auto nccl_opts = c10d::ProcessGroupNCCL::Options::create();
      nccl_opts->timeout = timeout_ms;
      auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, env.rank, env.world_size, nccl_opts);
      pg_->setBackend(c10::kCUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
      pg_->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
#else
      throw ConfigError("this build has no NCCL support", "use distributed.backend: gloo");
#endif
    } else {
      throw ConfigError(fmt::format("unknown distributed backend '{}'", backend), "use auto, nccl or gloo");
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(fmt::format("rank {}: {} rendezvous failed: {}", env.rank, backend, first_line(e)),
                "every rank must start within distributed.timeout_s and reach MASTER_ADDR");
  }
  hb_thread_ = std::thread([this] { heartbeat_loop(); });
  FT_LOG_DEBUG("distributed: {} up, {}", backend_, describe(env_));
}

C10dCommunicator::~C10dCommunicator() {
  {
    std::lock_guard<std::mutex> lock(hb_mutex_);
    hb_stop_ = true;
  }
  hb_cv_.notify_all();
  if (hb_thread_.joinable()) hb_thread_.join();
  // When rank 0 hosts the store, it keeps it up until every rank has left, so that no peer sees the store
  // vanish under it at a normal exit. Bounded: a lost peer must not keep rank 0 alive.
  try {
    store_->add("exit", 1);
    if (!env_.use_agent_store && env_.rank == 0 && !failed_) {
      const auto deadline = std::chrono::steady_clock::now() + std::min<std::chrono::seconds>(timeout_, kExitWait);
      while (store_->add("exit", 0) < env_.world_size && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  } catch (const std::exception& e) {
    // A destructor cannot throw; the store host is gone, so there is nobody left to wait for.
    FT_LOG_DEBUG("distributed shutdown: {}", first_line(e));
  }
}

void C10dCommunicator::heartbeat_loop() {
  // Beats so that a failed collective can tell a dead peer from a slow one, and warns early about a silent
  // peer (NCCL only notices at the timeout). Store errors end the loop: the store host has gone away, which
  // translate() reports when a collective fails.
  std::vector<int64_t> last(static_cast<size_t>(env_.world_size), -1);
  std::vector<int> silent(static_cast<size_t>(env_.world_size), 0);
  for (int tick = 1;; ++tick) {
    try {
      hb_store_->add(hb_key(env_.rank), 1);
      if (tick % kMonitorEvery == 0) {
        for (int r = 0; r < env_.world_size; ++r) {
          if (r == env_.rank) continue;
          const auto idx = static_cast<size_t>(r);
          const int64_t beats = hb_store_->add(hb_key(r), 0);
          silent[idx] = beats == last[idx] ? silent[idx] + 1 : 0;
          last[idx] = beats;
          if (silent[idx] == 2) {
            FT_LOG_ERROR("rank {} has sent no heartbeat for {} s: it is lost or hung; collectives will fail after "
                         "distributed.timeout_s ({} s)", r, 2 * kMonitorEvery, timeout_.count());
          }
        }
      }
    } catch (const std::exception& e) {
      FT_LOG_DEBUG("heartbeat stopped: {}", first_line(e));
      return;
    }
    // Store calls happen unlocked: a slow store must not block the destructor's stop request.
    std::unique_lock<std::mutex> lock(hb_mutex_);
    if (hb_cv_.wait_for(lock, kHeartbeatInterval, [this] { return hb_stop_; })) return;
  }
}

std::string C10dCommunicator::diagnose_lost_ranks() const {
  try {
    // The existing connection, not a new one: connecting to a dead store host waits for the whole timeout.
    const auto& store = store_;
    std::vector<int64_t> before;
    for (int r = 0; r < env_.world_size; ++r) before.push_back(store->add(hb_key(r), 0));
    std::this_thread::sleep_for(kHeartbeatInterval * 5 / 2);
    std::vector<int> lost;
    for (int r = 0; r < env_.world_size; ++r) {
      if (r != env_.rank && store->add(hb_key(r), 0) == before[static_cast<size_t>(r)]) lost.push_back(r);
    }
    if (lost.empty()) return {};
    return fmt::format("lost rank{} {}", lost.size() > 1 ? "s" : "", fmt::join(lost, ", "));
  } catch (const std::exception&) {
    if (env_.use_agent_store) return "the torchrun agent's store is unreachable (the agent is gone)";
    return fmt::format("lost rank 0 (it hosted the rendezvous store at {}:{}, which is unreachable)",
                       env_.master_addr, env_.master_port);
  }
}

Error C10dCommunicator::translate(const std::exception& e, const std::string& what) const {
  failed_ = true;
  const std::string lost = diagnose_lost_ranks();
  return Error(fmt::format("rank {}: {} failed{}: {}", env_.rank, what, lost.empty() ? "" : " (" + lost + ")",
                           first_line(e)),
               "a distributed run needs every rank; see the lost rank's own log, then resume from the last "
               "checkpoint with the same world size");
}

namespace {

// Runs `body`, turning backend exceptions into ft::Error with the lost ranks named.
template <class F>
void guarded(const C10dCommunicator& comm, const char* what, F&& body) {
  try {
    body();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw comm.translate(e, what);
  }
}

// The tensor the backend sees: contiguous and on the communicator's device. `staged` aliases `t` when possible.
at::Tensor stage(const at::Tensor& t, at::Device device) {
  at::Tensor staged = t.device() == device ? t : t.to(device);
  return staged.is_contiguous() ? staged : staged.contiguous();
}

void wait_all(std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  for (auto& w : works) w->wait();
}

}  // namespace

void C10dCommunicator::all_reduce_(std::vector<at::Tensor>& tensors, ReduceOp op) {
  guarded(*this, "all_reduce", [&] {
    std::vector<at::Tensor> staged;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    for (const auto& t : tensors) {
      staged.push_back(stage(t, device_));
      std::vector<at::Tensor> one{staged.back()};
      works.push_back(pg_->allreduce(one, opts));
    }
    wait_all(works);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (op == ReduceOp::kAvg) {
        FT_CHECK(at::isFloatingType(staged[i].scalar_type()), "all_reduce avg needs floating-point tensors");
        staged[i].div_(world_size());
      }
      if (!staged[i].is_same(tensors[i])) tensors[i].copy_(staged[i]);
    }
  });
}

void C10dCommunicator::broadcast_(std::vector<at::Tensor>& tensors, int root) {
  guarded(*this, "broadcast", [&] {
    std::vector<at::Tensor> staged;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    for (const auto& t : tensors) {
      staged.push_back(stage(t, device_));
      std::vector<at::Tensor> one{staged.back()};
      works.push_back(pg_->broadcast(one, opts));
    }
    wait_all(works);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!staged[i].is_same(tensors[i])) tensors[i].copy_(staged[i]);
    }
  });
}

void C10dCommunicator::barrier() {
  guarded(*this, "barrier", [&] {
    c10d::BarrierOptions opts;
    if (device_.is_cuda()) opts.device_ids = {device_.index()};
    pg_->barrier(opts)->wait();
  });
}

void C10dCommunicator::all_gather(at::Tensor& output, const at::Tensor& input) {
  FT_CHECK(output.numel() == input.numel() * world_size(), "all_gather: output must hold world_size * input");
  guarded(*this, "all_gather", [&] {
    at::Tensor in = stage(input, device_);
    at::Tensor out = stage(output, device_);
    pg_->_allgather_base(out, in)->wait();
    if (!out.is_same(output)) output.copy_(out);
  });
}

void C10dCommunicator::reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  FT_CHECK(input.numel() == output.numel() * world_size(), "reduce_scatter: input must hold world_size * output");
  guarded(*this, "reduce_scatter", [&] {
    at::Tensor in = stage(input, device_);
    at::Tensor out = stage(output, device_);
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = to_c10d(op);
    pg_->_reduce_scatter_base(out, in, opts)->wait();
    if (op == ReduceOp::kAvg) out.div_(world_size());
    if (!out.is_same(output)) output.copy_(out);
  });
}

std::unique_ptr<Communicator> make_communicator(const DistEnv& env, const std::string& backend, at::Device device,
                                                std::chrono::seconds timeout) {
  const std::string resolved = resolve_backend(backend, device);
  if (!env.distributed()) return std::make_unique<SingleProcessCommunicator>(device);
  return std::make_unique<C10dCommunicator>(env, resolved, device, timeout);
}

}  // namespace ft::dist
