#include "model/linear.h"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "model/fp8_training.h"
#include "model/lora_dropout.h"
#include "util/error.h"

namespace ft::model {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias) {
  weight = register_parameter("weight", at::empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", at::zeros({out_features}));
}

namespace {

// The input of the adapter's GEMMs: under autocast the GEMM casts it to the compute dtype anyway, so `x` (or the copy
// already cast for the base GEMM) serves; elsewhere x in the adapter's dtype, as PEFT's lora_A(x.to(A.dtype)).
at::Tensor adapter_input(const at::Tensor& x, const LinearImpl& layer) {
  if (at::autocast::is_autocast_enabled(x.device().type())) return x;
  return x.to(layer.lora_a.scalar_type());
}

// y2d [N, out] += scaling * down [N, r] B^T, in place in the GEMM's epilogue: B [out, r] is scaled (cheap) instead
// of the product [N, out], and no separate add pass runs. y2d must not be a view: autograd turns an in-place op on a
// view into CopySlices, whose backward copies the whole output gradient three times.
void add_adapter_(at::Tensor& y2d, const at::Tensor& down, const at::Tensor& lora_b, double scaling) {
  const at::ScalarType dtype = y2d.scalar_type();
  y2d.addmm_(down.reshape({-1, down.size(-1)}).to(dtype), (lora_b * scaling).to(dtype).t());
}

// x [..., in] as [N, in] and a layer output [N, out] back as [..., out].
at::Tensor as_rows(const at::Tensor& x) {
  return x.reshape({-1, x.size(-1)});
}
at::Tensor from_rows(const at::Tensor& y2d, const at::Tensor& x) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = y2d.size(1);
  return y2d.view(shape);
}

// `parts` (weights [out_i, in] or biases [out_i]) as one tensor when they are frozen, contiguous, consecutive row
// blocks of one buffer (join_frozen_weights), else undefined.
at::Tensor joined_rows(const std::vector<at::Tensor>& parts) {
  const at::Tensor& first = parts.at(0);
  if (first.requires_grad() || !first.is_contiguous() || first.dim() < 1 || first.dim() > 2) return {};
  int64_t rows = first.size(0);
  const char* next = static_cast<const char*>(first.const_data_ptr()) + first.nbytes();
  for (size_t i = 1; i < parts.size(); ++i) {
    const at::Tensor& t = parts[i];
    if (t.requires_grad() || !t.is_contiguous() || t.scalar_type() != first.scalar_type() ||
        t.sizes().slice(1) != first.sizes().slice(1) || !t.storage().is_alias_of(first.storage()) ||
        static_cast<const char*>(t.const_data_ptr()) != next) {
      return {};
    }
    rows += t.size(0);
    next += t.nbytes();
  }
  if (first.dim() == 1) return first.as_strided({rows}, {1});
  return first.as_strided({rows, first.size(1)}, {first.size(1), 1});
}

// The adapter's down projection [N, r] of its input h [N, in] (adapter_input): A dropout(h) while training with
// adapter dropout (through fused_lora_dropout_down, which keeps no mask, where the policy and h allow), else A h.
at::Tensor adapter_down(const at::Tensor& h, const LinearImpl& layer, const KernelPolicy& policy) {
  if (layer.lora_dropout <= 0.0 || !layer.is_training()) return at::linear(h, layer.lora_a);
  if (!policy.kernels_for(h) || !fused_lora_dropout_available(h)) {
    return at::linear(at::dropout(h, layer.lora_dropout, true), layer.lora_a);
  }
  const auto device_type = h.device().type();
  const at::ScalarType dtype = at::autocast::is_autocast_enabled(device_type)
                                   ? at::autocast::get_autocast_dtype(device_type)
                                   : layer.lora_a.scalar_type();  // the GEMM's dtype, as autocast or PEFT pick it
  return fused_lora_dropout_down(as_rows(h).to(dtype), layer.lora_a.to(dtype), layer.lora_dropout);
}

}  // namespace

at::Tensor LinearImpl::known_weight_amax() const {
  return fp8_weight_amax ? fp8_weight_amax->of(weight) : at::Tensor();
}

