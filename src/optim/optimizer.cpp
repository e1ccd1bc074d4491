#include "optim/optimizer.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_sub.h>
#include <ATen/ops/_foreach_zero.h>
#include <ATen/ops/_fused_adamw.h>
#include <c10/core/GradMode.h>

#include <set>
#include <tuple>

#include "optim/step_kernels.h"
#include "optim/tensor_groups.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::optim {

AdamWOptions AdamWOptions::from_config(const OptimizerConfig& cfg) {
  AdamWOptions o;
  o.lr = cfg.lr;
  o.beta1 = cfg.betas.at(0);
  o.beta2 = cfg.betas.at(1);
  o.eps = cfg.eps;
  o.weight_decay = cfg.weight_decay;
  o.decay_norms_and_biases = cfg.decay_norms_and_biases;
  o.kahan_summation = cfg.kahan_summation;
  o.eight_bit_moments = cfg.name == OptimizerName::kAdamW8bit;
  return o;
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_str(const at::Tensor& t) {
  return fmt::format("{}", fmt::join(t.sizes(), ", "));
}

}  // namespace

bool AdamW::no_weight_decay(const std::string& name) {
  return ends_with(name, "norm.weight") || name.find("layernorm") != std::string::npos || ends_with(name, ".bias") ||
         name == "bias" || name.find("embed_tokens") != std::string::npos;
}

AdamW::AdamW(const std::vector<NamedParam>& params, const AdamWOptions& opts) : opts_(opts) {
  ParamGroup decay{"decay", {}, {}, opts.lr, opts.weight_decay};
  ParamGroup no_decay{"no_decay", {}, {}, opts.lr, 0.0};
  for (const auto& [name, p] : params) {
    ParamGroup& g = (!opts.decay_norms_and_biases && no_weight_decay(name)) ? no_decay : decay;
    g.names.push_back(name);
    g.params.push_back(p);
  }
  if (!decay.params.empty()) groups_.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups_.push_back(std::move(no_decay));
  validate();
}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& opts) : groups_(std::move(groups)), opts_(opts) {
  validate();
}

void AdamW::validate() {
  if (!(opts_.eps >= 0.0) || !(opts_.beta1 >= 0.0 && opts_.beta1 < 1.0) || !(opts_.beta2 >= 0.0 && opts_.beta2 < 1.0))
    throw ConfigError(fmt::format("AdamW: invalid hyper-parameters (betas = [{}, {}], eps = {})", opts_.beta1,
                                  opts_.beta2, opts_.eps),
                      "optimizer.betas must lie in [0, 1) and optimizer.eps must be >= 0");
  std::set<std::string> seen;
  for (const auto& g : groups_) {
    FT_CHECK(g.names.size() == g.params.size(),
             "AdamW: group '" + g.label + "' has names and params of different sizes");
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (!seen.insert(g.names[i]).second)
        throw Error("AdamW: parameter '" + g.names[i] + "' appears twice", "pass every parameter once");
      if (!g.params[i].defined() || !g.params[i].is_floating_point())
        throw Error("AdamW: parameter '" + g.names[i] + "' is not a defined floating-point tensor");
    }
  }
}

bool AdamW::compensated(const at::Tensor& param) const {
  return opts_.kahan_summation && (param.scalar_type() == at::kBFloat16 || param.scalar_type() == at::kHalf);
}

bool AdamW::eight_bit(const std::string& name, const at::Tensor& param) const {
  return opts_.eight_bit_moments && takes_8bit_moments(name, param);
}

const at::Tensor& AdamW::maps_on(c10::Device device) {
  auto it = maps_.find(device.str());
  if (it == maps_.end()) it = maps_.emplace(device.str(), eight_bit_maps(device)).first;
  return it->second;
}

