"""torchao's float8 training on the CPU, the reference of tests/quant/fp8_training_torchao_test.cpp.

usage: torchao_fp8_training_ref.py IN.safetensors OUT.safetensors

For every tensor `cast.NAME` [rows, cols] of IN.safetensors, OUT.safetensors gets torchao's dynamic casts
(float8_utils.tensor_to_scale, then hp_tensor_and_scale_to_float8's saturated cast), as codes' bytes (U8) and the
scale's reciprocal (what torchao's scaled GEMMs take):
  NAME.tensorwise_e4m3.{codes,inverse}  one scale, float8_e4m3fn
  NAME.tensorwise_e5m2.{codes,inverse}  one scale, float8_e5m2
  NAME.rowwise_e4m3.{codes,inverse}     one scale per row (axiswise dim -1), rounded down to a power of two
For every case `linear.CASE.{x,w,dy}` (x [N, in], w [out, in], dy [N, out], bf16; w F32 for master weights, run
under bf16 autocast) and each recipe R of tensorwise and rowwise, torchao's Float8Linear
(Float8LinearConfig.from_recipe_name(R)) gives
  CASE.R.{y,dx,dw}: y = layer(x), and x.grad, w.grad after y.backward(dy).
The CPU's torch._scaled_mm takes only one scale per operand, so under rowwise scaling it is replaced by the same
product in F32 (codes as F32, times both scales, rounded once to the output dtype): torchao decides which operand is
cast how, and that is what the test checks.

torchao is imported from <venv>/bnb (sys.prefix/bnb) or else from the usual path. Exit status 3, with the reason on
stdout, when it cannot be imported.
"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(1, os.path.join(sys.prefix, "bnb"))
try:
    import torchao
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_utils import tensor_to_scale, to_fp8_saturated
except Exception as e:  # ImportError, or a broken native library
    print(f"torchao cannot be imported: {type(e).__name__}: {e}")
    sys.exit(3)

_scaled_mm = torch._scaled_mm


def emulated_scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return _scaled_mm(a, b, scale_a, scale_b, bias=bias, scale_result=scale_result, out_dtype=out_dtype,
                          use_fast_accum=use_fast_accum)
    out = (a.float() @ b.float()) * scale_a * scale_b
    return (out + bias if bias is not None else out).to(out_dtype)


def cast(x, dtype, granularity, pow2):
    scale = tensor_to_scale(x, dtype, scaling_granularity=granularity,
                            axiswise_dim=-1 if granularity is ScalingGranularity.AXISWISE else None,
                            round_scales_to_power_of_2=pow2)
    codes = to_fp8_saturated(x.to(torch.float32) * scale, dtype)
    return codes.view(torch.uint8).contiguous(), scale.reciprocal().reshape(-1 if scale.dim() else ()).contiguous()


def linear(x, w, dy, recipe):
    layer = torch.nn.Sequential(torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype))
    with torch.no_grad():
        layer[0].weight.copy_(w)
    convert_to_float8_training(layer, config=Float8LinearConfig.from_recipe_name(recipe))
    x = x.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=w.dtype == torch.float32):
        y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad, layer[0].weight.grad


def main():
    in_path, out_path = sys.argv[1:3]
    tensors = load_file(in_path)
    torch._scaled_mm = emulated_scaled_mm
    out = {}
    for key, x in tensors.items():
        if not key.startswith("cast."):
            continue
        name = key[len("cast."):]
        for tag, dtype, granularity, pow2 in (
                ("tensorwise_e4m3", torch.float8_e4m3fn, ScalingGranularity.TENSORWISE, False),
                ("tensorwise_e5m2", torch.float8_e5m2, ScalingGranularity.TENSORWISE, False),
                ("rowwise_e4m3", torch.float8_e4m3fn, ScalingGranularity.AXISWISE, True)):
            out[f"{name}.{tag}.codes"], out[f"{name}.{tag}.inverse"] = cast(x, dtype, granularity, pow2)
    cases = sorted({key.split(".")[1] for key in tensors if key.startswith("linear.")})
    for case in cases:
        x, w, dy = (tensors[f"linear.{case}.{part}"] for part in ("x", "w", "dy"))
        for recipe in ("tensorwise", "rowwise"):
            y, dx, dw = linear(x, w, dy, recipe)
            out[f"{case}.{recipe}.y"], out[f"{case}.{recipe}.dx"], out[f"{case}.{recipe}.dw"] = y, dx, dw
    save_file({k: v.contiguous() for k, v in out.items()}, out_path,
              metadata={"torchao": torchao.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    main()
