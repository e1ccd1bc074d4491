"""Tokenizer throughput of the reference: HF `tokenizers` encode_batch (or tiktoken for a tiktoken file).

usage: tokenizer_bench.py FILE.jsonl TOKENIZER [threads]
       tokenizer_bench.py --make-data OUT.jsonl [MB]     (a mixed code / multilingual corpus, ~MB megabytes)

Counterpart of bench/tokenizer_bench.cpp (same text fields, same token counting).
"""
import json
import os
import random
import sys
import time
from pathlib import Path

FIELDS = ("text", "prompt", "completion", "content")


def collect(j, out):
    if isinstance(j, dict):
        for k, v in j.items():
            if isinstance(v, str) and k in FIELDS:
                out.append(v)
            elif isinstance(v, (dict, list)):
                collect(v, out)
    elif isinstance(j, list):
        for v in j:
            collect(v, out)


def make_data(out_path, megabytes):
    """Code and docs from the installed Python packages, interleaved with multilingual prose and chat records."""
    rng = random.Random(0)
    sources = []
    root = Path(sys.prefix) / "lib"
    for p in sorted(root.rglob("*.py")):
        if p.stat().st_size > 2000:
            sources.append(p)
    prose = [
        "The committee met on Tuesday to discuss the budget for the coming year, and after a long debate "
        "they agreed to increase funding for public libraries by 12 percent.",
        "我们今天去公园散步，天气很好，很多人在湖边钓鱼。晚上我们在一家小饭馆吃了饺子。",
        "東京の天気は晴れでした。午後は友達と一緒に美術館へ行きました。",
        "Привет! Как дела? Сегодня мы обсуждали новый проект и сроки его выполнения.",
        "مرحبا بكم في موقعنا. نحن نقدم أفضل الخدمات لعملائنا منذ عام 1998.",
        "यह एक परीक्षण वाक्य है जिसमें हिंदी के शब्द हैं।",
        "Emoji test 😀👍🏽 and a URL https://example.com/a/b?c=1 with numbers 3.14159 and 1,234,567.",
    ]
    target = megabytes * 1_000_000
    written = 0
    with open(out_path, "w", encoding="utf-8") as f:
        while written < target:
            r = rng.random()
            if r < 0.6:
                text = rng.choice(sources).read_text(encoding="utf-8", errors="replace")[:rng.randint(500, 6000)]
                rec = {"text": text}
            elif r < 0.85:
                text = " ".join(rng.choice(prose) for _ in range(rng.randint(2, 12)))
                rec = {"text": text}
            else:
                rec = {"messages": [{"role": "user", "content": rng.choice(prose)},
                                    {"role": "assistant", "content": " ".join(rng.sample(prose, 3))}]}
            line = json.dumps(rec, ensure_ascii=False)
            f.write(line + "\n")
            written += len(line.encode("utf-8"))


def main():
    if sys.argv[1] == "--make-data":
        make_data(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 50)
        return
    path, tok_path = sys.argv[1], sys.argv[2]
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if threads > 0:
        os.environ["RAYON_NUM_THREADS"] = str(threads)  # read when tokenizers starts its thread pool
    texts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                collect(json.loads(line), texts)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    t0 = time.perf_counter()
    head = open(tok_path, "rb").read(64).lstrip()
    if head.startswith(b"{"):
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(tok_path)
        load = time.perf_counter() - t0
        t0 = time.perf_counter()
        ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        kind = "tokenizers"
    else:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
        ranks = load_tiktoken_bpe(tok_path)
        pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
        # Llama 3's specials, as bench_tokenizer's tiktoken loader (and llama_models/llama3/tokenizer.py) uses.
        names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                 "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>", "<|image|>"]
        names += [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(names))]
        specials = {n: len(ranks) + i for i, n in enumerate(names)}
        enc = tiktoken.Encoding("bench", pat_str=pat, mergeable_ranks=ranks, special_tokens=specials)
        load = time.perf_counter() - t0
        t0 = time.perf_counter()
        ids = enc.encode_batch(texts, num_threads=threads or os.cpu_count(), allowed_special="all")
        kind = "tiktoken"
    dt = time.perf_counter() - t0
    n = sum(len(x) for x in ids)
    print(f"{kind}: {len(texts)} texts, {nbytes / 1e6:.1f} MB, {n} tokens, load {load:.2f} s, encode {dt:.2f} s "
          f"on {threads or os.cpu_count()} thread(s): {n / dt:.0f} tokens/s, {nbytes / 1e6 / dt:.1f} MB/s")


if __name__ == "__main__":
    main()
