"""The Python contenders of bench/compare: Hugging Face transformers' LlamaForCausalLM (Gemma2/Gemma3ForCausalLM for
the g workloads; eager or torch.compile, optionally with Liger's kernels, PEFT for LoRA, bitsandbytes for the NF4 base of q, torchao for the FP8 base of f8) on the same shapes, batch and precision as `finetune train` in bench/compare/run.sh. Random weights and
random tokens; bf16 autocast over fp32 weights (LoRA: bf16 frozen base, fp32 adapters; --float8: torchao's float8
training), fused AdamW, gradient
clipping at 1.0, the model's own loss (logits upcast to fp32). Prints one JSON line. With --save DIR, instead of
timing steps: the time transformers' Trainer stops training for one checkpoint after the warm-up steps
(save_pretrained of the model and torch.save of the optimizer state into DIR, as Trainer._save_checkpoint does)."""
import argparse
import json
import os
import time

# The time to the first step counts from the launch (bench/compare/run.sh exports FT_LAUNCH_TIME) or, when run by
# hand, from here: interpreter start, imports, model build and the first optimizer step.
LAUNCH = float(os.environ.get("FT_LAUNCH_TIME", time.time()))

import torch  # noqa: E402  (after LAUNCH: the import is part of the time to the first step)
import transformers  # noqa: E402

WORKLOADS = {
    # (a) GPT-2-small shape as a Llama
    "a": dict(cfg=dict(vocab_size=50304, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                       num_attention_heads=12, num_key_value_heads=12, tie_word_embeddings=True,
                       max_position_embeddings=1024), batch=32, seq=1024, lora=False),
    # (b) Llama-3.2-1B shape
    "b": dict(cfg=dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                       num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True, rope_theta=500000.0,
                       max_position_embeddings=2048), batch=8, seq=2048, lora=False),
    # (c) Llama-3-8B shape, LoRA r16 on all 7 projections
    "c": dict(cfg=dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                       max_position_embeddings=8192), batch=4, seq=2048, lora=True),
    # (q) Llama-3-8B shape, QLoRA r16 on all 7 projections: transformers' bitsandbytes NF4 base (double-quantized
    # absmax, bf16 compute) loaded from --model-dir, as users load one
    "q": dict(cfg={}, batch=4, seq=2048, lora=True, nf4=True),  # the shape: bench's llama3-8b model directory
    # (f8) the same on an FP8 base: torchao's per-row float8 (Float8DynamicActivationFloat8WeightConfig(PerRow)) on
    # the decoder layers' projections of the bf16 model from --model-dir, PEFT's LoRA on top
    "f8": dict(cfg={}, batch=4, seq=2048, lora=True, fp8=True),
    # (moe) Qwen3-30B-A3B's shape with fewer layers (bench's model directory), LoRA r16 on attention and on the experts'
    # fused weights (PEFT's target_parameters), gradient checkpointing
    "moe": dict(cfg={}, batch=4, seq=2048, lora=True, moe=True, grad_ckpt=True),
    # (q70) Llama-3-70B's layer shape with 16 of its 80 layers, QLoRA r16, gradient checkpointing, micro-batch 2
    "q70": dict(cfg={}, batch=2, seq=2048, lora=True, nf4=True, grad_ckpt=True),
    # (8b-full) Llama-3-8B shape from --model-dir, full fine-tune with bf16 weights and gradient checkpointing, as
    # transformers' Trainer runs it with bf16 weights (the optimizer: --optim)
    "8b-full": dict(cfg={}, batch=4, seq=2048, lora=False, bf16_weights=True, grad_ckpt=True),
    # (g2) Gemma-2-2B shape, LoRA r16: soft-capping, so eager attention (transformers refuses SDPA for it)
    "g2": dict(cls="Gemma2ForCausalLM", config="Gemma2Config", attn="eager",
               cfg=dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256,
                        sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                        max_position_embeddings=8192), batch=4, seq=2048, lora=True),
    # (g3) Gemma-3-1B shape, LoRA r16: 5 of 6 layers with a 512-token window
    "g3": dict(cls="Gemma3ForCausalLM", config="Gemma3TextConfig",
               cfg=dict(vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                        num_attention_heads=4, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                        sliding_window=512, max_position_embeddings=32768), batch=4, seq=2048, lora=True),
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

p = argparse.ArgumentParser()
p.add_argument("workload", choices=sorted(WORKLOADS))
p.add_argument("--mode", choices=["eager", "compile"], default="eager")
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--steps", type=int, default=15)
p.add_argument("--optim", choices=["adamw", "adamw8bit"], default="adamw",
               help="torch.optim.AdamW(fused=True), or bitsandbytes' AdamW8bit with 32-bit state for embeddings, as "
                    "transformers' Trainer sets up optim=adamw_bnb_8bit (bitsandbytes importable)")
