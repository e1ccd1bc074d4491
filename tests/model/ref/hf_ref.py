"""Reference outputs from Hugging Face transformers / PEFT for the C++ model parity tests.

make   --out DIR : for each family F, a tiny random model saved in DIR/F/model, plus DIR/F/ref.safetensors
                  (input_ids, logits, packing pieces) and DIR/F/ref.json (greedy generation)
logits --jobs JSON : for each job {"model", "adapter" (optional), "nf4" or "fp8" (optional), "ids", "out"}, the
                  logits of transformers (with the PEFT adapter when given, on a bitsandbytes NF4 base with "nf4": true,
                  on torchao's per-row float8 base with "fp8": true) for the input_ids tensor stored in the safetensors
                  file "ids"
generate --jobs JSON : for each job {"model", "nf4" or "fp8" (optional), "prompt" (ids), "max_new_tokens", "out"},
                  transformers' greedy generate() on that base, written to "out" as {"generated": [ids]}
One process serves several jobs because importing transformers takes seconds.
"""
import argparse
import copy
import json
import os

import torch
from safetensors.torch import load_file, save_file

FAMILIES = {
    # Llama 3 style: GQA and llama3 rope scaling whose original context (32) is inside the tested lengths.
    "llama": dict(cls="LlamaForCausalLM", cfg="LlamaConfig", kw=dict(
        num_key_value_heads=2, rope_theta=500000.0, max_position_embeddings=256,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 32})),
    # Mistral with a sliding window shorter than the tested sequences, so the window mask is exercised.
    "mistral": dict(cls="MistralForCausalLM", cfg="MistralConfig", kw=dict(
        num_key_value_heads=1, sliding_window=16, max_position_embeddings=256)),
    # Qwen2: q/k/v biases and tied embeddings.
    "qwen2": dict(cls="Qwen2ForCausalLM", cfg="Qwen2Config", kw=dict(
        num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=256, use_sliding_window=False)),
    # Qwen3: per-head q/k RMSNorm before RoPE, head_dim (24) not hidden / heads (16), untied, no biases.
    "qwen3": dict(cls="Qwen3ForCausalLM", cfg="Qwen3Config", kw=dict(
        num_key_value_heads=2, head_dim=24, tie_word_embeddings=False, max_position_embeddings=256,
        use_sliding_window=False, attention_bias=False)),
    # Qwen3 with YaRN as Qwen's model cards extend the context (factor 4 over the original context).
    "qwen3_yarn": dict(cls="Qwen3ForCausalLM", cfg="Qwen3Config", kw=dict(
        num_key_value_heads=2, tie_word_embeddings=False, max_position_embeddings=128, use_sliding_window=False,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})),
    # Llama with every YaRN field set: other ramp bounds without rounding, and DeepSeek's mscale ratio for the
    # attention factor.
    "llama_yarn": dict(cls="LlamaForCausalLM", cfg="LlamaConfig", kw=dict(
        num_key_value_heads=2, rope_theta=10000.0, max_position_embeddings=256,
        rope_scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "beta_fast": 16.0,
                      "beta_slow": 2.0, "mscale": 0.8, "mscale_all_dim": 0.5, "truncate": False})),
    # Qwen3 with attention biases (q/k/v and o) and tied embeddings.
    "qwen3_bias": dict(cls="Qwen3ForCausalLM", cfg="Qwen3Config", kw=dict(
        num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=256, use_sliding_window=False,
        attention_bias=True)),
    # Phi-3 (mini-4k style): fused qkv_proj and gate_up_proj, a sliding window shorter than the tested sequences.
    "phi3": dict(cls="Phi3ForCausalLM", cfg="Phi3Config", kw=dict(
        num_key_value_heads=2, sliding_window=16, max_position_embeddings=256, tie_word_embeddings=False)),
    # Phi-3.5 / Phi-4-mini style: longrope whose original context (16) lies inside the tested lengths (the 24-token
    # logits and the generation past 16 tokens use the long factors, the packed pieces the short ones), partial
    # rotary (half of each 16-dim head), tied embeddings.
    # Its reference generation decodes without a KV cache: once the sequence outgrows the original context every
    # position turns with the long factors, and transformers drops the cache there to recompute them (Phi3's
    # prepare_inputs_for_generation; 5.17 dropped it without recomputing the earlier tokens, 5.24 recomputes them).
    "phi3_longrope": dict(cls="Phi3ForCausalLM", cfg="Phi3Config", generate_without_cache=True, kw=dict(
        num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=64,
        original_max_position_embeddings=16, partial_rotary_factor=0.5,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.7],
                      "long_factor": [1.5, 2.5, 4.0, 8.0]})),
    # Gemma 2: (1 + w) norms around attention and MLP, GeGLU, sqrt(hidden) embedding scale, head_dim (24) not
    # hidden / heads, query_pre_attn_scalar, attention and final logit soft-capping small enough to bend the values,
    # the first layer sliding (window 8, inside the tested lengths) and the second global, untied embeddings.
    # Eager attention, as transformers advises for Gemma 2: 5.17 let SDPA run it and so dropped the soft-capping.
    "gemma2": dict(cls="Gemma2ForCausalLM", cfg="Gemma2Config", gemma=True, kw=dict(attn_implementation="eager",
        num_key_value_heads=2, head_dim=24, query_pre_attn_scalar=20, sliding_window=8, max_position_embeddings=256,
        attn_logit_softcapping=2.0, final_logit_softcapping=3.0, tie_word_embeddings=False)),
    # Gemma 2 without soft-capping or sliding layers (the SDPA path), with attention biases and tied embeddings.
    "gemma2_plain": dict(cls="Gemma2ForCausalLM", cfg="Gemma2Config", gemma=True, kw=dict(
        num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, max_position_embeddings=256,
        attn_logit_softcapping=None, final_logit_softcapping=None, attention_bias=True, tie_word_embeddings=True,
        layer_types=["full_attention", "full_attention"])),
    # Gemma 3 text: (1 + w) q/k norms, a sliding layer whose rope base is rope_local_base_freq and a global layer with
    # linear rope scaling (as the 4B+ releases), window 8, untied embeddings, no soft-capping.
    "gemma3": dict(cls="Gemma3ForCausalLM", cfg="Gemma3TextConfig", gemma=True, kw=dict(
        num_key_value_heads=2, head_dim=24, query_pre_attn_scalar=24, sliding_window=8, max_position_embeddings=256,
        layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})),
    # Gemma 3 text with every layer global (no sliding window), GQA 4:1, untied embeddings.
    "gemma3_full": dict(cls="Gemma3ForCausalLM", cfg="Gemma3TextConfig", gemma=True, kw=dict(
        num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, max_position_embeddings=256,
        layer_types=["full_attention", "full_attention"], tie_word_embeddings=False)),
    # Gemma 3 text with attention biases, tied embeddings, final logit soft-capping, and three layers from the
    # legacy sliding_window_pattern (2: sliding, global, sliding).
    "gemma3_bias": dict(cls="Gemma3ForCausalLM", cfg="Gemma3TextConfig", gemma=True, kw=dict(
        num_hidden_layers=3, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=32, sliding_window=6,
        sliding_window_pattern=2, max_position_embeddings=256, attention_bias=True, tie_word_embeddings=True,
        final_logit_softcapping=3.0)),
    # Gemma 3's multimodal checkpoint (4B/12B/27B: Gemma3ForConditionalGeneration) with the "gemma3" language model
    # and a one-layer SigLIP vision tower: finetune trains the language model and keeps the tower.
    "gemma3_mm": dict(cls="Gemma3ForConditionalGeneration", cfg="Gemma3TextConfig", gemma=True, multimodal=True, kw=dict(
        num_key_value_heads=2, head_dim=24, query_pre_attn_scalar=24, sliding_window=8, max_position_embeddings=256,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})),
    # Qwen3-MoE: 4 experts of width 32, top 2 without renormalisation, the middle of three layers dense
    # (mlp_only_layers; intermediate_size 112), q/k norms, untied embeddings.
    "qwen3_moe": dict(cls="Qwen3MoeForCausalLM", cfg="Qwen3MoeConfig", moe=True, kw=dict(
        num_hidden_layers=3, num_key_value_heads=2, max_position_embeddings=256, use_sliding_window=False,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=[1], router_aux_loss_coef=0.01, tie_word_embeddings=False)),
    # Qwen3-MoE as the released 30B-A3B routes (norm_topk_prob), every second layer sparse (decoder_sparse_step 2),
    # tied embeddings.
    "qwen3_moe_step": dict(cls="Qwen3MoeForCausalLM", cfg="Qwen3MoeConfig", moe=True, kw=dict(
        num_hidden_layers=2, num_key_value_heads=1, max_position_embeddings=256, use_sliding_window=False,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=2,
        tie_word_embeddings=True)),
    # Mixtral: 4 experts of intermediate_size 112, top 2 renormalised, GQA, a sliding window shorter than the tested
    # sequences, the checkpoint's block_sparse_moe.experts.N.w1/w2/w3 names.
    "mixtral": dict(cls="MixtralForCausalLM", cfg="MixtralConfig", moe=True, kw=dict(
        num_key_value_heads=2, sliding_window=16, max_position_embeddings=256, num_local_experts=4,
        num_experts_per_tok=2, router_aux_loss_coef=0.02)),
}


