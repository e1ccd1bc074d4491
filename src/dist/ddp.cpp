#include "dist/ddp.h"

#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/version.h>

#include <torch/autograd.h>

#include "dist/c10d_comm.h"
#include "util/fmt.h"

namespace ft::dist {

DdpOptions DdpOptions::from_config(const DistributedConfig& cfg, at::ScalarType reduce_dtype) {
  DdpOptions opts;
  opts.bucket_cap_mb = cfg.bucket_cap_mb;
  opts.reduction = GradReduction::kSum;
  opts.reduce_dtype = reduce_dtype;
  return opts;
}

namespace {

// All-reduce (sum) of a bucket without the Reducer's 1/world_size: see GradReduction::kSum in ddp.h.
class SumCommHook final : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
 public:
  using CppCommHookInterface::CppCommHookInterface;
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    std::vector<at::Tensor> tensors{bucket.getBufferRef()};
    return state_->allreduce(tensors)->getFuture();
  }
};

// All-reduce of a bucket cast to `dtype` and cast back into the bucket; divides by world size for kMean.
class CastCommHook final : public c10d::CommHookInterface {
 public:
  CastCommHook(c10::intrusive_ptr<c10d::ProcessGroup> pg, at::ScalarType dtype, bool mean)
      : pg_(std::move(pg)), dtype_(dtype), mean_(mean) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    at::Tensor buffer = bucket.getBufferRef();  // the bucket's flat gradient buffer, its own dtype [numel]
    at::Tensor wire = buffer.to(dtype_);        // dtype_ [numel]
    if (mean_) wire.div_(pg_->getSize());
    std::vector<at::Tensor> tensors{wire};
    auto reduced = pg_->allreduce(tensors)->getFuture();
    return reduced->then(
        [buffer](c10::ivalue::Future& done) {
          buffer.copy_(done.value().toTensorVector().at(0));
          return c10::IValue(buffer);
        },
        reduced->elementType());
  }

  at::Tensor parseHookResult(const c10::IValue& result) override { return result.toTensor(); }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  at::ScalarType dtype_;
  bool mean_;
};

C10dCommunicator& as_c10d(Communicator& comm) {
  auto* c10d_comm = dynamic_cast<C10dCommunicator*>(&comm);
  FT_CHECK(c10d_comm != nullptr, "DistributedDataParallel over " + comm.backend() + " needs a C10dCommunicator");
  return *c10d_comm;
}

template <class F>
void translated(Communicator& comm, const char* what, F&& body) {
  try {
    body();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (auto* c = dynamic_cast<C10dCommunicator*>(&comm)) throw c->translate(e, what);
    throw;
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(Communicator& comm, std::vector<at::Tensor> params,
                                                 DdpOptions options)
    : comm_(comm), params_(std::move(params)) {
  FT_CHECK(!params_.empty(), "DistributedDataParallel needs at least one trainable parameter");
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    FT_CHECK(p.defined() && p.requires_grad() && p.is_leaf(),
             fmt::format("DDP parameter {} must be a leaf tensor that requires grad (register trainable ones only)", i));
    FT_CHECK(p.layout() == at::kStrided, fmt::format("DDP parameter {} is not dense", i));
    FT_CHECK(p.device() == params_[0].device(), fmt::format("DDP parameter {} is on {}, parameter 0 on {}", i,
                                                            p.device().str(), params_[0].device().str()));
  }
  if (comm_.world_size() == 1) return;  // nothing to reduce: .grad already holds the full gradient

  auto& c10d_comm = as_c10d(comm_);
  const auto& pg = c10d_comm.process_group();
  translated(comm_, "DDP parameter check", [&] {
    // Same count, shapes and dtypes everywhere, with a readable error instead of a hang.
    c10d::verify_params_across_processes(pg, params_, std::nullopt);
    if (options.broadcast_from_rank0) {
      at::NoGradGuard no_grad;
      c10d::broadcast_coalesced(pg, params_, 250UL * 1024 * 1024, 0);
    }
  });

  cap_bytes_ = static_cast<int64_t>(options.bucket_cap_mb * 1024.0 * 1024.0);
  FT_CHECK(cap_bytes_ > 0, "distributed.bucket_cap_mb must be > 0");
  first_cap_bytes_ = std::min<int64_t>(c10d::kDefaultFirstBucketBytes, cap_bytes_);
  options_ = options;
  const std::vector<bool> sparse(params_.size(), false);
  auto [indices, limits] = c10d::compute_bucket_assignment_by_size(
      params_, {static_cast<size_t>(first_cap_bytes_), static_cast<size_t>(cap_bytes_)}, sparse);
  // Gradients arrive roughly in reverse forward order, so the last parameters' bucket goes first (as in DDP).
  std::reverse(indices.begin(), indices.end());
  std::reverse(limits.begin(), limits.end());
  num_buckets_ = indices.size();
  reducer_ = make_reducer(std::move(indices), std::vector<int64_t>(limits.begin(), limits.end()));
  FT_LOG_DEBUG("DDP: {} trainable tensors in {} buckets of <= {} MB, gradients {} in {}", params_.size(), num_buckets_,
               options.bucket_cap_mb, options.reduction == GradReduction::kSum ? "summed" : "averaged",
               c10::toString(options.reduce_dtype));
}

std::unique_ptr<c10d::Reducer> DistributedDataParallel::make_reducer(std::vector<std::vector<size_t>> buckets,
                                                                     std::vector<int64_t> limits) const {
  const auto& pg = as_c10d(comm_).process_group();
  std::unordered_map<size_t, std::string> names;
  for (size_t i = 0; i < params_.size(); ++i) names.emplace(i, fmt::format("trainable[{}]", i));
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
  auto reducer = std::make_unique<c10d::Reducer>(
      params_, std::move(buckets), pg, std::vector<bool>(params_.size(), false), cap_bytes_,
      /*find_unused_parameters=*/false, /*gradient_as_bucket_view=*/false, std::move(names), first_cap_bytes_,
      /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false, std::move(limits));
#else
#error "c10d::Reducer's constructor was verified on torch 2.11 only; check reducer.hpp of this version"
#endif
  const bool cast = options_.reduce_dtype != params_[0].scalar_type();
  if (cast) {
    reducer->register_comm_hook(
        std::make_unique<CastCommHook>(pg, options_.reduce_dtype, options_.reduction == GradReduction::kMean));
  } else if (options_.reduction == GradReduction::kSum) {
    reducer->register_comm_hook(std::make_unique<SumCommHook>(pg));
  }
  return reducer;
}

std::vector<std::vector<size_t>> DistributedDataParallel::buckets() const {
  std::vector<std::vector<size_t>> out;
  if (!reducer_) return out;
  std::unordered_map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index.emplace(params_[i].unsafeGetTensorImpl(), i);
  for (const c10d::GradBucket& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/true)) {
    std::vector<size_t>& ids = out.emplace_back();
    for (const at::Tensor& p : bucket.getParameters()) ids.push_back(index.at(p.unsafeGetTensorImpl()));
  }
  return out;
}

