"""References for the tokenizer.add_tokens round trip (tests/train/add_tokens_test.cpp).

make OUT: writes OUT/model and OUT/model_tied (tiny random Llamas, untied and tied embeddings) sharing a byte-level
  BPE tokenizer.json trained here that has no chat markers (only <|endoftext|>), and OUT/chat.jsonl (a reverse-the-
  words task as conversations).
check_tokenizer DIR OURS.json: AutoTokenizer(DIR) against what finetune gave (OURS.json: {"texts": [...], "ids":
  [[...]], "len": N}): the ids of each text and len(tokenizer); the markers survive decode(skip_special_tokens=False).
check KIND BASE EXPORT [MERGED] OURS.json: KIND lora (EXPORT an adapter directory) or full (EXPORT a model). Checks
  that AutoTokenizer(EXPORT) gives the ids of our training data (the dataset cache) for the first conversation and
  our prompt ids; that greedy generation from transformers (+ PEFT: AutoPeftModelForCausalLM, and PeftModel on a
  base resized to len(tokenizer)) gives our ids; for MERGED (finetune export), AutoModelForCausalLM on it too.
  Prints what it got and exits 1 on a difference.
peft_adapter BASE OUT: the usual transformers + PEFT recipe for a LoRA adapter with two added tokens
  (add_special_tokens, resize_token_embeddings, trainable_token_indices listed out of order, random values), saved
  with its tokenizer to OUT; on stdout {"prompt": ids, "generated": ids} from greedy generation with it."""
import glob
import json
import sys
from pathlib import Path

from chat_roundtrip import conversations  # the same reversal task as the chat round trip

PROMPT = "Reverse: red cat sun"
MARKERS = ["<|im_start|>", "<|im_end|>"]


def make(out):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [m["content"] for c in conversations(400, 1) for m in c] + ["user assistant system Reverse:"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    eos = tok.token_to_id("<|endoftext|>")
    for name, tied in (("model", False), ("model_tied", True)):
        model_dir = out / name
        model_dir.mkdir(parents=True, exist_ok=True)
        tok.save(str(model_dir / "tokenizer.json"))
        # As transformers 4 saved configs: the added tokens listed in added_tokens_decoder too.
        (model_dir / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
            "added_tokens_decoder": {str(eos): {"content": "<|endoftext|>", "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": True}}}))
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          bos_token_id=None, eos_token_id=eos, tie_word_embeddings=tied)
        LlamaForCausalLM(cfg).save_pretrained(model_dir, safe_serialization=True)
    with open(out / "chat.jsonl", "w") as f:
        for conv in conversations(96, 2):
            f.write(json.dumps({"messages": conv}) + "\n")


def check_tokenizer(directory, ours_file):
    from transformers import AutoTokenizer

    ours = json.loads(Path(ours_file).read_text())
    tok = AutoTokenizer.from_pretrained(directory)
    got = {"len": len(tok), "ids": [], "decoded": []}
    for text in ours["texts"]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        got["ids"].append(ids)
        got["decoded"].append(tok.decode(ids, skip_special_tokens=False))
    got["marker_ids"] = tok.convert_tokens_to_ids(MARKERS)
    print(json.dumps(got))
    markers_kept = all(text.count(m) == decoded.count(m)
                       for text, decoded in zip(ours["texts"], got["decoded"]) for m in MARKERS)
    same = got["ids"] == ours["ids"] and got["len"] == ours["len"] and markers_kept
    sys.exit(0 if same else 1)


def training_ids(cache_dir):
    """Sample 0 of our tokenized training data (the dataset cache: tokens.bin I32, offsets.bin I64)."""
    import numpy as np

    dirs = [Path(p).parent for p in glob.glob(str(Path(cache_dir) / "**" / "tokens.bin"), recursive=True)]
    assert len(dirs) == 1, f"expected one dataset cache entry in {cache_dir}, found {dirs}"
    tokens = np.fromfile(dirs[0] / "tokens.bin", dtype=np.int32)
    offsets = np.fromfile(dirs[0] / "offsets.bin", dtype=np.int64)
    return tokens[offsets[0]:offsets[1]].tolist()