AdamW::State& AdamW::state_for(const std::string& name, const at::Tensor& param) {
  auto it = state_.find(name);
  if (it != state_.end()) return it->second;
  State s;
  if (eight_bit(name, param)) {
    s = zero_8bit_state(param, compensated(param));
  } else {
    // As torch/optim/adamw.py does for fused=True: zero moments like the param, a F32 step on the param's device.
    s.exp_avg = at::zeros_like(param, at::MemoryFormat::Preserve);
    s.exp_avg_sq = at::zeros_like(param, at::MemoryFormat::Preserve);
    s.step = at::zeros({}, param.options().dtype(at::kFloat));
    if (compensated(param)) {
      // exp_avg_sq in F32: with beta2 near 1 its per-step change is far below bf16's resolution, the same loss
      // Kahan summation removes from the weights (exp_avg moves by 1 - beta1 of itself and keeps the param dtype).
      s.exp_avg_sq = s.exp_avg_sq.to(at::kFloat);
      s.compensation = at::zeros_like(param, at::MemoryFormat::Preserve);
    }
  }
  if (auto start = initial_compensation_.extract(name); !start.empty() && s.compensation.defined()) {
    s.compensation.copy_(start.mapped());
  }
  return state_.emplace(name, std::move(s)).first->second;
}

void AdamW::start_compensation_at(std::map<std::string, at::Tensor> residuals) {
  initial_compensation_.clear();
  for (const auto& g : groups_) {
    for (size_t i = 0; i < g.params.size(); ++i) {
      auto r = residuals.extract(g.names[i]);
      if (r.empty() || !compensated(g.params[i]) || !r.mapped().sizes().equals(g.params[i].sizes())) continue;
      if (state_.count(g.names[i])) continue;  // stepped already: its compensation is under way
      initial_compensation_.insert(std::move(r));
    }
  }
}

// AdamW's update u = -lr * (wd * p + m_hat / (sqrt(v_hat) + eps)), computed in F32, then added to the parameter with
// Kahan summation: y = u + c; p' = round(p + y); c' = y - (p' - p). What the rounding of p' drops stays in c and joins
// the next update, so p + c follows the F32 trajectory to within c's own rounding. A step skipped by `found_inf` (1)
// changes nothing, through keep = 1 - found_inf in every formula, and the bias corrections come from the step tensor:
// nothing is read on the host. The CUDA kernel computes the same in one pass (kernels/adamw_kahan.h).
void AdamW::compensated_step(const at::Tensor& param, State& s, double lr, double weight_decay,
                             const std::optional<at::Tensor>& grad_scale,
                             const std::optional<at::Tensor>& found_inf) const {
  if (opts_.cuda_kernels && kahan_kernel_takes(param, s)) {
    kahan_kernel_step(param, s, {lr, opts_.beta1, opts_.beta2, opts_.eps, weight_decay}, grad_scale, found_inf);
    return;
  }
  const at::Tensor keep = found_inf ? 1.0 - *found_inf : at::ones({}, param.options().dtype(at::kFloat));  // F32 []
  at::Tensor grad = param.grad().to(at::kFloat);  // F32, param shape
  if (grad_scale) grad.div_(*grad_scale);
  if (found_inf) grad = at::where(keep.gt(0), grad, 0.0);  // a skipped step's gradient may hold Inf/NaN
  s.exp_avg.copy_(s.exp_avg.to(at::kFloat).lerp_(grad, keep * (1.0 - opts_.beta1)));
  s.exp_avg_sq.mul_(1.0 - keep * (1.0 - opts_.beta2)).add_(grad.square().mul_(keep * (1.0 - opts_.beta2)));
  const at::Tensor step = s.step.clamp_min(1.0);                            // a first step skipped divides by 1
  const at::Tensor bias1 = 1.0 - at::pow(opts_.beta1, step);                // F32 []
  const at::Tensor bias2_sqrt = (1.0 - at::pow(opts_.beta2, step)).sqrt();  // F32 []
  const at::Tensor p = param.to(at::kFloat);
  const at::Tensor denom = s.exp_avg_sq.sqrt().div_(bias2_sqrt).add_(opts_.eps);
  at::Tensor y = s.exp_avg.to(at::kFloat).div_(denom).div_(bias1).mul_(-lr);  // -lr * m_hat / (sqrt(v_hat) + eps)
  if (weight_decay != 0.0) y.add_(p, -lr * weight_decay);
  const at::Tensor c = s.compensation.to(at::kFloat);
  y.add_(c).mul_(keep);
  param.copy_(p + y);
  s.compensation.copy_(y.sub_(param.to(at::kFloat).sub_(p)).add_(c * (1.0 - keep)));
}

