"""bitsandbytes' NF4 outputs on the CPU, the reference of tests/quant/nf4_bnb_test.cpp.

usage: bnb_ref.py IN.safetensors JOBS.json OUT.safetensors

JOBS.json: {"cases": [{"name": str, "blocksize": int, "double_quant": bool}, ...]}; IN.safetensors holds one input
tensor per case under the case's name. For each case OUT.safetensors gets, from
bitsandbytes.functional.quantize_4bit(w, blocksize, quant_type="nf4", compress_statistics=double_quant):
  NAME.packed   U8 [ceil(n/2)]  the packed codes (bitsandbytes returns them as [ceil(n/2), 1])
  NAME.absmax   F32 [blocks], or U8 [blocks] when double-quantized
  NAME.absmax2  F32 [ceil(blocks/256)]  (double-quantized only: state2.absmax)
  NAME.offset   F32 [1]                 (double-quantized only)
  NAME.absmax_restored  F32 [blocks]    (double-quantized only: dequantize_blockwise(absmax, state2) + offset)
  NAME.dequant  dequantize_4bit of that state, in w's dtype, shape of w
plus "dynamic_map" (create_dynamic_map(signed=True)), "unsigned_dynamic_map" (create_dynamic_map(signed=False), the
second moment's map of the 8-bit optimizers) and "nf4_code" (get_4bit_type("nf4")).

dequantize_4bit runs on a copy of the state whose shape is flattened to [n]: bitsandbytes 0.50.2's AVX-512 CPU
kernel indexes the absmax per row (row * (cols // blocksize) + col // blocksize), which is wrong when a row is not a
whole number of blocks (e.g. [96, 80] with blocksize 64 gives values off by up to 2x); with one flat row its
indexing is the flat one that quantize_4bit, the pure-PyTorch kernel and the CUDA kernel all use.
NAME.dequant_rows holds the call with the real shape, for the test to compare where the rows align.

bitsandbytes is imported from <venv>/bnb (sys.prefix/bnb, where scripts/setup.sh installs it) or else from the usual
path. Exit status 3, with the reason on stdout, when bitsandbytes cannot be imported.
"""
import copy
import json
import os
import sys

# bitsandbytes wraps its pure-PyTorch fallbacks (odd last dimension) in torch.compile, which costs ~20 s of C++
# compilation on first use; eager execution runs the same ops.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

# scripts/setup.sh installs bitsandbytes into <venv>/bnb rather than site-packages, where every `import peft` would
# load it (third_party/requirements-bnb.txt); first on the path, so that the pinned copy wins over any other.
sys.path.insert(1, os.path.join(sys.prefix, "bnb"))
try:
    import bitsandbytes  # noqa: E402
    import bitsandbytes.functional as F  # noqa: E402
except Exception as e:  # ImportError, or a broken native library
    print(f"bitsandbytes cannot be imported: {type(e).__name__}: {e}")
    sys.exit(3)


def main():
    in_path, jobs_path, out_path = sys.argv[1:4]
    inputs = load_file(in_path)
    with open(jobs_path) as f:
        jobs = json.load(f)
    out = {
        "dynamic_map": F.create_dynamic_map(signed=True).contiguous(),
        "unsigned_dynamic_map": F.create_dynamic_map(signed=False).contiguous(),
        "nf4_code": F.get_4bit_type("nf4", device="cpu").contiguous(),
    }
    meta = {"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__}
    for case in jobs["cases"]:
        name = case["name"]
        w = inputs[name]
        packed, state = F.quantize_4bit(w, blocksize=case["blocksize"], quant_type="nf4",
                                        compress_statistics=case["double_quant"])
        out[name + ".packed"] = packed.reshape(-1).contiguous()
        out[name + ".absmax"] = state.absmax.contiguous()
        if case["double_quant"]:
            assert state.state2.blocksize == 256, state.state2.blocksize
            assert torch.equal(state.state2.code, out["dynamic_map"])
            out[name + ".absmax2"] = state.state2.absmax.contiguous()
            out[name + ".offset"] = state.offset.reshape(1).float().contiguous()
            restored = F.dequantize_blockwise(state.absmax, state.state2)
            restored += state.offset
            out[name + ".absmax_restored"] = restored.contiguous()
        flat = copy.copy(state)
        flat.shape = torch.Size([w.numel()])
        out[name + ".dequant"] = F.dequantize_4bit(packed, flat).reshape(w.shape).contiguous()
        out[name + ".dequant_rows"] = F.dequantize_4bit(packed, state).reshape(w.shape).contiguous()
    save_file(out, out_path, metadata=meta)


if __name__ == "__main__":
    main()