def greedy(model, prompt, n):
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([list(prompt)]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
    return out[0][len(prompt):].tolist()


def check(kind, base_dir, export_dir, *rest):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    merged_dir, ours_file = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])
    ours = json.loads(Path(ours_file).read_text())
    tok = AutoTokenizer.from_pretrained(export_dir)
    first = json.loads(Path(ours["chat"]).read_text().splitlines()[0])["messages"]
    report = {"len_tokenizer": len(tok), "marker_ids": tok.convert_tokens_to_ids(MARKERS)}
    problems = []
    conv_ids = tok.apply_chat_template(first, tokenize=True, return_dict=True)["input_ids"]
    report["training_ids"] = conv_ids
    if list(conv_ids) != training_ids(ours["cache"]):
        problems.append(f"training data {training_ids(ours['cache'])} != apply_chat_template {list(conv_ids)}")
    prompt = list(tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"])
    report["prompt_ids"] = prompt
    if prompt != ours["prompt_ids"]:
        problems.append(f"prompt ids: ours {ours['prompt_ids']}, transformers {prompt}")
    if any(m not in prompt for m in report["marker_ids"]):
        problems.append("the prompt lacks the added markers as single tokens")
    def compare(name, gen, expected):
        report[name] = gen
        if gen[:len(expected)] != expected:
            problems.append(f"{name}: transformers {gen[:len(expected)]}, ours {expected}")

    if kind == "lora":
        from peft import AutoPeftModelForCausalLM, PeftModel

        # The adapter's tokenizer makes AutoPeftModelForCausalLM resize the base model before loading the rows.
        expected = ours["generated_ids"]
        auto = AutoPeftModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)
        compare("auto_peft", greedy(auto, prompt, len(expected)), expected)
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        base.resize_token_embeddings(len(tok))
        compare("peft", greedy(PeftModel.from_pretrained(base, export_dir), prompt, len(expected)), expected)
        if merged_dir:
            merged_tok = AutoTokenizer.from_pretrained(merged_dir)
            merged_prompt = list(merged_tok.apply_chat_template([{"role": "user", "content": PROMPT}],
                                                                add_generation_prompt=True, tokenize=True,
                                                                return_dict=True)["input_ids"])
            if merged_prompt != ours["merged"]["prompt_ids"] or merged_prompt != prompt:
                problems.append(f"merged prompt: transformers {merged_prompt}, ours {ours['merged']['prompt_ids']}")
            merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)
            report["merged_vocab_size"] = merged.config.vocab_size
            if merged.config.vocab_size != len(tok):
                problems.append(f"merged config vocab_size {merged.config.vocab_size} != len(tokenizer) {len(tok)}")
            expected = ours["merged"]["generated_ids"]
            compare("merged", greedy(merged, merged_prompt, len(expected)), expected)
    else:
        model = AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)
        report["vocab_size"] = model.config.vocab_size
        if model.config.vocab_size != len(tok):
            problems.append(f"config vocab_size {model.config.vocab_size} != len(tokenizer) {len(tok)}")
        compare("full", greedy(model, prompt, len(ours["generated_ids"])), ours["generated_ids"])
    report["problems"] = problems
    print(json.dumps(report))
    sys.exit(1 if problems else 0)


def peft_adapter(base_dir, out):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(1)
    tok = AutoTokenizer.from_pretrained(base_dir)
    tok.add_special_tokens({"additional_special_tokens": MARKERS})
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    vocab = model.config.vocab_size
    assert len(tok) == vocab + 2
    model.resize_token_embeddings(len(tok))
    ids = [vocab + 1, vocab]
    tied = model.config.tie_word_embeddings
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                        trainable_token_indices=ids if tied else {"embed_tokens": ids, "lm_head": ids})
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for p in peft_model.parameters():
            if p.requires_grad:
                p.normal_(0, 0.2)
    peft_model.save_pretrained(out)
    tok.save_pretrained(out)
    prompt = [5, vocab, 7, vocab + 1, 9]
    print(json.dumps({"prompt": prompt, "generated": greedy(peft_model, prompt, 8)}))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2])
    elif cmd == "peft_adapter":
        peft_adapter(sys.argv[2], sys.argv[3])
    elif cmd == "check_tokenizer":
        check_tokenizer(sys.argv[2], sys.argv[3])
    else:
        check(*sys.argv[2:])
