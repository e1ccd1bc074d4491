// Helper executable for tests/dist: one process of a distributed test run, started by the built-in launcher,
// by torchrun or by the test itself. Modes (argv[1]):
//   collectives           check every Communicator collective against closed-form values
//   ddp <b> <sum|mean> [bf16]
//                         DDP with micro-batch b vs an in-process single-process reference on the 2b batch;
//                         bf16: gradients all-reduced in bf16 (each reduced value a bf16 number, ~1 bf16 ulp off)
//   zero                  ZeRO-1: every parameter ends up with its owner rank's values
//   exit3                 rank 1 fails with exit code 3, rank 0 waits in a barrier
//   steps <n>             n all-reduces 0.2 s apart, printing "pid <pid>" and "step <i>" (for kill -9 tests)
//   launch <n> <mode...>  the built-in launcher running this binary's <mode...> in n workers
//   launch-node <n> <nnodes> <node_rank> <addr> <port> <mode...>
//                         the same, as node <node_rank> of a multi-node run (--nnodes ... --master-port)
// Exits 0 on success; failures print "error: ..." and exit non-zero.
#include <torch/nn/modules/linear.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include "dist/comm.h"
#include "dist/ddp.h"
#include "dist/env.h"
#include "dist/launcher.h"
#include "dist/zero.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/log.h"

namespace {

using ft::dist::Communicator;
using ft::dist::ReduceOp;

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  if (!at::allclose(got, want, 0, 1e-6)) {
    throw ft::Error(fmt::format("{}: got {} want {}", what,
                                fmt::join(got.to(at::kDouble).contiguous().data_ptr<double>(),
                                          got.to(at::kDouble).contiguous().data_ptr<double>() + got.numel(), ","),
                                fmt::join(want.to(at::kDouble).contiguous().data_ptr<double>(),
                                          want.to(at::kDouble).contiguous().data_ptr<double>() + want.numel(), ",")));
  }
}

int collectives(Communicator& comm) {
  const int r = comm.rank();
  const int w = comm.world_size();
  const auto f = at::TensorOptions().dtype(at::kFloat);
  const double rank_sum = w * (w - 1) / 2.0;  // 0 + 1 + ... + (w-1)

  std::vector<at::Tensor> t{at::arange(4, f) + r, at::full({2, 3}, r + 1.0, f).t()};  // the second is strided
  comm.all_reduce_(t, ReduceOp::kSum);
  expect_close(t[0], at::arange(4, f) * w + rank_sum, "all_reduce sum");
  expect_close(t[1], at::full({3, 2}, rank_sum + w, f), "all_reduce sum (non-contiguous)");

  std::vector<at::Tensor> avg{at::full({3}, 2.0 * r, f)};
  comm.all_reduce_(avg, ReduceOp::kAvg);
  expect_close(avg[0], at::full({3}, 2.0 * rank_sum / w, f), "all_reduce avg");

  std::vector<at::Tensor> mx{at::tensor({static_cast<float>(r), -static_cast<float>(r)})};
  comm.all_reduce_(mx, ReduceOp::kMax);
  expect_close(mx[0], at::tensor({static_cast<float>(w - 1), 0.0F}), "all_reduce max");

  std::vector<at::Tensor> counts{at::tensor({static_cast<int64_t>(10 * r + 1)})};
  comm.all_reduce_(counts, ReduceOp::kSum);  // int64 token counts, as the training loop reduces them
  if (counts[0].item<int64_t>() != static_cast<int64_t>(10 * rank_sum + w)) throw ft::Error("all_reduce int64 sum");

  std::vector<at::Tensor> b{at::full({5}, 7.0 + r, f)};
  comm.broadcast_(b, w - 1);
  expect_close(b[0], at::full({5}, 7.0 + (w - 1), f), "broadcast from last rank");

  at::Tensor gathered = at::empty({3 * w}, f);
  comm.all_gather(gathered, at::arange(3, f) + 100 * r);
  std::vector<at::Tensor> parts;
  for (int k = 0; k < w; ++k) parts.push_back(at::arange(3, f) + 100 * k);
  at::Tensor want = at::cat(parts);
  expect_close(gathered, want, "all_gather");

  // input on rank r: element i = i + r; the sum over ranks of slice r is (i + rank_sum) for i in slice r.
  at::Tensor shard = at::empty({2}, f);
  comm.reduce_scatter(shard, at::arange(2 * w, f) + r, ReduceOp::kSum);
  expect_close(shard, at::arange(2 * r, 2 * r + 2, f) * w + rank_sum, "reduce_scatter sum");
  comm.reduce_scatter(shard, at::arange(2 * w, f) + r, ReduceOp::kAvg);
  expect_close(shard, at::arange(2 * r, 2 * r + 2, f) + rank_sum / w, "reduce_scatter avg");

  comm.barrier();
  std::printf("collectives ok on rank %d of %d (%s)\n", r, w, comm.backend().c_str());
  return 0;
}

