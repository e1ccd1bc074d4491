"""Reference values from PyTorch and transformers for tests/optim and tests/metrics.

Run by the C++ tests (tests/support/torch_reference.cpp) with $FT_PYTHON.

Usage: torch_ref.py MODE IN.json OUT.json, MODE in adamw | scaler | clip | schedule | tfevents | xml.
Tensors travel as nested lists of float32 values written as doubles (exact both ways)."""
import json
import math
import struct
import sys

import torch


def tensors(lst):
    return [torch.tensor(x, dtype=torch.float32) for x in lst]


def adamw(cfg):
    params = [torch.nn.Parameter(t) for t in tensors(cfg["params"])]
    groups = [{"params": [params[i] for i in g["indices"]], "weight_decay": g["weight_decay"]} for g in cfg["groups"]]
    opt = torch.optim.AdamW(groups, lr=cfg["lrs"][0], betas=tuple(cfg["betas"]), eps=cfg["eps"], fused=True)
    for step, grads in enumerate(cfg["grads"]):
        for g in opt.param_groups:
            g["lr"] = cfg["lrs"][step]
        for p, g in zip(params, tensors(grads)):
            p.grad = g
        opt.step()
        opt.zero_grad(set_to_none=True)
    state = []
    for p in params:
        s = opt.state[p]
        state.append({"exp_avg": s["exp_avg"].tolist(), "exp_avg_sq": s["exp_avg_sq"].tolist(),
                      "step": float(s["step"])})
    return {"params": [p.detach().tolist() for p in params], "state": state}


def scaler(cfg):
    params = [torch.nn.Parameter(t) for t in tensors(cfg["params"])]
    opt = torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"], fused=True)
    sc = torch.amp.GradScaler("cpu", init_scale=cfg["init_scale"], growth_interval=cfg["growth_interval"])
    inject = {(s, i, j): v for s, i, j, v in cfg["inject"]}
    out = {"scale_before": [], "scale_after": [], "params": [], "norm": []}
    for step, grads in enumerate(cfg["grads"]):
        scale = sc.get_scale()
        out["scale_before"].append(scale)
        for i, (p, g) in enumerate(zip(params, tensors(grads))):
            g = sc.scale(g)  # as if backward ran on scaler.scale(loss)
            flat = g.view(-1)
            for j in range(flat.numel()):
                if (step, i, j) in inject:
                    flat[j] = float(inject[(step, i, j)])
            p.grad = g
        sc.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(params, cfg["max_norm"])
        out["norm"].append(float(norm) if math.isfinite(float(norm)) else str(float(norm)))
        sc.step(opt)
        sc.update()
        out["scale_after"].append(sc.get_scale())
        out["params"].append([p.detach().tolist() for p in params])
        opt.zero_grad(set_to_none=True)
    out["growth_tracker"] = int(sc._get_growth_tracker())
    return out


def clip(cfg):
    out = []
    for case in cfg["cases"]:
        grads = tensors(case["grads"])
        for j in case.get("nonfinite", []):
            grads[int(j[0])].view(-1)[int(j[1])] = float(j[2])
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g
        norm = float(torch.nn.utils.clip_grad_norm_(params, case["max_norm"], foreach=True))
        out.append({"norm": norm if math.isfinite(norm) else str(norm),
                    "grads": [p.grad.tolist() for p in params] if math.isfinite(norm) else []})
    return out


def schedule(cfg):
    from transformers import optimization as o

    out = []
    for case in cfg["cases"]:
        total, warm, kind, mn = case["total"], case["warmup"], case["type"], case["min_lr_ratio"]
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=case["peak_lr"])
        if kind == "constant":
            s = o.get_constant_schedule_with_warmup(opt, warm)
        elif kind == "linear" and mn == 0.0:
            s = o.get_linear_schedule_with_warmup(opt, warm, total)
        elif kind == "linear":  # linear decay to a floor = wsd without a stable phase (tests use no warmup:
            # wsd warms up from the floor, ours from 0 like get_linear_schedule_with_warmup)
            s = o.get_wsd_schedule(opt, warm, total - warm, num_stable_steps=0, decay_type="linear", min_lr_ratio=mn)
        elif kind == "cosine":
            s = o.get_cosine_with_min_lr_schedule_with_warmup(opt, warm, total, min_lr_rate=mn)
        elif kind == "wsd":
            s = o.get_wsd_schedule(opt, warm, case["decay"], num_training_steps=total, decay_type="linear",
                                   min_lr_ratio=mn)
        lrs = []
        for _ in range(case["steps"]):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            s.step()
        out.append(lrs)
    return out


def masked_crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_varint(b, i):
    shift = value = 0
    while True:
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return value, i


def parse_fields(b):
    """Protobuf wire format -> list of (field, wire_type, value)."""
    i, out = 0, []
    while i < len(b):
        key, i = read_varint(b, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        elif wt == 2:
            n, i = read_varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wt}")
        out.append((field, wt, v))
    return out


def tfevents(cfg):
    data = open(cfg["path"], "rb").read()
    i, events = 0, []
    while i < len(data):
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[i + 8:i + 12])
        assert hcrc == masked_crc32c(header), "length crc"
        payload = data[i + 12:i + 12 + length]
        (pcrc,) = struct.unpack("<I", data[i + 12 + length:i + 16 + length])
        assert pcrc == masked_crc32c(payload), "payload crc"
        i += 16 + length
        ev = {"step": 0}
        for field, wt, v in parse_fields(payload):
            if field == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif field == 2:
                ev["step"] = v
            elif field == 3:
                ev["file_version"] = v.decode()
            elif field == 5:
                for f2, _, val in parse_fields(v):
                    assert f2 == 1
                    for f3, wt3, x in parse_fields(val):
                        if f3 == 1:
                            ev["tag"] = x.decode()
                        elif f3 == 2:
                            assert wt3 == 5
                            ev["value"] = struct.unpack("<f", x)[0]
        events.append(ev)
    return events


def xml(cfg):
    """An SVG written by `finetune plot`: parsed by the standard library's XML parser (fails on malformed XML)."""
    import xml.etree.ElementTree as ET

    root = ET.parse(cfg["path"]).getroot()
    return {"root": root.tag, "width": root.get("width", ""), "height": root.get("height", ""),
            "elements": sum(1 for _ in root.iter())}


if __name__ == "__main__":
    mode, src, dst = sys.argv[1:4]
    cfg = json.load(open(src))
    result = globals()[mode](cfg)
    json.dump(result, open(dst, "w"))