LinearWeight LinearImpl::gemm_weight() const {
  if (!quantized()) {
    LinearWeight w = LinearWeight::dense(weight, bias);
    if (fp8_training != Fp8Training::kOff) {
      w.format = LinearWeight::Format::kFp8Training;
      w.recipe = fp8_training;
      w.known_amax = known_weight_amax();
    }
    return w;
  }
  LinearWeight w;
  if (nf4) {
    w.format = LinearWeight::Format::kNf4;
    w.nf4 = {nf4};
    w.nf4_compute = nf4_compute;
  } else {
    w.format = LinearWeight::Format::kFp8;
    w.fp8 = *fp8;
  }
  w.bias = bias;
  w.dtype = quantized_dtype;
  return w;
}

int64_t LinearImpl::out_features() const {
  if (nf4) return nf4->shape.at(0);
  return fp8 ? fp8->rows() : weight.size(0);
}

int64_t LinearImpl::in_features() const {
  if (nf4) return nf4->shape.at(1);
  return fp8 ? fp8->cols() : weight.size(1);
}

int64_t LinearImpl::quantized_numel() const {
  return quantized() ? out_features() * in_features() : 0;
}

namespace {

// The values a layer's weight is quantized from: `dense`, or the weight's own values; checked against its shape.
const at::Tensor& values_to_quantize(const LinearImpl& layer, const at::Tensor& dense, const char* op) {
  FT_CHECK(!layer.quantized(), std::string(op) + ": the layer is quantized already");
  const at::Tensor& values = dense.defined() ? dense : layer.weight;
  FT_CHECK(values.dim() == 2 && values.sizes() == layer.weight.sizes(),
           std::string(op) + ": the weight must be [out, in] of the layer's shape");
  return values;
}

}  // namespace

void LinearImpl::quantize_nf4(const at::Tensor& dense, at::ScalarType dtype, int64_t blocksize) {
  const at::Tensor& values = values_to_quantize(*this, dense, "quantize_nf4");
  nf4 = std::make_shared<const quant::Nf4Tensor>(quant::quantize_nf4(values, blocksize, /*double_quant=*/true));
  quantized_dtype = dtype;
  parameters_.erase("weight");
  weight = at::Tensor();
}

void LinearImpl::quantize_fp8(const at::Tensor& dense, at::ScalarType dtype) {
  const at::Tensor& values = values_to_quantize(*this, dense, "quantize_fp8");
  fp8 = std::make_shared<const quant::Fp8Tensor>(quant::quantize_fp8_rows(values));
  quantized_dtype = dtype;
  parameters_.erase("weight");
  weight = at::Tensor();
}

void LinearImpl::replace_frozen(at::Tensor new_weight, at::Tensor new_bias) {
  if (new_weight.defined()) {
    weight = new_weight;
    parameters_["weight"] = std::move(new_weight);
  }
  if (bias.defined()) {
    bias = new_bias;
    parameters_["bias"] = std::move(new_bias);
  }
}

namespace {

// join_frozen_weights for FP8 layers: codes, scales and biases each into one buffer.
bool join_fp8_weights(const std::vector<LinearImpl*>& layers) {
  const LinearImpl& first = *layers[0];
  const bool with_bias = first.bias.defined();
  for (const LinearImpl* l : layers) {
    if (!l->fp8 || l->quantized_dtype != first.quantized_dtype || l->in_features() != first.in_features() ||
        l->fp8->data.device() != first.fp8->data.device() || l->bias.defined() != with_bias ||
        (with_bias && (l->bias.requires_grad() || l->bias.scalar_type() != first.bias.scalar_type()))) {
      return false;
    }
  }
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> codes, scales, biases;
  for (const LinearImpl* l : layers) {
    codes.push_back(l->fp8->data);
    scales.push_back(l->fp8->scale);
    if (with_bias) biases.push_back(l->bias);
  }
  const at::Tensor joint_codes = at::cat(codes);                             // F8E4M3FN [sum out_i, in]
  const at::Tensor joint_scales = at::cat(scales);                           // F32 [sum out_i]
  const at::Tensor joint_bias = with_bias ? at::cat(biases) : at::Tensor();  // [sum out_i] or undefined
  int64_t row = 0;
  for (LinearImpl* l : layers) {
    const int64_t n = l->out_features();
    l->fp8 = std::make_shared<const quant::Fp8Tensor>(
        quant::Fp8Tensor{joint_codes.narrow(0, row, n), joint_scales.narrow(0, row, n)});
    l->replace_frozen(at::Tensor(), with_bias ? joint_bias.narrow(0, row, n) : at::Tensor());
    row += n;
  }
  return true;
}

}  // namespace