def moe_reference(model, input_ids):
    """transformers' router load-balancing loss (load_balancing_loss_func via output_router_logits) on input_ids, and
    the training loss that adds it times router_aux_loss_coef (labels = input_ids, shifted inside)."""
    out = model(input_ids=input_ids, labels=input_ids, output_router_logits=True)
    return {"aux_loss": out.aux_loss.reshape(1).float(), "loss_with_aux": out.loss.reshape(1).float()}


def make(family, out):
    import transformers
    torch.manual_seed(0)
    spec = FAMILIES[family]
    kw = dict(num_hidden_layers=2)
    kw.update(spec["kw"])
    cfg = getattr(transformers, spec["cfg"])(
        vocab_size=97, hidden_size=64, intermediate_size=112, num_attention_heads=4,
        rms_norm_eps=1e-5, initializer_range=0.2, bos_token_id=1, eos_token_id=2, pad_token_id=0, **kw)
    if spec.get("multimodal"):  # the text config inside Gemma3Config, beside a tiny SigLIP tower (28 px, 2 x 2 patches)
        vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                 num_attention_heads=2, image_size=28, patch_size=14)
        cfg = transformers.Gemma3Config(text_config=cfg.to_dict(), vision_config=vision.to_dict(),
                                        mm_tokens_per_image=4, boi_token_index=94, eoi_token_index=95,
                                        image_token_index=96, initializer_range=0.2, eos_token_id=2)
    model = getattr(transformers, spec["cls"])(cfg).eval()
    with torch.no_grad():  # biases start at zero and norm weights at one; make them matter
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.2)
            elif spec.get("gemma") and name.endswith("norm.weight"):  # Gemma scales by 1 + w, w starting at 0
                p.normal_(0.0, 0.3)
            elif name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
                p.normal_(1.0, 0.2)
    model.save_pretrained(os.path.join(out, "model"))
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, 97, (2, 24), generator=g)
    a = torch.randint(3, 97, (1, 9), generator=g)
    b = torch.randint(3, 97, (1, 11), generator=g)
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
        logits_a = model(input_ids=a).logits
        logits_b = model(input_ids=b).logits
        prompt = input_ids[:1, :8]
        gen = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=32,
                             min_new_tokens=0, eos_token_id=None, pad_token_id=0,
                             use_cache=not spec.get("generate_without_cache", False))
        # transformers' own bf16 logits: the yardstick for our bf16 error (bf16 weights, bf16 compute).
        logits_bf16 = copy.deepcopy(model).to(torch.bfloat16)(input_ids=input_ids).logits.float()
        extra = moe_reference(model, input_ids) if spec.get("moe") else {}
    save_file({"input_ids": input_ids, "logits": logits.contiguous(), "a_ids": a, "b_ids": b,
               "a_logits": logits_a.contiguous(), "b_logits": logits_b.contiguous(),
               "logits_bf16": logits_bf16.contiguous(), **extra},
              os.path.join(out, "ref.safetensors"))
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump({"prompt": prompt[0].tolist(), "generated": gen[0, prompt.shape[1]:].tolist()}, f)


