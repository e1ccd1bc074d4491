#include "optim/adamw_8bit.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <mutex>

#include "quant/nf4.h"
#include "util/fmt.h"

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

// One stretch of whole blocks of a parameter and its state, as flat views into them ([len]; the scales [ceil(len /
// 256)]); compensation is undefined without Kahan summation.
struct Stretch {
  at::Tensor param, grad, exp_avg, exp_avg_sq, compensation, exp_avg_absmax, exp_avg_sq_absmax;
};

// The step over one stretch in ATen ops: every new value is computed, then written where found_inf is 0.
void composite_step(const Stretch& t, const at::Tensor& maps, const StepHyper& h,
                    const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf,
                    const at::Tensor& step) {
  const int64_t n = t.param.numel(), blocks = (n + kEightBitBlock - 1) / kEightBitBlock;
  const at::Tensor map1 = maps[0], map2 = maps[1];  // F32 [256] each
  const auto f32 = t.param.options().dtype(at::kFloat);
  const at::Tensor g_raw = in_blocks(t.grad.to(at::kFloat), blocks);  // F32 [blocks, 256]
  const at::Tensor g = grad_scale ? g_raw * grad_scale->reciprocal() : g_raw;
  const at::Tensor valid = in_blocks(at::ones({n}, t.param.options().dtype(at::kBool)), blocks);
  const at::Tensor live = valid.logical_and(at::isfinite(g_raw));
  const float beta1 = static_cast<float>(h.beta1), beta2 = static_cast<float>(h.beta2);
  const at::Tensor zero = at::zeros({}, f32);
  at::Tensor v = map2.take(in_blocks(t.exp_avg_sq, blocks).to(at::kLong)) * t.exp_avg_sq_absmax.unsqueeze(1);
  v = at::where(live, v * beta2 + g * (1.0f - beta2) * g, zero);
  at::Tensor m = map1.take(in_blocks(t.exp_avg, blocks).to(at::kLong)) * t.exp_avg_absmax.unsqueeze(1);
  m = at::where(live, m * beta1 + g * (1.0f - beta1), zero);
  const at::Tensor absmax_m = m.abs().amax(1), absmax_v = v.abs().amax(1);  // F32 [blocks]

  const at::Tensor correction1 = 1.0 - at::pow(at::full({}, beta1, f32), step);           // F32 []
  const at::Tensor correction2 = (1.0 - at::pow(at::full({}, beta2, f32), step)).sqrt();  // F32 []
  const at::Tensor step_size = correction2 * -static_cast<float>(h.lr) / correction1;     // F32 []
  const at::Tensor p = in_blocks(t.param.to(at::kFloat), blocks);
  const at::Tensor stepped = p + step_size * (m / (v.sqrt() + correction2 * static_cast<float>(h.eps)));
  const float decay = 1.0f - static_cast<float>(h.lr) * static_cast<float>(h.weight_decay);
  const auto dtype = t.param.scalar_type();
  at::Tensor new_param, new_comp;
  if (t.compensation.defined()) {
    const at::Tensor updated = h.weight_decay > 0.0 ? stepped * decay : stepped;
    const at::Tensor y = (updated - p) + in_blocks(t.compensation.to(at::kFloat), blocks);
    new_param = (p + y).to(dtype);
    new_comp = (y - (new_param.to(at::kFloat) - p)).to(dtype);
  } else {
    // As bitsandbytes: the stepped weight is stored in its dtype, then decayed from that value and stored again.
    new_param = stepped.to(dtype);
    if (h.weight_decay > 0.0) new_param = (new_param.to(at::kFloat) * decay).to(dtype);
  }
  const auto unblock = [&](const at::Tensor& x) { return x.reshape({-1}).slice(0, 0, n); };
  const at::Tensor keep = found_inf ? found_inf->eq(0) : at::ones({}, t.param.options().dtype(at::kBool));  // B []
  const at::Tensor write = unblock(live).logical_and(keep);
  t.param.copy_(at::where(write, unblock(new_param), t.param));
  if (t.compensation.defined()) t.compensation.copy_(at::where(write, unblock(new_comp), t.compensation));
  t.exp_avg.copy_(at::where(keep, unblock(signed_codes(map1, m, absmax_m.unsqueeze(1))).to(at::kByte), t.exp_avg));
  t.exp_avg_sq.copy_(
      at::where(keep, unblock(nearest_codes(map2, 0.0, v / absmax_v.unsqueeze(1))).to(at::kByte), t.exp_avg_sq));
  t.exp_avg_absmax.copy_(at::where(keep, absmax_m, t.exp_avg_absmax));
  t.exp_avg_sq_absmax.copy_(at::where(keep, absmax_v, t.exp_avg_sq_absmax));
}

// The composite over stretches of 4,096 blocks (1M elements): its temporaries take some 60 bytes per element, which a
// whole LM head would turn into tens of GB.
void composite_steps(const at::Tensor& param, AdamWState& s, const at::Tensor& maps, const StepHyper& h,
                     const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  constexpr int64_t kStretch = 4096 * kEightBitBlock;
  const at::Tensor flat = param.is_contiguous() ? param.view({-1}) : param.contiguous().view({-1});
  const at::Tensor grad = param.grad().reshape({-1});
  const at::Tensor step = s.step.clamp_min(1.0);  // F32 []; a first step skipped by found_inf left the count at 0
  const int64_t n = flat.numel();
  for (int64_t start = 0; start < n; start += kStretch) {
    const int64_t len = std::min(kStretch, n - start), b0 = start / kEightBitBlock;
    const int64_t blocks = (len + kEightBitBlock - 1) / kEightBitBlock;
    Stretch t{flat.narrow(0, start, len),
              grad.narrow(0, start, len),
              s.exp_avg.view({-1}).narrow(0, start, len),
              s.exp_avg_sq.view({-1}).narrow(0, start, len),
              s.compensation.defined() ? s.compensation.view({-1}).narrow(0, start, len) : at::Tensor(),
              s.exp_avg_absmax.narrow(0, b0, blocks),
              s.exp_avg_sq_absmax.narrow(0, b0, blocks)};
    composite_step(t, maps, h, grad_scale, found_inf, step);
  }
  if (!param.is_contiguous()) param.copy_(flat.view(param.sizes()));
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
  if (param.is_cuda()) {
    static std::once_flag warned;  // once per process: the reason is the same for every tensor and step
    std::call_once(warned, [] {
      FT_LOG_WARN(
          "optimizer: adamw_8bit steps CUDA tensors through ATen ops (train.fused_kernels is off, or this "
          "build has no CUDA kernels): slower than the kernel, with some 60 bytes of temporaries per element "
          "of 1M-element stretches");
    });
  }
  composite_steps(param, s, maps, h, grad_scale, found_inf);
}

}  // namespace ft::optim