p.add_argument("--save", help="time one checkpoint into this directory instead of the steps")
p.add_argument("--model-dir", help="a Hugging Face model directory to load (q, f8, q70; optional for c)")
p.add_argument("--float8", choices=["tensorwise", "rowwise"],
               help="full fine-tunes: torchao's float8 training (convert_to_float8_training with this recipe) on the "
                    "decoder layers' projections, as torchtitan applies it (the LM head stays bf16)")
p.add_argument("--liger", action="store_true",
               help="Llama workloads (a, b, c): Liger's Triton kernels (RoPE, RMSNorm, SwiGLU, the fused linear "
                    "cross-entropy) patched into transformers' Llama before the model is built, as axolotl and "
                    "LLaMA-Factory users run it (liger-kernel 0.8.5 importable: a carried wheel)")
a = p.parse_args()
w = WORKLOADS[a.workload]
if w.get("bf16_weights") and not a.model_dir:
    raise SystemExit(f"workload {a.workload} loads its model: give --model-dir")
if a.liger:
    if w.get("cls", "LlamaForCausalLM") != "LlamaForCausalLM" or w.get("moe"):
        raise SystemExit(f"--liger: workload {a.workload} is not a Llama")
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    apply_liger_kernel_to_llama()  # RoPE, RMSNorm, SwiGLU and the fused linear cross-entropy (its defaults)

torch.manual_seed(0)
cfg = None if w.get("nf4") or w.get("fp8") or w.get("moe") else getattr(transformers, w.get("config", "LlamaConfig"))(
    **w["cfg"], attn_implementation=w.get("attn", "sdpa"))
if w.get("nf4"):
    quant = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                            bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, quantization_config=quant,
                                                              dtype=torch.bfloat16, device_map={"": 0},
                                                              attn_implementation="sdpa")
    cfg = model.config
elif w.get("fp8"):
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.bfloat16, device_map={"": 0},
                                                              attn_implementation="sdpa")
    quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),
              filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear) and ".layers." in fqn)
    cfg = model.config
elif a.model_dir:  # loaded as users load a model (c, moe: the bench's random model directories)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        a.model_dir, dtype=torch.bfloat16 if w["lora"] or w.get("bf16_weights") else torch.float32, device_map={"": 0},
        attn_implementation="sdpa")
    cfg = model.config
else:
    with torch.device("cuda"):
        model = getattr(transformers, w.get("cls", "LlamaForCausalLM"))(cfg).to(
            torch.bfloat16 if w["lora"] else torch.float32)
if a.float8:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(a.float8),
                               module_filter_fn=lambda m, fqn: ".layers." in fqn)
if w.get("grad_ckpt"):
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
if w["lora"]:
    import peft
    if w.get("moe"):  # the experts are fused 3-D parameters in transformers 5: PEFT adapts them as parameters
        lora = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS[:4],
                               target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])
    else:
        lora = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS)
    model = peft.get_peft_model(model, lora)
model.train()
params = [p for p in model.parameters() if p.requires_grad]
if a.optim == "adamw8bit":
    import bitsandbytes
    opt = bitsandbytes.optim.AdamW8bit(params, lr=1e-4)
    manager = bitsandbytes.optim.GlobalOptimManager.get_instance()
    for module in model.modules():
        if isinstance(module, torch.nn.Embedding):
            manager.register_module_override(module, "weight", {"optim_bits": 32})
else:
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
step_fn_model = torch.compile(model) if a.mode == "compile" else model
batch = torch.randint(0, cfg.vocab_size, (w["batch"], w["seq"]), device="cuda")


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step_fn_model(input_ids=batch, labels=batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


step()
torch.cuda.synchronize()
first_step_s = time.time() - LAUNCH
for _ in range(a.warmup - 1):
    step()
torch.cuda.synchronize()
if a.save:
    t0 = time.perf_counter()
    model.save_pretrained(a.save)
    torch.save(opt.state_dict(), os.path.join(a.save, "optimizer.pt"))
    os.sync()
    dt = time.perf_counter() - t0
    size = sum(os.path.getsize(os.path.join(a.save, f)) for f in os.listdir(a.save))
    print(json.dumps(dict(workload=a.workload, runner="hf-save", stall_s=dt, bytes=size)), flush=True)
    raise SystemExit(0)
t0 = time.perf_counter()
for _ in range(a.steps):
    step()
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / a.steps
print(json.dumps(dict(workload=a.workload,
                      runner=("peft-" if w["lora"] else "hf-") + ("liger-" if a.liger else "") +
                      ("torchao-fp8-" if w.get("fp8") else "") +
                      (f"torchao-float8-{a.float8}-" if a.float8 else "") +
                      ("bnb-adamw8bit-" if a.optim == "adamw8bit" else "") + a.mode,
                      tokens_per_s=w["batch"] * w["seq"] / dt, step_s=dt,
                      peak_alloc_gib=torch.cuda.max_memory_allocated() / 2**30,
                      peak_reserved_gib=torch.cuda.max_memory_reserved() / 2**30, first_step_s=first_step_s)),
      flush=True)