def import_bitsandbytes():
    """bitsandbytes from <venv>/bnb, where scripts/setup.sh installs it (third_party/requirements-bnb.txt: outside
    site-packages, so that the other jobs' `import peft` does not load it), else from the usual path."""
    import sys
    sys.path.insert(1, os.path.join(sys.prefix, "bnb"))
    import bitsandbytes
    return bitsandbytes


def expert_stacks(model):
    """The fused expert weights of the MoE layers (transformers 5: mlp.experts.gate_up_proj [E, 2I, H] and
    mlp.experts.down_proj [E, H, I]), which finetune's model.quantize quantizes as well."""
    for name, p in model.named_parameters():
        if ".layers." in name and p.dim() == 3 and name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            yield p


def quantize_projections(model):
    """Every projection weight of the decoder layers replaced by bitsandbytes' NF4 round trip of it (quantize_4bit
    with block 64, double-quantized absmax, then dequantize_4bit, in F32): the weight bitsandbytes' Linear4bit
    multiplies by (its forward is linear(x, dequantize_4bit(W)) + bias; what BitsAndBytesConfig(load_in_4bit=True,
    bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True) stores). Not Linear4bit itself: transformers quantizes
    only on an accelerator, and bitsandbytes 0.50.2's CPU kernels (dequantize_4bit, gemm_4bit) look the block absmax
    up per row, wrong when in_features is not a multiple of the block (the tiny models' 112 and 96; real models'
    are multiples of 64, and its CUDA kernels, the path users take, work on the flat codes). So the codes are made
    and read flat, as on CUDA. The MoE experts' stacks likewise: quantize_4bit of the flat stack (PEFT +
    bitsandbytes leave transformers 5's fused 3-D parameters unquantized; this is the format finetune gives them).
    Embeddings, norms, routers and the LM head stay F32."""
    bnb = import_bitsandbytes()
    with torch.no_grad():
        for name, module in model.named_modules():
            if ".layers." not in name or type(module) is not torch.nn.Linear:
                continue
            w = module.weight.data
            codes, state = bnb.functional.quantize_4bit(w.reshape(-1), blocksize=64, compress_statistics=True,
                                                        quant_type="nf4")
            module.weight.data = bnb.functional.dequantize_4bit(codes, state).reshape(w.shape)
        for p in expert_stacks(model):
            codes, state = bnb.functional.quantize_4bit(p.data.reshape(-1), blocksize=64, compress_statistics=True,
                                                        quant_type="nf4")
            p.data = bnb.functional.dequantize_4bit(codes, state).reshape(p.shape)