bool join_frozen_weights(const std::vector<LinearImpl*>& layers) {
  if (layers.size() < 2) return false;
  if (layers[0]->fp8) return join_fp8_weights(layers);
  const at::Tensor& w0 = layers[0]->weight;
  const bool with_bias = layers[0]->bias.defined();
  for (const LinearImpl* l : layers) {
    const at::Tensor& w = l->weight;
    if (!w.defined() || w.requires_grad() || !w.is_contiguous() || w.dim() != 2 ||
        w.scalar_type() != w0.scalar_type() || w.device() != w0.device() || w.size(1) != w0.size(1) ||
        l->bias.defined() != with_bias) {
      return false;
    }
    if (with_bias && (l->bias.requires_grad() || l->bias.scalar_type() != layers[0]->bias.scalar_type() ||
                      l->bias.device() != w0.device())) {
      return false;
    }
  }
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> weights, biases;
  for (const LinearImpl* l : layers) {
    weights.push_back(l->weight);
    if (with_bias) biases.push_back(l->bias);
  }
  const at::Tensor joint_weight = at::cat(weights);  // [sum out_i, in]
  const at::Tensor joint_bias = with_bias ? at::cat(biases) : at::Tensor();  // [sum out_i] or undefined
  int64_t row = 0;
  for (LinearImpl* l : layers) {
    const int64_t n = l->weight.size(0);
    l->replace_frozen(joint_weight.narrow(0, row, n), with_bias ? joint_bias.narrow(0, row, n) : at::Tensor());
    row += n;
  }
  return true;
}

at::Tensor LinearImpl::forward(const at::Tensor& x, const KernelPolicy& policy) {
  if (!has_lora()) return ops::linear(x, gemm_weight(), policy);  // [..., out]
  at::Tensor y = ops::linear(as_rows(x), gemm_weight(), policy);  // [N, out]
  add_adapter_(y, adapter_down(as_rows(adapter_input(x, *this)), *this, policy), lora_b, lora_scaling);
  return from_rows(y, x);
}

void LinearImpl::add_lora(int64_t rank, double alpha, double dropout, at::Generator& gen) {
  FT_CHECK(!has_lora(), "add_lora: layer already has an adapter");
  const int64_t in = in_features();
  const at::Device device = nf4 ? nf4->packed.device() : fp8 ? fp8->data.device() : weight.device();
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming_uniform_(a=sqrt(5)), as PEFT
  at::Tensor a = at::empty({rank, in}, at::kFloat).uniform_(-bound, bound, gen);
  lora_a = register_parameter("lora_A", a.to(device));
  lora_b = register_parameter("lora_B", at::zeros({out_features(), rank}, at::TensorOptions().device(device)));
  lora_scaling = alpha / static_cast<double>(rank);
  lora_dropout = dropout;
}

void LinearImpl::merge_lora() {
  if (!has_lora()) return;
  if (quantized()) {
    throw Error(std::string("cannot merge a LoRA adapter into an ") + (nf4 ? "NF4" : "FP8") + " weight",
                "save the adapter and merge it into the unquantized model (finetune export)");
  }
  {
    at::NoGradGuard no_grad;
    at::Tensor delta = at::matmul(lora_b.to(at::kFloat), lora_a.to(at::kFloat)) * lora_scaling;
    weight.copy_((weight.to(at::kFloat) + delta).to(weight.scalar_type()));
  }
  parameters_.erase("lora_A");
  parameters_.erase("lora_B");
  lora_a = at::Tensor();
  lora_b = at::Tensor();
}

