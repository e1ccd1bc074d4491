"""Writes a Hugging Face model directory with random bf16 weights of a named shape (for throughput and memory
measurements on the GPU host, where no real checkpoint is available), plus the given tokenizer.model."""
import argparse
import shutil

import torch
import transformers

SHAPES = {
    "llama3-8b": dict(cls="LlamaConfig", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                      max_position_embeddings=8192),
    # Llama-3-70B's layer shape; --layers keeps the model within a test host's disk (80 layers are 140 GB).
    "llama3-70b": dict(cls="LlamaConfig", vocab_size=128256, hidden_size=8192, intermediate_size=28672,
                       num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8, rope_theta=500000.0,
                       max_position_embeddings=8192),
    "llama2-7b": dict(cls="LlamaConfig", vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                      max_position_embeddings=4096),
    "mistral-7b": dict(cls="MistralConfig", vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, rope_theta=1000000.0,
                       max_position_embeddings=32768, sliding_window=None),
    "qwen2.5-7b": dict(cls="Qwen2Config", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                       num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4, rope_theta=1000000.0,
                       max_position_embeddings=32768, tie_word_embeddings=False),
    "gemma2-2b": dict(cls="Gemma2Config", vocab_size=256000, hidden_size=2304, intermediate_size=9216,
                      num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                      query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0,
                      final_logit_softcapping=30.0, max_position_embeddings=8192),
    "gemma3-1b": dict(cls="Gemma3TextConfig", vocab_size=262144, hidden_size=1152, intermediate_size=6912,
                      num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                      query_pre_attn_scalar=256, sliding_window=512, max_position_embeddings=32768,
                      rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                       "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    "qwen3-8b": dict(cls="Qwen3Config", vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                     num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=False),
    # Phi-4-mini: fused qkv_proj / gate_up_proj, a quarter of each head unrotated, longrope (its real factors are
    # learned; ones here, which cost the same).
    "phi-4-mini": dict(cls="Phi3Config", vocab_size=200064, hidden_size=3072, intermediate_size=8192,
                       num_hidden_layers=32, num_attention_heads=24, num_key_value_heads=8,
                       partial_rotary_factor=0.75, max_position_embeddings=131072,
                       original_max_position_embeddings=4096, tie_word_embeddings=True,
                       rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                        "original_max_position_embeddings": 4096,
                                        "short_factor": [1.0] * 48, "long_factor": [1.0] * 48}),
    # Gemma 3 4B as released: the multimodal checkpoint (Gemma3ForConditionalGeneration) with its SigLIP tower.
    "gemma-3-4b": dict(cls="Gemma3Config", mm_tokens_per_image=256, boi_token_index=255999, eoi_token_index=256000,
                       image_token_index=262144,
                       text_config=dict(hidden_size=2560, intermediate_size=10240, num_hidden_layers=34,
                                        sliding_window=1024, rope_scaling={"factor": 8.0, "rope_type": "linear"}),
                       vision_config=dict(hidden_size=1152, image_size=896, intermediate_size=4304,
                                          model_type="siglip_vision_model", num_attention_heads=16,
                                          num_hidden_layers=27, patch_size=14, vision_use_head=False)),
    # Qwen3-30B-A3B: 48 layers of 128 experts (768 wide), 8 routed per token; --layers keeps it within a test host's
    # disk (48 layers are 61 GB).
    "qwen3-30b-a3b": dict(cls="Qwen3MoeConfig", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                          moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                          norm_topk_prob=True, rope_theta=1000000.0, max_position_embeddings=40960,
                          tie_word_embeddings=False),
}

p = argparse.ArgumentParser()
p.add_argument("shape", choices=sorted(SHAPES))
p.add_argument("out")
p.add_argument("--tokenizer", required=True)
p.add_argument("--layers", type=int, help="fewer decoder layers than the shape has")
p.add_argument("--config-only", action="store_true",
               help="config.json and the tokenizer, no weights: for `finetune train` with model.random_weights, "
                    "which draws them (shapes no disk holds: Llama-3-70B's 80 layers are 140 GB)")
a = p.parse_args()
spec = dict(SHAPES[a.shape])
if a.layers:
    spec["num_hidden_layers"] = a.layers
cfg = getattr(transformers, spec.pop("cls"))(**spec, bos_token_id=1, eos_token_id=2)
if a.config_only:
    cfg.save_pretrained(a.out)
    shutil.copy(a.tokenizer, f"{a.out}/tokenizer.model")
    print(f"{a.shape}: config.json only -> {a.out}")
    raise SystemExit(0)
with torch.device("cuda"):
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
model.save_pretrained(a.out, safe_serialization=True, max_shard_size="5GB")
shutil.copy(a.tokenizer, f"{a.out}/tokenizer.model")
print(f"{a.shape}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters -> {a.out}")
