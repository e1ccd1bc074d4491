#include "optim/adamw_8bit.h"

#include <c10/core/GradMode.h>

#include "quant/nf4.h"

namespace ft::optim {
namespace {

// bitsandbytes' quantize_2D over a tensor (kernels/adamw_8bit.cu nearest_code, element by element): seven halvings
// of a binary search of the ascending `map` (F32 [256]) for x, then the nearer of the two entries around x, a tie
// going to the searched one; `lower` is the value below the map's first entry. x: F32; returns I64 codes.
at::Tensor nearest_codes(const at::Tensor& map, double lower_start, const at::Tensor& x) {
  at::Tensor pivot = at::full(x.sizes(), 127, x.options().dtype(at::kLong));
  at::Tensor upper_pivot = at::full_like(pivot, 255), lower_pivot = at::zeros_like(pivot);
  at::Tensor lower = at::full_like(x, lower_start), upper = at::ones_like(x);
  at::Tensor val = map.take(pivot);
  for (int64_t i = 64; i > 0; i /= 2) {
    const at::Tensor right = x > val;
    lower_pivot = at::where(right, pivot, lower_pivot);
    lower = at::where(right, val, lower);
    upper_pivot = at::where(right, upper_pivot, pivot);
    upper = at::where(right, upper, val);
    pivot = pivot + at::where(right, at::full({}, i, pivot.options()), at::full({}, -i, pivot.options()));
    val = map.take(pivot);
  }
  const at::Tensor up = at::where(x > (upper + val) * 0.5, upper_pivot, pivot);
  const at::Tensor down = at::where(x < (lower + val) * 0.5, lower_pivot, pivot);
  return at::where(x > val, up, down);
}

// exp_avg's codes, each moved one entry towards m's side where rounding gave it the other sign (wrapping as a byte).
at::Tensor signed_codes(const at::Tensor& map, const at::Tensor& m, const at::Tensor& absmax) {
  at::Tensor codes = nearest_codes(map, -1.0, m / absmax);
  const at::Tensor flipped = at::signbit(map.take(codes)) != at::signbit(m);
  const at::Tensor towards = at::where(m > 0, at::ones_like(codes), at::full_like(codes, -1));
  return at::where(flipped, codes + towards, codes).bitwise_and(255);
}

// `t` flattened and zero-padded to whole blocks: [blocks, 256].
at::Tensor in_blocks(const at::Tensor& t, int64_t blocks) {
  const at::Tensor flat = t.reshape({-1});
  return at::constant_pad_nd(flat, {0, blocks * kEightBitBlock - flat.numel()}).view({blocks, kEightBitBlock});
}

// The step in ATen ops: every new value is computed, then written where found_inf is 0.
void composite_step(const at::Tensor& param, AdamWState& s, const at::Tensor& maps, const StepHyper& h,
                    const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const int64_t n = param.numel(), blocks = (n + kEightBitBlock - 1) / kEightBitBlock;
  const at::Tensor map1 = maps[0], map2 = maps[1];  // F32 [256] each
  const auto f32 = param.options().dtype(at::kFloat);
  const at::Tensor g_raw = in_blocks(param.grad().to(at::kFloat), blocks);  // F32 [blocks, 256]
  const at::Tensor g = grad_scale ? g_raw * grad_scale->reciprocal() : g_raw;
  const at::Tensor valid = in_blocks(at::ones({n}, param.options().dtype(at::kBool)), blocks);
  const at::Tensor live = valid.logical_and(at::isfinite(g_raw));
  const float beta1 = static_cast<float>(h.beta1), beta2 = static_cast<float>(h.beta2);
  const at::Tensor zero = at::zeros({}, f32);
  at::Tensor v = map2.take(in_blocks(s.exp_avg_sq, blocks).to(at::kLong)) * s.exp_avg_sq_absmax.unsqueeze(1);
  v = at::where(live, v * beta2 + g * (1.0f - beta2) * g, zero);
  at::Tensor m = map1.take(in_blocks(s.exp_avg, blocks).to(at::kLong)) * s.exp_avg_absmax.unsqueeze(1);
  m = at::where(live, m * beta1 + g * (1.0f - beta1), zero);
  const at::Tensor absmax_m = m.abs().amax(1), absmax_v = v.abs().amax(1);  // F32 [blocks]

  const at::Tensor step = s.step.clamp_min(1.0);                                          // F32 []
  const at::Tensor correction1 = 1.0 - at::pow(at::full({}, beta1, f32), step);           // F32 []
  const at::Tensor correction2 = (1.0 - at::pow(at::full({}, beta2, f32), step)).sqrt();  // F32 []
  const at::Tensor step_size = correction2 * -static_cast<float>(h.lr) / correction1;     // F32 []
  const at::Tensor p = in_blocks(param.to(at::kFloat), blocks);
  const at::Tensor stepped = p + step_size * (m / (v.sqrt() + correction2 * static_cast<float>(h.eps)));
  const float decay = 1.0f - static_cast<float>(h.lr) * static_cast<float>(h.weight_decay);
  at::Tensor new_param, new_comp;
  if (s.compensation.defined()) {
    const at::Tensor updated = h.weight_decay > 0.0 ? stepped * decay : stepped;
    const at::Tensor y = (updated - p) + in_blocks(s.compensation.to(at::kFloat), blocks);
    new_param = (p + y).to(param.scalar_type());
    new_comp = (y - (new_param.to(at::kFloat) - p)).to(param.scalar_type());
  } else {
    // As bitsandbytes: the stepped weight is stored in its dtype, then decayed from that value and stored again.
    new_param = stepped.to(param.scalar_type());
    if (h.weight_decay > 0.0) new_param = (new_param.to(at::kFloat) * decay).to(param.scalar_type());
  }
  // Back to the parameter's shape; a step skipped by found_inf writes nothing.
  const auto unblock = [&](const at::Tensor& t) { return t.reshape({-1}).slice(0, 0, n).view(param.sizes()); };
  const at::Tensor keep = found_inf ? found_inf->eq(0) : at::ones({}, param.options().dtype(at::kBool));  // B []
  const at::Tensor write = unblock(live).logical_and(keep);
  param.copy_(at::where(write, unblock(new_param), param));
  if (s.compensation.defined()) s.compensation.copy_(at::where(write, unblock(new_comp), s.compensation));
  s.exp_avg.copy_(at::where(keep, unblock(signed_codes(map1, m, absmax_m.unsqueeze(1))).to(at::kByte), s.exp_avg));
  s.exp_avg_sq.copy_(
      at::where(keep, unblock(nearest_codes(map2, 0.0, v / absmax_v.unsqueeze(1))).to(at::kByte), s.exp_avg_sq));
  s.exp_avg_absmax.copy_(at::where(keep, absmax_m, s.exp_avg_absmax));
  s.exp_avg_sq_absmax.copy_(at::where(keep, absmax_v, s.exp_avg_sq_absmax));
}

}  // namespace

bool takes_8bit_moments(const std::string& name, const at::Tensor& param) {
  return param.is_floating_point() && param.numel() >= kEightBitMinNumel &&
         name.find("embed_tokens") == std::string::npos;
}

AdamWState zero_8bit_state(const at::Tensor& param, bool compensated) {
  const int64_t blocks = (param.numel() + kEightBitBlock - 1) / kEightBitBlock;
  const auto u8 = param.options().dtype(at::kByte).memory_format(at::MemoryFormat::Contiguous);
  AdamWState s;
  s.exp_avg = at::zeros(param.sizes(), u8);
  s.exp_avg_sq = at::zeros(param.sizes(), u8);
  s.step = at::zeros({}, param.options().dtype(at::kFloat));
  if (compensated) s.compensation = at::zeros_like(param, at::MemoryFormat::Contiguous);
  s.exp_avg_absmax = at::zeros({blocks}, param.options().dtype(at::kFloat));
  s.exp_avg_sq_absmax = at::zeros({blocks}, param.options().dtype(at::kFloat));
  return s;
}

at::Tensor eight_bit_maps(c10::Device device) {
  return at::stack({quant::dynamic_map(), quant::unsigned_dynamic_map()}).to(device).contiguous();
}

void eight_bit_step(const at::Tensor& param, AdamWState& s, const at::Tensor& maps, const StepHyper& h,
                    const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf,
                    bool cuda_kernels) {
  c10::NoGradGuard no_grad;
  if (cuda_kernels && eight_bit_kernel_takes(param, s, maps)) {
    eight_bit_kernel_step(param, s, maps, h, grad_scale, found_inf);
    return;
  }
  composite_step(param, s, maps, h, grad_scale, found_inf);
}

}  // namespace ft::optim