namespace {

// How linear_group runs the base GEMMs of its layers.
enum class GroupRegime {
  kSeparate,     // each layer's own forward
  kCastJoint,    // weights cast to the compute dtype (as autocast would, layer by layer) and concatenated: one GEMM
  kJoined,       // frozen weights that are row blocks of one buffer (join_frozen_weights), or NF4 weights stacked
                 // (quantized_plan): one GEMM, no copy of a dense weight
  kSharedInput,  // weights in the compute dtype and apart: concatenating them would copy every weight each step, so
                 // only the cast input is shared, one GEMM per layer
  kFp8Training,  // trained with FP8 GEMMs (train.fp8): each weight has its own scales, so one GEMM per layer, and
                 // the input is cast to FP8 once for all of them (fp8_training_linears)
};

struct GroupPlan {
  GroupRegime regime = GroupRegime::kSeparate;
  at::ScalarType dtype = at::kFloat;  // the GEMMs' dtype: autocast's, else the weights'
  bool autocast = false;
  LinearWeight joined;  // kJoined: the joint weight [sum out_i, in] and bias [sum out_i] (or undefined)
};

std::vector<at::Tensor> weights_of(const std::vector<LinearImpl*>& layers, bool bias) {
  std::vector<at::Tensor> out;
  for (const LinearImpl* layer : layers) out.push_back(bias ? layer->bias : layer->weight);
  return out;
}

// The joint weight of quantized layers (all of one format, dtype and `in`, all or none with bias), or nullopt. NF4
// layers stack their codes (one GEMM over the weight dequantized into one buffer, as a joint dense weight would
// run); FP8 layers need their codes, scales and biases to be row blocks of one buffer (join_frozen_weights).
std::optional<LinearWeight> joined_quantized(const std::vector<LinearImpl*>& layers) {
  const LinearImpl& first = *layers[0];
  LinearWeight joined;
  joined.format = first.nf4 ? LinearWeight::Format::kNf4 : LinearWeight::Format::kFp8;
  joined.dtype = first.quantized_dtype;
  joined.nf4_compute = first.nf4_compute;
  std::vector<at::Tensor> codes, scales, biases;
  for (const LinearImpl* layer : layers) {
    if ((first.nf4 ? !layer->nf4 : !layer->fp8) || layer->quantized_dtype != first.quantized_dtype ||
        layer->nf4_compute != first.nf4_compute || layer->in_features() != first.in_features() ||
        layer->bias.defined() != first.bias.defined()) {
      return std::nullopt;
    }
    if (layer->nf4) joined.nf4.push_back(layer->nf4);
    if (layer->fp8) {
      codes.push_back(layer->fp8->data);
      scales.push_back(layer->fp8->scale);
    }
    if (layer->bias.defined()) biases.push_back(layer->bias);
  }
  if (first.nf4) {
    if (!biases.empty()) joined.bias = at::cat(biases);  // [sum out_i]
    return joined;
  }
  joined.fp8 = {joined_rows(codes), joined_rows(scales)};  // [sum out_i, in], [sum out_i]
  if (!biases.empty()) joined.bias = joined_rows(biases);
  if (!joined.fp8.data.defined() || !joined.fp8.scale.defined() || joined.bias.defined() != !biases.empty()) {
    return std::nullopt;
  }
  return joined;
}

// Quantized layers run as one GEMM over their joint weight where they have one, else each its own forward.
GroupPlan quantized_plan(const at::Tensor& x, const std::vector<LinearImpl*>& layers) {
  GroupPlan plan;
  std::optional<LinearWeight> joined = joined_quantized(layers);
  if (!joined) return plan;  // kSeparate
  const LinearImpl& first = *layers[0];
  const auto device_type = x.device().type();
  plan.autocast = at::autocast::is_autocast_enabled(device_type);
  plan.dtype = plan.autocast ? at::autocast::get_autocast_dtype(device_type) : first.quantized_dtype;
  plan.regime = GroupRegime::kJoined;
  plan.joined = std::move(*joined);
  return plan;
}

GroupPlan choose_regime(const at::Tensor& x, const std::vector<LinearImpl*>& layers, const KernelPolicy& policy) {
  GroupPlan plan;
  if (!policy.group_gemms || layers.size() < 2) return plan;
  const Fp8Training fp8 = layers[0]->fp8_training;
  if (std::any_of(layers.begin(), layers.end(),
                  [](const LinearImpl* l) { return l->fp8_training != Fp8Training::kOff; })) {
    const bool alike = std::all_of(layers.begin(), layers.end(), [&](const LinearImpl* l) {
      return l->fp8_training == fp8 && !l->has_lora() && !l->quantized();
    });
    if (alike) plan.regime = GroupRegime::kFp8Training;
    return plan;
  }
  if (std::any_of(layers.begin(), layers.end(), [](const LinearImpl* l) { return l->quantized(); })) {
    return quantized_plan(x, layers);
  }
  const at::ScalarType weight_dtype = layers[0]->weight.scalar_type();
  const bool with_bias = layers[0]->bias.defined();
  for (const LinearImpl* layer : layers) {
    if (layer->weight.scalar_type() != weight_dtype || layer->bias.defined() != with_bias) return plan;
  }
  const auto device_type = x.device().type();
  plan.autocast = at::autocast::is_autocast_enabled(device_type);
  plan.dtype = plan.autocast ? at::autocast::get_autocast_dtype(device_type) : weight_dtype;
  if (weight_dtype != plan.dtype) {
    plan.regime = GroupRegime::kCastJoint;
    return plan;
  }
  const at::Tensor joint = joined_rows(weights_of(layers, false));
  const at::Tensor joint_bias = with_bias ? joined_rows(weights_of(layers, true)) : at::Tensor();
  if (joint.defined() && joint_bias.defined() == with_bias) {
    plan.regime = GroupRegime::kJoined;
    plan.joined = LinearWeight::dense(joint, joint_bias);
  } else {
    plan.regime = GroupRegime::kSharedInput;
  }
  return plan;
}

// The base GEMMs on xin [N, in]: the joint output [N, sum out_i] when one GEMM makes them all, else (kSharedInput)
// `out` gets each layer's [N, out_i].
at::Tensor run_base(const at::Tensor& xin, const std::vector<LinearImpl*>& layers, const GroupPlan& plan,
                    const KernelPolicy& policy, std::vector<at::Tensor>& out) {
  if (plan.regime == GroupRegime::kJoined) return ops::linear(xin, plan.joined, policy);
  if (plan.regime == GroupRegime::kSharedInput) {
    for (const LinearImpl* layer : layers) out.push_back(ops::linear(xin, layer->gemm_weight(), policy));
    return {};
  }
  std::vector<at::Tensor> weights, biases;  // kCastJoint
  for (const LinearImpl* layer : layers) {
    weights.push_back(layer->weight.to(plan.dtype));
    if (layer->bias.defined()) biases.push_back(layer->bias.to(plan.dtype));
  }
  const LinearWeight cast =
      LinearWeight::dense(at::cat(weights),
                          biases.empty() ? at::Tensor() : at::cat(biases));  // [sum out_i, in], [sum out_i]
  return ops::linear(xin, cast, policy);
}

// The adapters' down projections [N, r_i] of the adapted layers `adapted` on h [N, in]. With dropout each layer
// draws its own mask (as PEFT), so their A GEMMs stay apart; without, one GEMM over the concatenated A.
std::vector<at::Tensor> group_adapter_down(const at::Tensor& h, const std::vector<LinearImpl*>& layers,
                                           const std::vector<size_t>& adapted, const KernelPolicy& policy) {
  const bool train_dropout = std::any_of(adapted.begin(), adapted.end(), [&](size_t i) {
    return layers[i]->lora_dropout > 0.0 && layers[i]->is_training();
  });
  std::vector<at::Tensor> down;
  if (train_dropout) {
    for (size_t i : adapted) down.push_back(adapter_down(h, *layers[i], policy));
    return down;
  }
  std::vector<at::Tensor> a;
  std::vector<int64_t> ranks;
  for (size_t i : adapted) {
    a.push_back(layers[i]->lora_a);
    ranks.push_back(layers[i]->lora_a.size(0));
  }
  return at::linear(h, at::cat(a)).split_with_sizes(ranks, -1);
}

// Adds every adapter into the joint output [N, sum out_i] in one GEMM (a column block of it would be a view): the
// scaled B matrices form a block-diagonal [sum out_i, sum r_i], an empty block for a layer without an adapter.
void add_adapters_to_joint(at::Tensor& joint, const std::vector<at::Tensor>& down,
                           const std::vector<LinearImpl*>& layers, const std::vector<size_t>& adapted) {
  std::vector<at::Tensor> blocks;
  size_t next = 0;
  const auto b_options = layers[adapted[0]]->lora_b.options();
  for (size_t i = 0; i < layers.size(); ++i) {
    const LinearImpl& l = *layers[i];
    const bool has = next < adapted.size() && adapted[next] == i;
    blocks.push_back(has ? l.lora_b * l.lora_scaling : at::zeros({l.out_features(), 0}, b_options));
    next += has ? 1 : 0;
  }
  add_adapter_(joint, at::cat(down, -1), at::block_diag(blocks), 1.0);
}

// The grouped layers of one input: x [..., in], xin = x cast to the plan's dtype as [N, in].
LinearGroupOutput run_group(const at::Tensor& x, const at::Tensor& xin, const std::vector<LinearImpl*>& layers,
                            const GroupPlan& plan, const KernelPolicy& policy) {
  std::vector<at::Tensor> out;  // per layer: [N, out_i], then [..., out_i]
  at::Tensor joint = run_base(xin, layers, plan, policy, out);  // [N, sum out_i] or undefined
  std::vector<size_t> adapted;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i]->has_lora()) adapted.push_back(i);
  }
  if (!adapted.empty()) {
    const at::Tensor h = plan.autocast ? xin : adapter_input(x, *layers[adapted[0]]);
    const std::vector<at::Tensor> down = group_adapter_down(h, layers, adapted, policy);
    if (joint.defined()) {
      add_adapters_to_joint(joint, down, layers, adapted);
    } else {
      for (size_t j = 0; j < adapted.size(); ++j) {
        const LinearImpl& l = *layers[adapted[j]];
        add_adapter_(out[adapted[j]], down[j], l.lora_b, l.lora_scaling);
      }
    }
  }
  if (joint.defined()) {
    std::vector<int64_t> sizes;
    for (const LinearImpl* layer : layers) sizes.push_back(layer->out_features());
    out = joint.split_with_sizes(sizes, 1);
  }
  for (at::Tensor& y : out) y = from_rows(y, x);
  return {out, joint};
}

}  // namespace