def fp8_projections(model):
    """Every projection of the decoder layers as torchao's per-row float8 linear computes it
    (Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())): the weight replaced by its float8 round trip
    (_choose_scale_float8 per row, _quantize_affine_float8, _dequantize_affine_float8), and a pre-hook that does the
    same to the input of each token, so the layer multiplies the dequantized operands in F32 (the F32 image of the
    scaled FP8 GEMM). The hook sits on the base layer, so PEFT's adapter reads the unquantized input. Not torchao's
    Float8Tensor itself: its GEMM is _scaled_mm, which has no CPU kernel. The MoE experts' stacks get the weight's
    round trip per row of each expert and no input hook (finetune dequantizes them for bf16 grouped GEMMs: weight-only
    float8). Embeddings, norms, routers and the LM head stay F32.
    torchao is imported from <venv>/bnb (third_party/requirements-bnb.txt)."""
    import sys
    sys.path.insert(1, os.path.join(sys.prefix, "bnb"))
    from torchao.quantization.quant_primitives import (_choose_scale_float8, _dequantize_affine_float8,
                                                       _quantize_affine_float8)

    def round_trip(x):
        rows = x.reshape(-1, x.shape[-1])
        scale = _choose_scale_float8(rows, block_size=[1, rows.shape[1]], float8_dtype=torch.float8_e4m3fn)
        # An all-zero row (the input of a token whose embedding is zero, e.g. a padding row) has scale 0 here, and
        # torchao's 0 / 0 makes it NaN; finetune keeps its zeros with scale 1 (quant/fp8.cpp), and so does this.
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        codes = _quantize_affine_float8(rows, scale, torch.float8_e4m3fn)
        return _dequantize_affine_float8(codes, scale, torch.float32).reshape(x.shape)

    with torch.no_grad():
        for name, module in model.named_modules():
            if ".layers." not in name or type(module) is not torch.nn.Linear:
                continue
            module.weight.data = round_trip(module.weight.data)
            module.register_forward_pre_hook(lambda m, args: (round_trip(args[0]),) + tuple(args[1:]))
        for p in expert_stacks(model):
            p.data = round_trip(p.data)


def load_model(model_dir, adapter, nf4=False, fp8=False):
    from transformers import AutoModelForCausalLM
    with open(os.path.join(model_dir, "config.json")) as f:
        model_type = json.load(f)["model_type"]
    # Gemma 2's soft-capping exists only in eager attention (see FAMILIES["gemma2"]).
    extra = dict(attn_implementation="eager") if model_type == "gemma2" else {}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **extra)
    if nf4:
        quantize_projections(model)
    if fp8:
        fp8_projections(model)
    if adapter:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, adapter)
    return model.eval()


def logits(model_dir, adapter, ids_file, out, nf4=False, fp8=False):
    model = load_model(model_dir, adapter, nf4, fp8)
    ids = load_file(ids_file)["input_ids"]
    with torch.no_grad():
        result = model(input_ids=ids).logits
    save_file({"logits": result.contiguous()}, out)


def generate(model_dir, prompt, max_new_tokens, out, nf4=False, fp8=False):
    """Greedy generate() from `prompt` (token ids), stopping at the model's EOS as its generation config says."""
    model = load_model(model_dir, None, nf4, fp8)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        result = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=max_new_tokens, pad_token_id=0)
    with open(out, "w") as f:
        json.dump({"generated": result[0, len(prompt):].tolist()}, f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["make", "logits", "generate"])
    p.add_argument("--out")
    p.add_argument("--jobs")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.cmd == "make":
        for family in FAMILIES:
            os.makedirs(os.path.join(a.out, family), exist_ok=True)
            make(family, os.path.join(a.out, family))
    elif a.cmd == "logits":
        for job in json.loads(a.jobs):
            logits(job["model"], job.get("adapter"), job["ids"], job["out"], job.get("nf4", False),
                   job.get("fp8", False))
    else:
        for job in json.loads(a.jobs):
            generate(job["model"], job["prompt"], job["max_new_tokens"], job["out"], job.get("nf4", False),
                     job.get("fp8", False))


if __name__ == "__main__":
    main()