struct Net : torch::nn::Module {
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr};
  Net() {
    l1 = register_module("l1", torch::nn::Linear(8, 16));
    l2 = register_module("l2", torch::nn::Linear(16, 16));  // frozen, like a base model under LoRA
    l3 = register_module("l3", torch::nn::Linear(16, 4));
    for (auto& p : l2->parameters()) p.set_requires_grad(false);
  }
  at::Tensor forward(const at::Tensor& x) { return l3(torch::tanh(l2(torch::tanh(l1(x))))); }
  std::vector<at::Tensor> trainable() {
    std::vector<at::Tensor> out;
    for (auto& p : parameters())
      if (p.requires_grad()) out.push_back(p);
    return out;
  }
};

int ddp(Communicator& comm, int64_t b, bool sum, at::ScalarType reduce_dtype) {
  const int r = comm.rank();
  const int64_t w = comm.world_size();
  constexpr int kSteps = 3, kAccum = 2;
  constexpr double kLr = 0.1;

  torch::manual_seed(1000 + r);  // different on each rank: the broadcast from rank 0 must fix that
  Net net;
  ft::dist::broadcast_from_rank0(comm, {net.l2->weight, net.l2->bias});
  ft::dist::DdpOptions opts;
  opts.bucket_cap_mb = 300.0 / (1024 * 1024);  // ~300 bytes: several buckets even for this tiny model
  opts.reduction = sum ? ft::dist::GradReduction::kSum : ft::dist::GradReduction::kMean;
  opts.reduce_dtype = reduce_dtype;
  const bool bf16 = reduce_dtype == at::kBFloat16;
  ft::dist::DistributedDataParallel model(comm, net.trainable(), opts);

  // The reference: one process, the same starting weights, micro-batch w*b (all ranks' samples).
  Net ref;
  {
    torch::NoGradGuard no_grad;
    auto src = net.parameters(), dst = ref.parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
  double max_grad_diff = 0, max_param_diff = 0;
  bool bf16_values = true;  // bf16 mode: every reduced gradient element is a bf16 number
  for (int step = 0; step < kSteps; ++step) {
    for (int micro = 0; micro < kAccum; ++micro) {
      const at::Tensor x = at::randn({w * b, 8}, gen);  // the global micro-batch, identical on every rank
      const at::Tensor y = at::randn({w * b, 4}, gen);
      const double global_n = static_cast<double>(w * b * kAccum);

      model.prepare_for_forward(/*sync=*/micro == kAccum - 1);
      const at::Tensor mine = net.forward(x.narrow(0, r * b, b));
      const at::Tensor sq = (mine - y.narrow(0, r * b, b)).pow(2).sum();
      // kSum: normalise by the global sample count (gradients are summed); kMean: by the local one.
      model.backward(sum ? sq / global_n : sq / static_cast<double>(b * kAccum));

      ((ref.forward(x) - y).pow(2).sum() / global_n).backward();
    }
    torch::NoGradGuard no_grad;
    auto mine = net.trainable(), theirs = ref.trainable();
    for (size_t i = 0; i < mine.size(); ++i) {
      // bf16: two roundings (each rank's part, then the sum) of at most half an ulp (2^-8) relative to the largest
      // value; reported relative to that value.
      const at::Tensor& g = mine[i].grad();
      const double scale = bf16 ? theirs[i].grad().abs().max().item<double>() * std::ldexp(1.0, -7) : 1.0;
      if (bf16) bf16_values = bf16_values && at::equal(g, g.to(at::kBFloat16).to(at::kFloat));
      max_grad_diff = std::max(max_grad_diff, (g - theirs[i].grad()).abs().max().item<double>() / scale);
      mine[i].sub_(kLr * mine[i].grad());
      theirs[i].sub_(kLr * theirs[i].grad());
      mine[i].mutable_grad().zero_();
      theirs[i].mutable_grad().zero_();
    }
  }
  auto a = net.parameters(), c = ref.parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    max_param_diff = std::max(max_param_diff, (a[i] - c[i]).abs().max().item<double>());
  }
  if (bf16) {
    // Gradients within 1 bf16 ulp of the largest value; parameters moved kSteps * kLr times that at most.
    std::printf("ddp-bf16 rank %d/%lld bf16_values=%d grad_diff_in_ulps=%.3g max_param_diff=%.3g\n", r,
                static_cast<long long>(w), bf16_values ? 1 : 0, max_grad_diff, max_param_diff);
    if (!bf16_values || max_grad_diff > 1.0) throw ft::Error("bf16 DDP gradients are not the bf16-rounded sums");
    return 0;
  }
  std::printf("ddp rank %d/%lld b=%lld reduction=%s buckets=%zu max_grad_diff=%.3g max_param_diff=%.3g\n", r,
              static_cast<long long>(w), static_cast<long long>(b), sum ? "sum" : "mean", model.num_buckets(),
              max_grad_diff, max_param_diff);
  if (max_grad_diff > 1e-6 || max_param_diff > 1e-6) throw ft::Error("DDP result differs from the reference");
  return 0;
}