void AdamW::f32_kernel_steps(const ParamGroup& g, const std::vector<std::pair<size_t, State*>>& stepped,
                             const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  std::vector<quant::KnownAmax*> sinks(stepped.size(), nullptr);
  std::vector<at::Tensor> amaxes;  // F32 [] each, zeroed together: the kernels raise them
  for (size_t j = 0; j < stepped.size(); ++j) {
    const auto it = amax_sinks_.find(g.names[stepped[j].first]);
    if (it == amax_sinks_.end() || !it->second) continue;
    const at::Tensor& p = g.params[stepped[j].first];
    quant::KnownAmax& sink = *it->second;
    if (!sink.amax.defined() || sink.amax.device() != p.device()) sink.amax = at::empty({}, p.options());
    sinks[j] = &sink;
    amaxes.push_back(sink.amax);
  }
  if (!amaxes.empty()) at::_foreach_zero_(amaxes);
  const StepHyper hyper{g.lr, opts_.beta1, opts_.beta2, opts_.eps, g.weight_decay};
  for (size_t j = 0; j < stepped.size(); ++j) {
    const at::Tensor& p = g.params[stepped[j].first];
    f32_kernel_step(p, *stepped[j].second, hyper, grad_scale, found_inf, sinks[j] ? sinks[j]->amax : at::Tensor());
    if (sinks[j]) sinks[j]->version = p._version();
  }
}