void DistributedDataParallel::use_buckets(const std::vector<std::vector<size_t>>& buckets) {
  if (!reducer_) return;
  std::vector<bool> seen(params_.size(), false);
  size_t count = 0;
  for (const auto& bucket : buckets) {
    FT_CHECK(!bucket.empty(), "DDP buckets: an empty bucket");
    for (size_t i : bucket) {
      FT_CHECK(i < params_.size() && !seen[i],
               fmt::format("DDP buckets: parameter index {} is out of range or listed twice", i));
      seen[i] = true;
      ++count;
    }
  }
  FT_CHECK(count == params_.size() && !buckets.empty(),
           fmt::format("DDP buckets cover {} of the {} trainable tensors", count, params_.size()));
  reducer_.reset();  // its hooks leave the parameters' gradient accumulators before the new ones come
  // Each bucket's cap as the Reducer's rebuild gives them: the first (reduced first) the small one.
  std::vector<int64_t> limits{first_cap_bytes_};
  limits.resize(buckets.size(), cap_bytes_);
  reducer_ = make_reducer(buckets, std::move(limits));
  num_buckets_ = buckets.size();
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::prepare_for_forward(bool sync) {
  sync_ = sync;
  backward_prepared_ = false;
  if (!reducer_) return;
  // The Reducer re-buckets in backward() (after the first synced backward), not here.
  translated(comm_, "DDP forward", [&] {
    if (sync_) reducer_->prepare_for_forward();
  });
}

void DistributedDataParallel::prepare_for_backward() {
  if (!reducer_ || !sync_ || backward_prepared_) return;
  reducer_->prepare_for_backward({});
  backward_prepared_ = true;
}

void DistributedDataParallel::backward(const at::Tensor& loss) {
  FT_CHECK(loss.numel() == 1, "DDP backward needs a scalar loss");
  prepare_for_backward();
  translated(comm_, "gradient all-reduce", [&] {
    loss.backward();
    // The first synced backward recorded the order of the gradients: rebuild now (a collective) rather than at the
    // next forward, so that a checkpoint of this step keeps the buckets the next step runs (buckets()).
    if (reducer_ && sync_) reducer_->rebuild_buckets();
  });
  backward_prepared_ = false;
}

void broadcast_from_rank0(Communicator& comm, std::vector<at::Tensor> tensors) {
  if (comm.world_size() == 1 || tensors.empty()) return;
  at::NoGradGuard no_grad;
  translated(comm, "broadcast", [&] {
    c10d::broadcast_coalesced(as_c10d(comm).process_group(), tensors, 250UL * 1024 * 1024, 0);
  });
}

}  // namespace ft::dist
