"""bitsandbytes' AdamW8bit on a CUDA device, the reference of tests/quant/adamw_8bit_bnb_gpu_test.cpp.

usage: bnb_adamw8bit_ref.py IN.safetensors HYPER.json OUT.safetensors

IN.safetensors: "param" (F32, BF16 or F16, any shape, at least 4096 elements: bitsandbytes' min_8bit_size) and
"grads" ([steps, *param.shape], the param's dtype). HYPER.json: {"lr", "beta1", "beta2", "eps", "weight_decay"}.
bitsandbytes.optim.AdamW8bit steps the parameter once per gradient. OUT.safetensors:
  param.K             the parameter after step K (K = 1 .. steps)
  exp_avg, exp_avg_sq U8 codes after the last step (state1, state2), the param's shape
  exp_avg.absmax, exp_avg_sq.absmax  F32 [ceil(n / 256)] (absmax1, absmax2)

bitsandbytes is imported as bnb_ref.py imports it. Exit status 3, with the reason on stdout, when it cannot be
imported or no CUDA device is present (its 8-bit optimizers have no CPU kernel).
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(1, os.path.join(sys.prefix, "bnb"))
try:
    import bitsandbytes  # noqa: E402
except Exception as e:  # ImportError, or a broken native library
    print(f"bitsandbytes cannot be imported: {type(e).__name__}: {e}")
    sys.exit(3)
if not torch.cuda.is_available():
    print("no CUDA device: bitsandbytes' 8-bit optimizers run on CUDA only")
    sys.exit(3)


def main():
    in_path, hyper_path, out_path = sys.argv[1:4]
    inputs = load_file(in_path)
    with open(hyper_path) as f:
        h = json.load(f)
    param = torch.nn.Parameter(inputs["param"].cuda())
    grads = inputs["grads"].cuda()
    opt = bitsandbytes.optim.AdamW8bit([param], lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                                       weight_decay=h["weight_decay"])
    out = {}
    for k in range(grads.shape[0]):
        param.grad = grads[k].clone()
        opt.step()
        out[f"param.{k + 1}"] = param.detach().cpu().contiguous()
    state = opt.state[param]
    assert state["state1"].dtype == torch.uint8, "expected 8-bit state (numel >= min_8bit_size)"
    out["exp_avg"] = state["state1"].reshape(param.shape).cpu().contiguous()
    out["exp_avg_sq"] = state["state2"].reshape(param.shape).cpu().contiguous()
    out["exp_avg.absmax"] = state["absmax1"].cpu().contiguous()
    out["exp_avg_sq.absmax"] = state["absmax2"].cpu().contiguous()
    save_file(out, out_path, metadata={"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    main()