void AdamW::step(const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  c10::NoGradGuard no_grad;
  for (const auto& g : groups_) {
    std::vector<at::Tensor> with_grad(g.params.size());  // the parameters that have a gradient, else undefined
    for (size_t i = 0; i < g.params.size(); ++i) {
      const at::Tensor& grad = g.params[i].grad();
      if (!grad.defined()) continue;
      if (grad.is_sparse()) throw Error("AdamW: parameter '" + g.names[i] + "' has a sparse gradient (unsupported)");
      with_grad[i] = g.params[i];
    }
    // One fused call per (device, dtype) bucket: the kernel needs homogeneous lists. Parameters of our own kernels
    // (large F32 ones, compensated and 8-bit ones) step one by one after it, their counters advanced together first.
    for (const auto& [key, indices] : group_by_device(with_grad, /*by_dtype=*/true)) {
      std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps, own_steps;
      std::vector<std::pair<at::Tensor, State*>> kahan;
      std::vector<std::pair<size_t, State*>> eight_bits, f32_kernel;  // (index in the group, state)
      for (size_t i : indices) {
        const at::Tensor& p = g.params[i];
        State& s = state_for(g.names[i], p);
        if (opts_.cuda_kernels && f32_kernel_takes(p, s)) {
          f32_kernel.emplace_back(i, &s);
          own_steps.push_back(s.step);
          continue;
        }
        if (s.eight_bit()) {
          eight_bits.emplace_back(i, &s);
          own_steps.push_back(s.step);
          continue;
        }
        if (compensated(p)) {
          kahan.emplace_back(p, &s);
          own_steps.push_back(s.step);
          continue;
        }
        params.push_back(p);
        grads.push_back(p.grad());
        exp_avgs.push_back(s.exp_avg);
        exp_avg_sqs.push_back(s.exp_avg_sq);
        steps.push_back(s.step);
      }
      const at::Device device = g.params[indices.front()].device();
      std::optional<at::Tensor> scale_here, inf_here;
      if (grad_scale) scale_here = grad_scale->to(device, at::kFloat, /*non_blocking=*/true);
      if (found_inf) inf_here = found_inf->to(device, at::kFloat, /*non_blocking=*/true);
      if (!params.empty()) {
        at::_foreach_add_(steps, 1);
        at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, g.lr, opts_.beta1,
                          opts_.beta2, g.weight_decay, opts_.eps, /*amsgrad=*/false, /*maximize=*/false, scale_here,
                          inf_here);
      }
      if (!own_steps.empty()) at::_foreach_add_(own_steps, 1);
      if (inf_here) {
        // A skipped step must not advance the bias-correction counters (torch/optim/adam.py does the same).
        steps.insert(steps.end(), own_steps.begin(), own_steps.end());
        at::_foreach_sub_(steps, std::vector<at::Tensor>(steps.size(), *inf_here));
      }
      if (!f32_kernel.empty()) f32_kernel_steps(g, f32_kernel, scale_here, inf_here);
      for (auto& [p, s] : kahan) compensated_step(p, *s, g.lr, g.weight_decay, scale_here, inf_here);
      if (eight_bits.empty()) continue;
      const StepHyper hyper{g.lr, opts_.beta1, opts_.beta2, opts_.eps, g.weight_decay};
      const at::Tensor& maps = maps_on(device);
      for (auto& [i, s] : eight_bits) {
        try {
          eight_bit_step(g.params[i], *s, maps, hyper, scale_here, inf_here, opts_.cuda_kernels);
        } catch (const c10::OutOfMemoryError&) {
          throw;  // the trainer names the settings that size memory
        } catch (const std::exception& e) {
          throw Error(fmt::format("AdamW 8-bit step of '{}' ({} elements, {}) failed: {}", g.names[i],
                                  g.params[i].numel(), c10::toString(g.params[i].scalar_type()), e.what()));
        }
      }
    }
  }
}

void AdamW::set_lr(double lr) {
  for (auto& g : groups_) g.lr = lr;
}

void AdamW::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.mutable_grad() = at::Tensor();
}

std::map<std::string, at::Tensor> AdamW::state_tensors() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, s] : state_) {
    out[name + ".exp_avg"] = s.exp_avg.detach();
    out[name + ".exp_avg_sq"] = s.exp_avg_sq.detach();
    out[name + ".step"] = s.step.detach();
    if (s.compensation.defined()) out[name + ".compensation"] = s.compensation.detach();
    if (s.eight_bit()) {
      out[name + ".exp_avg.absmax"] = s.exp_avg_absmax.detach();
      out[name + ".exp_avg_sq.absmax"] = s.exp_avg_sq_absmax.detach();
    }
  }
  return out;
}

std::map<std::string, at::Tensor> AdamW::state_dict() const {
  auto out = state_tensors();
  for (auto& [key, t] : out) t = t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
  return out;
}

