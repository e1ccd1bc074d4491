#include "dist/zero.h"

#include "util/error.h"
#include "util/fmt.h"

namespace ft::dist {

ZeroShards::ZeroShards(Communicator& comm, std::vector<at::Tensor> params) : comm_(comm), params_(std::move(params)) {
  FT_CHECK(!params_.empty(), "ZeRO-1 needs at least one trainable parameter");
  for (size_t i = 0; i < params_.size(); ++i) {
    FT_CHECK(params_[i].scalar_type() == params_[0].scalar_type() && params_[i].device() == params_[0].device(),
             fmt::format("ZeRO-1 parameter {} differs in dtype or device from parameter 0", i));
    offsets_.push_back(total_);
    total_ += params_[i].numel();
  }
  const int64_t w = comm_.world_size();
  shard_ = (total_ + w - 1) / w;
}

at::Tensor ZeroShards::flatten(bool grads) const {
  std::vector<at::Tensor> parts;
  for (const auto& p : params_) {
    const at::Tensor& src = grads ? p.grad() : p;
    parts.push_back(src.defined() ? src.detach().reshape({-1}) : at::zeros({p.numel()}, p.options()));
  }
  const int64_t padding = shard_ * comm_.world_size() - total_;
  if (padding > 0) parts.push_back(at::zeros({padding}, params_[0].options()));
  return at::cat(parts);
}

at::Tensor ZeroShards::param_shard() const { return flatten(false).narrow(0, shard_begin(), shard_).clone(); }

at::Tensor ZeroShards::local_grad_shard() const { return flatten(true).narrow(0, shard_begin(), shard_).clone(); }

at::Tensor ZeroShards::reduce_scatter_grads(ReduceOp op) const {
  at::Tensor out = at::empty({shard_}, params_[0].options());
  comm_.reduce_scatter(out, flatten(true), op);
  return out;
}

void ZeroShards::all_gather_params(const at::Tensor& shard) const {
  FT_CHECK(shard.numel() == shard_, fmt::format("ZeRO-1 shard has {} elements, expected {}", shard.numel(), shard_));
  at::Tensor full = at::empty({shard_ * comm_.world_size()}, params_[0].options());
  comm_.all_gather(full, shard.detach().to(params_[0].scalar_type()).contiguous());
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].copy_(full.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes()));
  }
}

std::vector<std::pair<size_t, at::Tensor>> ZeroShards::views(const at::Tensor& shard) const {
  FT_CHECK(shard.numel() == shard_, "ZeRO-1 views: wrong shard size");
  std::vector<std::pair<size_t, at::Tensor>> out;
  const int64_t begin = shard_begin(), end = begin + shard_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t lo = std::max(begin, offsets_[i]);
    const int64_t hi = std::min(end, offsets_[i] + params_[i].numel());
    if (lo < hi) out.emplace_back(i, shard.narrow(0, lo - begin, hi - lo));
  }
  return out;
}

at::Tensor ZeroShards::global_norm(const at::Tensor& shard) const {
  std::vector<at::Tensor> sq{shard.detach().to(at::kFloat).pow(2).sum().reshape({1})};
  comm_.all_reduce_(sq, ReduceOp::kSum);
  return sq[0].sqrt().reshape({});
}

}  // namespace ft::dist