LinearGroupOutput linear_group(const at::Tensor& x, const std::vector<LinearImpl*>& layers,
                               const KernelPolicy& policy) {
  const GroupPlan plan = choose_regime(x, layers, policy);
  if (plan.regime == GroupRegime::kSeparate) {
    LinearGroupOutput out;
    for (LinearImpl* layer : layers) out.outputs.push_back(layer->forward(x, policy));
    return out;
  }
  if (plan.regime == GroupRegime::kFp8Training) {  // x as each layer would get it: its gradient sums as theirs would
    LinearGroupOutput out;
    std::vector<at::Tensor> amax;  // F32 [] each, or undefined
    for (const LinearImpl* layer : layers) amax.push_back(layer->known_weight_amax());
    out.outputs = fp8_training_linears(x, weights_of(layers, false), layers[0]->fp8_training, policy, amax);
    for (size_t i = 0; i < layers.size(); ++i) {  // the bias as ops::linear adds it
      if (layers[i]->bias.defined()) out.outputs[i].add_(layers[i]->bias.to(out.outputs[i].scalar_type()));
    }
    return out;
  }
  const at::Tensor xin = as_rows(x.to(plan.dtype));  // [N, in]: cast once instead of once per layer
  return run_group(x, xin, layers, plan, policy);
}

}  // namespace ft::model
