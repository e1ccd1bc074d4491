"""torchao's per-row float8 quantization on the CPU, the reference of tests/quant/fp8_torchao_test.cpp.

usage: torchao_fp8_ref.py IN.safetensors OUT.safetensors

For every tensor NAME [rows, cols] of IN.safetensors, OUT.safetensors gets torchao's
_choose_scale_float8(x, block_size=[1, cols], float8_dtype=float8_e4m3fn) and _quantize_affine_float8 of x with it
(the per-row granularity of Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())):
  NAME.scale  F32 [rows]
  NAME.codes  U8 [rows, cols]  the e4m3 codes' bytes (safetensors readers here take no F8 tensors)

torchao is imported from <venv>/bnb (sys.prefix/bnb, where scripts/setup.sh installs the quantization references of
third_party/requirements-bnb.txt) or else from the usual path. Exit status 3, with the reason on stdout, when it
cannot be imported.
"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(1, os.path.join(sys.prefix, "bnb"))
try:
    import torchao
    from torchao.quantization.quant_primitives import _choose_scale_float8, _quantize_affine_float8
except Exception as e:  # ImportError, or a broken native library
    print(f"torchao cannot be imported: {type(e).__name__}: {e}")
    sys.exit(3)


def main():
    in_path, out_path = sys.argv[1:3]
    out = {}
    for name, x in load_file(in_path).items():
        scale = _choose_scale_float8(x, block_size=[1, x.shape[1]], float8_dtype=torch.float8_e4m3fn)
        codes = _quantize_affine_float8(x, scale, torch.float8_e4m3fn)
        out[name + ".scale"] = scale.reshape(-1).contiguous()
        out[name + ".codes"] = codes.view(torch.uint8).contiguous()
    save_file(out, out_path, metadata={"torchao": torchao.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    main()