AdamW::State AdamW::loaded_state(const std::string& name, const at::Tensor& p,
                                 const std::map<std::string, at::Tensor>& state) const {
  auto get = [&](const std::string& suffix, at::IntArrayRef shape) -> const at::Tensor& {
    auto it = state.find(name + suffix);
    if (it == state.end())
      throw Error("optimizer state lacks '" + name + suffix + "'", "the checkpoint's optimizer state is incomplete");
    if (!it->second.sizes().equals(shape))
      throw Error(fmt::format("optimizer state '{}{}' has shape [{}], expected [{}]", name, suffix,
                              shape_str(it->second), fmt::join(shape, ", ")),
                  "the model shape changed since the checkpoint was written; resume with the same model");
    return it->second;
  };
  const bool kahan = compensated(p), eight = eight_bit(name, p);
  if (kahan != (state.count(name + ".compensation") > 0)) {
    throw Error(
        fmt::format("optimizer state for '{}' was written {} Kahan summation", name, kahan ? "without" : "with"),
        "resume with the optimizer.kahan_summation setting of the run that wrote the checkpoint");
  }
  if (eight != (state.count(name + ".exp_avg.absmax") > 0)) {
    throw Error(fmt::format("optimizer state for '{}' was written {} 8-bit moments", name, eight ? "without" : "with"),
                "resume with the optimizer.name of the run that wrote the checkpoint");
  }
  auto st = state.find(name + ".step");
  if (st == state.end())
    throw Error("optimizer state lacks '" + name + ".step'", "the checkpoint's optimizer state is incomplete");
  if (st->second.numel() != 1)
    throw Error(
        fmt::format("optimizer state '{}.step' has shape [{}], expected a scalar", name, shape_str(st->second)));
  State s;
  s.step = st->second.reshape({}).to(p.device(), at::kFloat).clone();
  if (eight) {
    const int64_t blocks = (p.numel() + kEightBitBlock - 1) / kEightBitBlock;
    s.exp_avg = get(".exp_avg", p.sizes()).to(p.device(), at::kByte).contiguous().clone();
    s.exp_avg_sq = get(".exp_avg_sq", p.sizes()).to(p.device(), at::kByte).contiguous().clone();
    s.exp_avg_absmax = get(".exp_avg.absmax", {blocks}).to(p.device(), at::kFloat).clone();
    s.exp_avg_sq_absmax = get(".exp_avg_sq.absmax", {blocks}).to(p.device(), at::kFloat).clone();
  } else {
    s.exp_avg = get(".exp_avg", p.sizes()).to(p.device(), p.scalar_type()).clone();
    s.exp_avg_sq = get(".exp_avg_sq", p.sizes()).to(p.device(), kahan ? at::kFloat : p.scalar_type()).clone();
  }
  if (kahan) s.compensation = get(".compensation", p.sizes()).to(p.device(), p.scalar_type()).contiguous().clone();
  return s;
}

std::string AdamW::owner_of(const std::string& key, const std::set<std::string>& names) {
  static const std::vector<std::string> kSuffixes = {".exp_avg",      ".exp_avg_sq",     ".step",
                                                     ".compensation", ".exp_avg.absmax", ".exp_avg_sq.absmax"};
  for (const auto& suffix : kSuffixes) {
    if (ends_with(key, suffix) && names.count(key.substr(0, key.size() - suffix.size())))
      return key.substr(0, key.size() - suffix.size());
  }
  return "";
}

void AdamW::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  std::map<std::string, const at::Tensor*> params;
  std::set<std::string> names;
  for (const auto& g : groups_) {
    for (size_t i = 0; i < g.params.size(); ++i) params[g.names[i]] = &g.params[i];
    names.insert(g.names.begin(), g.names.end());
  }

  std::set<std::string> stated;  // parameters that have some entry in `state`
  for (const auto& [key, value] : state) {
    const std::string name = owner_of(key, names);
    if (name.empty())
      throw Error("optimizer state has entry '" + key + "' that matches no trainable parameter",
                  "the checkpoint was written for a different model or set of trainable parameters; "
                  "resume with the same model and LoRA settings, or start a fresh run");
    stated.insert(name);
    (void)value;
  }
  if (!state.empty()) {
    for (const auto& [name, p] : params) {
      if (!stated.count(name))
        throw Error("optimizer state has no entry for parameter '" + name + "'",
                    "the checkpoint was written for a different set of trainable parameters");
    }
  }
  std::map<std::string, State> loaded;
  for (const auto& name : stated) loaded.emplace(name, loaded_state(name, *params.at(name), state));
  state_ = std::move(loaded);
  initial_compensation_.clear();  // the weights come from the checkpoint too: the residuals of the start are stale
}

}  // namespace ft::optim
