#include "train/kernel_warm_up.h"

#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#ifdef FT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include "model/pretrained.h"
#include "model/transformer.h"
#include "optim/adamw_8bit.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/build.h"
#include "train/objective.h"
#include "train/train_step.h"
#include "util/log.h"
#include "util/stopwatch.h"

namespace ft::train {
namespace {

// Tokens without random draws: 0, 1, 2, ... wrapping at the vocabulary; when packing, each row is one sample.
DeviceBatch warm_up_inputs(const WarmUpBatch& shape, int64_t vocab_size, c10::Device device) {
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(device);
  const int64_t n = shape.rows * shape.seq_len;
  DeviceBatch in;
  in.input_ids = at::arange(n, i64).remainder(vocab_size).view({shape.rows, shape.seq_len});  // I64 [B, T]
  in.positions = at::arange(shape.seq_len, i64).repeat({shape.rows, 1});                      // I64 [B, T]
  if (shape.packing) {
    in.segments = at::zeros({shape.rows, shape.seq_len}, i64.dtype(at::kInt));        // I32 [B, T]
    in.packed.cu_seqlens = at::arange(0, n + 1, shape.seq_len, i64.dtype(at::kInt));  // I32 [B + 1]
    in.packed.max_seqlen = shape.seq_len;
  }
  return in;
}

// Unscaling (fp16), clipping, the non-finite check and the optimizer's step load kernels of their own (on an H100 they
// were about 0.2 s of the 8B LoRA run's first step: docs/benchmarks.md). Clipping takes every gradient; the optimizer
// steps one tensor of each kind it treats apart (dtype; 8-bit or full-size moments; F32 ones below or above the size
// of its own F32 kernel), the smallest: that loads the same kernels, and its state stays small beside the load (a full
// fine-tune's layer holds hundreds of millions of parameters, an MoE layer's experts billions).
void step_like_the_run(const Config& cfg, model::Transformer& m, optim::GradScaler& scaler,
                       const model::KernelPolicy& kernels) {
  auto opts = optim::AdamWOptions::from_config(cfg.optimizer);
  opts.cuda_kernels = kernels.kernels;
  std::vector<at::Tensor> grads;
  std::map<std::tuple<at::ScalarType, bool, bool>, optim::NamedParam> smallest;  // by (dtype, 8-bit, large)
  for (const auto& item : m.named_parameters()) {
    const at::Tensor& p = item.value();
    if (!p.requires_grad() || !p.grad().defined()) continue;
    grads.push_back(p.grad());
    const bool eight_bit = opts.eight_bit_moments && optim::takes_8bit_moments(item.key(), p);
    const bool large = p.scalar_type() == at::kFloat && p.numel() >= optim::kF32KernelMinNumel;
    auto [it, added] = smallest.try_emplace({p.scalar_type(), eight_bit, large}, item.key(), p);
    if (!added && p.numel() < it->second.second.numel()) it->second = {item.key(), p};
  }
  if (smallest.empty()) return;
  std::vector<optim::NamedParam> stepped;
  for (auto& [kind, named] : smallest) stepped.push_back(std::move(named));
  optim::AdamW optimizer(stepped, opts);
  clip_and_step(grads, cfg.train.grad_clip, scaler, optimizer);
  if (scaler.enabled()) scaler.update();
}

}  // namespace

void warm_up_kernels(const Config& cfg, model::ModelArgs args, const PrecisionPolicy& precision,
                     const model::KernelPolicy& kernels, const WarmUpBatch& shape) {
  const c10::Device device = kernels.device;
#ifdef FT_WITH_CUDA
  std::optional<c10::cuda::CUDAStreamGuard> on_side_stream;  // sets the device too
  if (device.is_cuda()) {
    on_side_stream.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
  }
#endif
  args.num_layers = 1;
  const auto m = std::make_shared<model::Transformer>(args);
  model::init_weights(*m, cfg.model.init_std, static_cast<uint64_t>(cfg.run.seed), device, precision.param,
                      cfg.model.quantize);
  m->to(device, precision.param);
  configure_model(*m, cfg, /*created=*/{});
  m->set_kernel_policy(kernels);
  m->eval();  // no dropout or router jitter: nothing is drawn from the run's generators
  const DeviceBatch in = warm_up_inputs(shape, args.vocab_size, device);
  const at::Tensor rows = at::arange(in.input_ids.numel(), in.input_ids.options());  // I64 [B * T]
  const at::Tensor labels = in.input_ids.flatten().roll(-1);                         // I64 [B * T]
  const auto scaler = build_scaler(cfg, precision, device);  // fp16's loss scaling, else a pass-through
  scaler->scale(token_losses(*m, in, rows, labels, precision, kernels).sum()).backward();
  step_like_the_run(cfg, *m, *scaler, kernels);
#ifdef FT_WITH_CUDA
  if (on_side_stream) on_side_stream->current_stream().synchronize();
#endif
}

KernelWarmUp::KernelWarmUp(const Config& cfg, model::ModelArgs args, const PrecisionPolicy& precision,
                           const model::KernelPolicy& kernels, WarmUpBatch batch) {
  if (!kernels.device.is_cuda()) return;
  thread_ = std::thread([this, cfg, args = std::move(args), precision, kernels, batch] {
    const auto start = SteadyClock::now();
    try {
      warm_up_kernels(cfg, args, precision, kernels, batch);
    } catch (const std::exception& e) {
      failure_ = e.what();
    }
    seconds_ = seconds_since(start);
  });
}

KernelWarmUp::~KernelWarmUp() {
  if (thread_.joinable()) thread_.join();
}

void KernelWarmUp::finish() {
  if (!thread_.joinable()) return;
  const auto start = SteadyClock::now();
  thread_.join();
#ifdef FT_WITH_CUDA
  // The caching allocator gives a freed block back only to the stream that allocated it, so the warm-up's
  // activations and logits (GBs for an 8B model) would stay reserved for its side stream all run.
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  const double waited = seconds_since(start);
  if (!failure_.empty()) {
    FT_LOG_WARN("kernel warm-up failed (the first step loads its kernels): {}",
                failure_.substr(0, failure_.find('\n')));
  } else {
    FT_LOG_INFO("kernel warm-up: {:.2f} s beside the load, {:.2f} s waited for", seconds_, waited);
  }
}

}  // namespace ft::train
