"""Round trip of a chat fine-tune through transformers (tests/train/chat_roundtrip_test.cpp).

make STYLE OUT: writes OUT/model (a tiny random Llama with a byte-level BPE tokenizer.json in the STYLE of Llama 3 or
Qwen2.5, trained here, plus that family's real chat template from a pinned package) and OUT/chat.jsonl.
check MODEL ADAPTER OURS.json: loads MODEL with AutoTokenizer and AutoModelForCausalLM, the LoRA adapter with PEFT,
prompts with apply_chat_template(add_generation_prompt=True) and generates greedily; prints what it got and exits 1
unless the prompt ids and the generated ids equal finetune's (OURS.json from `finetune generate --chat --json`)."""
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "data" / "ref"))

STYLES = {
    # name: (split regex, normalizer, specials, bos, eos, template package/file/marker)
    "llama3": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
               None, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               "<|begin_of_text|>", "<|eot_id|>", ("llm_templates", "llama31.py", "<|start_header_id|>")),
    "qwen2": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
              "NFC", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>",
              ("chat_bricks", "*.py", "<|im_start|>")),
}


def conversations(n, seed):
    rng = random.Random(seed)
    words = ["red", "blue", "green", "cat", "dog", "sun", "moon", "tree"]
    out = []
    for _ in range(n):
        ws = [rng.choice(words) for _ in range(rng.randint(2, 4))]
        out.append([{"role": "user", "content": "Reverse: " + " ".join(ws)},
                    {"role": "assistant", "content": " ".join(reversed(ws))}])
    return out


def make(style, out):
    import torch
    from chat_ref import package_template
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    pattern, norm, specials, bos, eos, (pkg, file, marker) = STYLES[style]
    out = Path(out)
    model_dir = out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    if norm:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    corpus = [m["content"] for c in conversations(400, 1) for m in c] + ["user assistant system Reverse:"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(model_dir / "tokenizer.json"))
    template = package_template(pkg, file, marker)
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos, "chat_template": template}))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=tok.token_to_id(bos) if bos else None, eos_token_id=tok.token_to_id(eos))
    LlamaForCausalLM(cfg).save_pretrained(model_dir, safe_serialization=True)
    with open(out / "chat.jsonl", "w") as f:
        for conv in conversations(96, 2):
            f.write(json.dumps({"messages": conv}) + "\n")


def check(model_dir, adapter_dir, ours_file):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ours = json.loads(Path(ours_file).read_text())
    tok = AutoTokenizer.from_pretrained(adapter_dir)  # the exported tokenizer files
    prompt = tok.apply_chat_template([{"role": "user", "content": "Reverse: red cat sun"}], add_generation_prompt=True,
                                     tokenize=True, return_dict=True)["input_ids"]
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), adapter_dir)
    with torch.no_grad():
        gen = model.generate(torch.tensor([list(prompt)]), max_new_tokens=len(ours["generated_ids"]), do_sample=False,
                             eos_token_id=None)[0][len(prompt):].tolist()
    n = len(ours["generated_ids"])
    same = list(prompt) == ours["prompt_ids"] and gen[:n] == ours["generated_ids"]
    print(json.dumps({"prompt_ids": list(prompt), "generated_ids": gen, "text": tok.decode(gen)}))
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        check(*sys.argv[2:5])