// ZeRO-1 broadcast: each rank writes (its rank + 1) * k into the parameters it owns; afterwards every rank holds
// the owners' values, for parameters of two dtypes and of sizes above and below the flat-buffer limit.
int zero(Communicator& comm) {
  const std::vector<std::vector<int64_t>> shapes{{5}, {3, 4}, {70'000'000}, {7}, {1}, {2, 2}};
  std::vector<at::Tensor> params;
  std::vector<int64_t> numels;
  for (size_t k = 0; k < shapes.size(); ++k) {
    params.push_back(at::full(shapes[k], -1.0, k % 2 == 0 ? at::kFloat : at::kBFloat16));
    numels.push_back(params.back().numel());
  }
  const std::vector<int> owners = ft::dist::assign_owners(numels, comm.world_size());
  for (size_t k = 0; k < params.size(); ++k) {
    if (owners[k] == comm.rank()) params[k].fill_(static_cast<double>((owners[k] + 1) * (k + 1)));
  }
  ft::dist::broadcast_from_owners(comm, params, owners);
  for (size_t k = 0; k < params.size(); ++k) {
    const at::Tensor p = params[k].to(at::kFloat);
    expect_close(at::stack({p.min(), p.max()}), at::full({2}, (owners[k] + 1.0) * (k + 1.0)),
                 fmt::format("parameter {} from owner {}", k, owners[k]));
  }
  std::printf("zero broadcast ok on rank %d of %d\n", comm.rank(), comm.world_size());
  return 0;
}

int run_mode(const std::vector<std::string>& args) {
  const std::string mode = args.at(0);
  if (mode == "launch") {
    return ft::dist::launch_local(ft::dist::parse_nproc(args.at(1)), {args.begin() + 2, args.end()});
  }
  if (mode == "launch-node") {
    ft::dist::LaunchOptions options = ft::dist::parse_node_options(args.at(2), args.at(3), args.at(4), args.at(5));
    const char* t = std::getenv("FT_DIST_TIMEOUT");
    options.timeout = std::chrono::seconds(t != nullptr ? std::atoi(t) : 20);
    ft::log::init(ft::log::Level::kInfo, 0, 1);
    return ft::dist::launch_local(ft::dist::parse_nproc(args.at(1)), {args.begin() + 6, args.end()}, options);
  }
  const ft::dist::DistEnv env = ft::dist::read_env();
  ft::log::init(ft::log::Level::kInfo, env.rank, env.world_size);
  const char* t = std::getenv("FT_DIST_TIMEOUT");
  const std::chrono::seconds timeout(t != nullptr ? std::atoi(t) : 20);
  auto comm = ft::dist::make_communicator(env, "auto", at::kCPU, timeout);
  std::printf("%s\n", ft::dist::describe(env).c_str());
  std::fflush(stdout);
  if (mode == "collectives") return collectives(*comm);
  if (mode == "ddp") {
    const bool bf16 = args.size() > 3 && args.at(3) == "bf16";
    return ddp(*comm, std::stoll(args.at(1)), args.at(2) == "sum", bf16 ? at::kBFloat16 : at::kFloat);
  }
  if (mode == "zero") return zero(*comm);
  if (mode == "exit3") {
    if (comm->rank() == 1) {
      std::fprintf(stderr, "error: deliberate failure on rank 1\n");
      return 3;
    }
    comm->barrier();
    return 0;
  }
  if (mode == "steps") {
    std::printf("pid %d\n", static_cast<int>(::getpid()));
    for (int i = 0; i < std::stoi(args.at(1)); ++i) {
      std::vector<at::Tensor> v{at::ones({4})};
      comm->all_reduce_(v, ReduceOp::kSum);
      std::printf("step %d\n", i);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return 0;
  }
  throw ft::ConfigError("dist_worker: unknown mode " + mode);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    if (argc < 2) throw ft::ConfigError("usage: dist_worker <mode> [args]");
    return run_mode({argv + 1, argv + argc});
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
