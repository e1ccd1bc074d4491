// AdamW with 8-bit moments (optimizer.name: adamw_8bit), bitsandbytes' AdamW8bit: exp_avg and exp_avg_sq take one
// byte per element, an index into bitsandbytes' dynamic map (signed for exp_avg, unsigned for exp_avg_sq), scaled by
// an F32 absmax per block of 256 elements: 2 bytes of state per parameter instead of 8, about what a bf16 model's
// weights take. Each step dequantizes the moments, updates them in F32, takes each block's new absmax, steps the
// parameter and quantizes the moments again (the formulas: kernels/adamw_8bit.h). Small tensors and embeddings keep
// the moments they have without it (takes_8bit_moments): F32 for F32 weights, the weight's dtype under bf16-pure
// (F32 exp_avg_sq with Kahan summation). With optimizer.kahan_summation, bf16/fp16 parameters add their updates through
// a compensation buffer as in the F32-moment path.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "optim/step_kernels.h"

namespace ft::optim {

constexpr int64_t kEightBitBlock = 256;      // elements per absmax block
constexpr int64_t kEightBitMinNumel = 4096;  // bitsandbytes' min_8bit_size: smaller tensors keep full-size moments

// Whether parameter `name` steps with 8-bit moments under adamw_8bit: floating point, at least 4096 elements, not an
// embedding table (transformers' Trainer keeps nn.Embedding weights on 32-bit state with bitsandbytes' optimizers,
// as bitsandbytes advises for stability).
bool takes_8bit_moments(const std::string& name, const at::Tensor& param);

// Zero moments (code 0 at absmax 0 reads as 0) and step; a compensation buffer when `compensated`.
AdamWState zero_8bit_state(const at::Tensor& param, bool compensated);

// The signed and the unsigned dynamic map, F32 [2, 256], on `device`.
at::Tensor eight_bit_maps(c10::Device device);

// One step of `param` (s.step already counts it; grad_scale / found_inf as AdamW::step). The CUDA kernel where
// `cuda_kernels` and it takes the tensors; else ATen ops with the kernel's formulas in IEEE F32 (the kernel's
// __fdividef and __powf, bitsandbytes' too, may differ by an ulp, which moves a code only at a midpoint).
void eight_bit_step(const at::Tensor& param, AdamWState& s, const at::Tensor& maps, const StepHyper& h,
                    const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf,
                    bool cuda_kernels);

}  // namespace ft::optim
