// AdamW with torch.optim.AdamW(fused=True) semantics, stepping every (device, dtype) bucket of a parameter group
// with one at::_fused_adamw_ call. State is keyed by parameter name so checkpoints can store it in safetensors.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "optim/step_kernels.h"
#include "quant/fp8_cast.h"

namespace ft::optim {

struct AdamWOptions {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decay_norms_and_biases = false;  // false: norms, biases and embeddings get weight_decay 0
  // bf16/fp16 parameters: Kahan-compensated updates, as torchdistx's AnyPrecisionAdamW(use_kahan_summation=True):
  // each keeps a compensation buffer of its dtype holding what rounding the parameter dropped, and an F32 exp_avg_sq
  // (exp_avg stays in the parameter's dtype), so steps far below the dtype's resolution add up as they do on fp32
  // master weights. F32 parameters step through the fused kernel as without it.
  bool kahan_summation = false;
  // 8-bit moments (optim/adamw_8bit.h) for the parameters takes_8bit_moments picks: optimizer.name adamw_8bit.
  bool eight_bit_moments = false;
  // Kahan and 8-bit steps of CUDA parameters run in one kernel each (kernels/adamw_kahan.h, kernels/adamw_8bit.h)
  // instead of the ATen composites, and large F32 ones in one kernel each (kernels/adamw_f32.h: PyTorch's fused step
  // without its write of the gradient):
  // the run's KernelPolicy::kernels (train.fused_kernels in a build with our kernels).
  bool cuda_kernels = false;

  static AdamWOptions from_config(const OptimizerConfig& cfg);  // the optimizer.* section
};

// A named parameter: any dtype/shape, requires_grad; its .grad() is read by step().
using NamedParam = std::pair<std::string, at::Tensor>;

struct ParamGroup {
  std::string label;               // "decay" / "no_decay" or a caller-chosen label
  std::vector<std::string> names;  // parameter names, parallel to params
  std::vector<at::Tensor> params;  // leaf tensors updated in place
  double lr = 3e-4;                // this group's current learning rate
  double weight_decay = 0.0;
};

class AdamW {
 public:
  // Splits `params` into a "decay" group (weight_decay = opts.weight_decay) and a "no_decay" group (0) by name,
  // see no_weight_decay(); empty groups are dropped. Names must be unique.
  AdamW(const std::vector<NamedParam>& params, const AdamWOptions& opts);
  // Explicit groups (each with its own lr and weight_decay); betas/eps from opts.
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& opts);

  // True for parameters that are not decayed by default: "*norm.weight", "*layernorm*", biases, embed_tokens.
  static bool no_weight_decay(const std::string& name);

  // One optimizer step over every parameter with a defined grad (others are skipped, as torch does).
  // grad_scale: F32 scalar, grads are divided by it inside the kernel. found_inf: F32 scalar (0 or 1); when 1
  // the kernel leaves params and moments untouched and the step counters are rolled back, without a host sync.
  void step(const std::optional<at::Tensor>& grad_scale = std::nullopt,
            const std::optional<at::Tensor>& found_inf = std::nullopt);

  // Sets every group's lr (schedulers drive this once per step).
  void set_lr(double lr);
  // Sets the grads of every parameter to undefined (torch's set_to_none=True).
  void zero_grad();

  const std::vector<ParamGroup>& groups() const { return groups_; }
  std::vector<ParamGroup>& groups() { return groups_; }
  const AdamWOptions& options() const { return opts_; }

  // State as "<param>.exp_avg" (param dtype/shape), "<param>.exp_avg_sq" (param dtype/shape; F32 under Kahan
  // summation), "<param>.step" (F32 []) and, under Kahan summation, "<param>.compensation" (param dtype/shape) for
  // every parameter stepped at least once. With 8-bit moments exp_avg and exp_avg_sq are U8 codes of the param's
  // shape, with "<param>.exp_avg.absmax" and "<param>.exp_avg_sq.absmax" (F32 [ceil(numel / 256)]).
  // Tensors are detached copies on the CPU.
  std::map<std::string, at::Tensor> state_dict() const;
  // The same entries as the optimizer's own tensors (detached, on their devices, changed by the next step): for a
  // checkpoint that writes or copies them at once.
  std::map<std::string, at::Tensor> state_tensors() const;
  // The parameter a state_dict() key belongs to, among `names`; empty when it belongs to none.
  static std::string owner_of(const std::string& key, const std::set<std::string>& names);
  // Restores state_dict() output. Throws ft::Error naming the key on an unknown parameter, a missing entry, or a
  // shape mismatch; values are copied to each parameter's device and dtype.
  void load_state_dict(const std::map<std::string, at::Tensor>& state);

  // Where the steps of the parameters named write each new weight's amax, by parameter name: FP8 training's
  // tensorwise casts take it instead of computing it (quant::KnownAmax). Only the F32 kernel writes it; a parameter
  // stepped otherwise leaves its entry as it was, which then describes no weight, and the cast computes the amax.
  void write_amax_into(std::map<std::string, std::shared_ptr<quant::KnownAmax>> sinks) {
    amax_sinks_ = std::move(sinks);
  }

  // Kahan summation's starting compensation by parameter name (what casting wider values to the parameter's dtype
  // dropped: model::RoundingResiduals), taken by each parameter's first step instead of zeros, so that parameter plus
  // compensation starts at the wider values. Entries for parameters this optimizer does not step with Kahan summation,
  // or of another shape, are dropped at once; load_state_dict drops the rest (the checkpoint holds the compensation).
  void start_compensation_at(std::map<std::string, at::Tensor> residuals);
  // How many parameters still wait to take their starting compensation (none after a loaded state_dict).
  size_t starting_compensations() const { return initial_compensation_.size(); }

 private:
  using State = AdamWState;
  // Whether `param` steps with Kahan summation.
  bool compensated(const at::Tensor& param) const;
  // Whether parameter `name` steps with 8-bit moments.
  bool eight_bit(const std::string& name, const at::Tensor& param) const;
  // The 8-bit steps' dynamic maps on `device` (eight_bit_maps), made once per device.
  const at::Tensor& maps_on(c10::Device device);
  State& state_for(const std::string& name, const at::Tensor& param);
  // One parameter's Kahan-compensated AdamW step, its step count already advanced (no host sync): the CUDA kernel
  // where opts_.cuda_kernels and it takes the parameter, else ATen ops.
  void compensated_step(const at::Tensor& param, State& s, double lr, double weight_decay,
                        const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) const;
  // The F32 kernel's steps of group g's parameters `stepped` (index in g, state; counters advanced), each writing
  // its amax sink where it has one.
  void f32_kernel_steps(const ParamGroup& g, const std::vector<std::pair<size_t, State*>>& stepped,
                        const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf);
  void validate();
  // Parameter `name`'s entries of a state_dict(), checked against `p` and this optimizer's settings.
  State loaded_state(const std::string& name, const at::Tensor& p,
                     const std::map<std::string, at::Tensor>& state) const;

  std::vector<ParamGroup> groups_;
  AdamWOptions opts_;
  std::map<std::string, State> state_;
  std::map<std::string, at::Tensor> maps_;                  // by device (its str())
  std::map<std::string, at::Tensor> initial_compensation_;  // by parameter name, until its first step
  std::map<std::string, std::shared_ptr<quant::KnownAmax>> amax_sinks_;  // by parameter name (write_amax_into)
};

}  // namespace ft::optim
