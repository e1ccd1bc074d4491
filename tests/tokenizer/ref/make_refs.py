"""Reference outputs for ft_tokenizer's tests, computed with the reference Python packages.

usage: make_refs.py OUT_DIR

Writes OUT_DIR/<name>/tokenizer.json for tokenizers trained here (configurations mirroring Llama 3, Qwen2, GPT-2,
Llama 2 / Mistral, Gemma, Phi-3 and some component mixes) and OUT_DIR/refs.json with, per tokenizer, the reference
ids / decodes of the stress corpus. Real files shipped in PyPI packages (Llama 3's tiktoken tokenizer.model from
llama-models, tekken.json from mistral-common) are referenced in place.
"""
import json
import os
import random
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")

STRESS = [
    "",
    " ",
    "  ",
    "Hello world",
    " Hello world",
    "   leading spaces and trailing   ",
    "Hello, World! How's it going? I'm fine; they'll see; we'd've; it's OK'S",
    "The year 2024 had 365 days; pi is 3.14159265358979 and 1234567890123 is long. 7 77 777 7777 77777",
    "Tabs\tand\t\ttabs\nnew\nlines\n\n\nand\r\nCRLF\r\n\r\nend",
    "    indented code\n\tdef f(x):\n\t\treturn x ** 2  # square\n",
    "int main() { std::vector<int> v{1,2,3}; for (auto& x : v) x += 42; return 0; }",
    "https://example.com/path?query=1&b=%20x#frag and mailto:someone@example.org",
    "中文测试：我们今天去公园玩。这是一个句子。",
    "日本語のテキスト、カタカナとひらがな。東京は大きい都市です。",
    "العربية نص تجريبي مع أرقام ١٢٣ و 456.",
    "हिन्दी में एक वाक्य है। नमस्ते दुनिया",
    "Русский текст: Привет, мир! Ёлка и ёжик.",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ and flags 🇫🇷🇯🇵",
    "Combining: e\u0301 a\u0300 n\u0303 o\u0308 — cafe\u0301 vs caf\u00e9; A\u030a vs \u00c5; \ufb01 ligature; \u2460 circled; \uff21\uff22 fullwidth",
    "Mixed\u00a0nbsp\u2003em\u2009thin\u3000ideographic spaces and \u0085 next-line",
    "ÀÉÎÕÜ àéîõü ß İstanbul ΣΊΣΥΦΟΣ σς",
    "<|begin_of_text|>Hello<|eot_id|> world <|end_of_text|>",
    "before<|sp|>after <|sp|>x <|sp|>xy",
    "a [LS] b  [LS]c d[RS]   e [LRS]  f",
    "word words sword word. (word) _word",
    "Hello hello HELLO",
    "中文 and 中文字 spaced spaced",
    "<s>[INST] What is 2+2? [/INST] 4</s>",
    "x" * 300,
    "ab" * 150 + " " + "\u00e9" * 40,
    "\n",
    "\n\n \n",
    "    ",
    "end with space ",
    "line1\rline2\r\rline3",
    "Ǆ ǅ ǆ \u1e9e \u2126 \u212a",
]
# Ids that decode to invalid UTF-8 / partial characters are produced from these in the C++ tests.
TRAIN_EXTRA = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore.",
    "def tokenize(text):\n    return [t for t in text.split() if t]\n",
    "我们的模型可以处理多种语言，包括中文、日本語、한국어 和 English。",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 10000 3.14 2.718 -42 +7",
]

ADDED_FLAGS = [
    # content, special, lstrip, rstrip, single_word, normalized
    ("<|sp|>", True, False, False, False, False),
    ("<|sp|>x", False, False, False, False, False),
    ("[LS]", True, True, False, False, False),
    ("[RS]", False, False, True, False, False),
    ("[LRS]", True, True, True, False, False),
    ("word", False, False, False, True, True),
    ("Hello", False, False, False, False, True),
    ("中文", False, False, False, False, True),
    (" spaced", False, False, False, False, False),
]


def corpus_for_training():
    random.seed(1234)
    lines = STRESS + TRAIN_EXTRA
    out = []
    for _ in range(6):
        random.shuffle(lines)
        out.extend(lines)
    return out


def add_flagged_tokens(tok):
    tok.add_tokens([AddedToken(c, special=s, lstrip=l, rstrip=r, single_word=w, normalized=n)
                    for c, s, l, r, w, n in ADDED_FLAGS])


def bytelevel_trained(pre, normalizer=None, ignore_merges=False, vocab_size=1200):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                         show_progress=False)
    tok.train_from_iterator(corpus_for_training(), trainer)
    return tok


def spm_style(normalizer, pre, decoder, train_pre, specials=("<unk>", "<s>", "</s>"), limit_alphabet=120,
              fuse_unk=True, vocab_size=900):
    """A Llama-2-like BPE: specials, 256 <0xXX> byte tokens, then merges trained here."""
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = train_pre
    trainer = BpeTrainer(vocab_size=vocab_size, limit_alphabet=limit_alphabet, show_progress=False)
    t.train_from_iterator(corpus_for_training(), trainer)
    trained = json.loads(t.to_str())["model"]
    vocab = {}
    for s in specials:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for token, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if token not in vocab:
            vocab[token] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=fuse_unk, byte_fallback=True))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoder
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def build_all(out_dir):
    toks = {}

    # Llama 3: Split(regex) + ByteLevel(use_regex=False), ignore_merges, <|begin_of_text|> template.
    t = bytelevel_trained(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]), ignore_merges=True)
    t.add_special_tokens([AddedToken(s, special=True, normalized=False)
                          for s in ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]])
    add_flagged_tokens(t)
    bos = t.token_to_id("<|begin_of_text|>")
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    toks["llama3"] = t

    # Qwen2: NFC + Split + ByteLevel; single digits.
    t = bytelevel_trained(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), normalizer=normalizers.NFC())
    t.add_special_tokens([AddedToken(s, special=True, normalized=False)
                          for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    add_flagged_tokens(t)
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    toks["qwen2"] = t

    # GPT-2 / RoBERTa style: ByteLevel with its own regex and add_prefix_space; merges written as "a b" strings.
    t = bytelevel_trained(pre_tokenizers.ByteLevel(add_prefix_space=True))
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ["<s>", "</s>", "<|endoftext|>"]])
    add_flagged_tokens(t)
    t.post_processor = processors.RobertaProcessing(("</s>", t.token_to_id("</s>")),
                                                    ("<s>", t.token_to_id("<s>")))
    toks["gpt2"] = t

    # Llama 2 / Mistral v0.1 tokenizer.json: Prepend + Replace normalizers, no pre-tokenizer, byte fallback.
    t = spm_style(normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]), None,
                  decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)]),
                  train_pre=pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"))
    add_flagged_tokens(t)
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    toks["llama2"] = t

    # Mistral v0.3-style: Metaspace(prepend_scheme=first, split=False) pre-tokenizer, Metaspace decoder.
    t = spm_style(None, pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False),
                  decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁",
                                                                                   prepend_scheme="first"),
                                     decoders.Fuse()]),
                  train_pre=pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first"))
    add_flagged_tokens(t)
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    toks["mistral"] = t

    # Gemma: Replace(" " -> "▁") normalizer only, byte fallback, <bos>.
    t = spm_style(normalizers.Replace(" ", "▁"), None,
                  decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]),
                  train_pre=pre_tokenizers.Split(" ", behavior="merged_with_next"),
                  specials=("<pad>", "<eos>", "<bos>", "<unk>"))
    add_flagged_tokens(t)
    t.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    toks["gemma"] = t

    # Phi-3: Llama-2 pipeline, chat tokens with rstrip, a suffix token.
    t = spm_style(normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]), None,
                  decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)]),
                  train_pre=pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"), fuse_unk=False)
    t.add_special_tokens([AddedToken(s, special=True, rstrip=True, normalized=False)
                          for s in ["<|end|>", "<|user|>", "<|assistant|>", "<|endoftext|>"]])
    add_flagged_tokens(t)
    t.post_processor = processors.TemplateProcessing(single="<s> $A <|endoftext|>", special_tokens=[
        ("<s>", 1), ("<|endoftext|>", t.token_to_id("<|endoftext|>"))])
    toks["phi3"] = t

    # Component mix 1: NFKC, Lowercase, Strip, regex Replace; Split behaviours; Digits; Whitespace; BPE with
    # continuing_subword_prefix / end_of_word_suffix and an unk token; no decoder (tokens joined by spaces).
    mix1_norm = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(),
                                      normalizers.Replace(Regex(r"\d{5,}"), "#")])
    mix1_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[,;:]"), behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Whitespace()])
    t = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    t.normalizer = mix1_norm
    t.pre_tokenizer = mix1_pre
    t.train_from_iterator(corpus_for_training(), BpeTrainer(
        vocab_size=700, special_tokens=["[UNK]", "[CLS]", "[SEP]"], continuing_subword_prefix="##",
        end_of_word_suffix="</w>", limit_alphabet=150, show_progress=False))
    add_flagged_tokens(t)
    t.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    toks["mix1"] = t

    # Component mix 2: NFD + accent stripping + NFC, Split contiguous / removed / inverted, WhitespaceSplit-free
    # Metaspace(always, split) pre-tokenizer, unk without fusing.
    mix2_norm = normalizers.Sequence([normalizers.NFD(), normalizers.Replace(Regex(r"\p{Mn}"), ""),
                                      normalizers.NFC()])
    mix2_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{P}+"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\d+"), behavior="isolated", invert=True),
        pre_tokenizers.Split("|", behavior="removed"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)])
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False))
    t.normalizer = mix2_norm
    t.pre_tokenizer = mix2_pre
    t.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    t.train_from_iterator(corpus_for_training(), BpeTrainer(vocab_size=600, special_tokens=["<unk>"],
                                                            limit_alphabet=100, show_progress=False))
    add_flagged_tokens(t)
    toks["mix2"] = t

    # Component mix 3: NFKD, Strip(right only), WhitespaceSplit then ByteLevel without regex.
    t = bytelevel_trained(pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                   pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)]),
                          normalizer=normalizers.Sequence([normalizers.NFKD(),
                                                           normalizers.Strip(left=False, right=True)]),
                          vocab_size=500)
    add_flagged_tokens(t)
    toks["mix3"] = t

    # Component mix 4: StripAccents after NFKD, Punctuation, CharDelimiterSplit, Metaspace(never) both ways.
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents()])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.CharDelimiterSplit("x"), pre_tokenizers.Punctuation(behavior="merged_with_next"),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)])
    t.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    t.train_from_iterator(corpus_for_training(), BpeTrainer(vocab_size=500, special_tokens=["<unk>"],
                                                            limit_alphabet=120, show_progress=False))
    add_flagged_tokens(t)
    toks["mix4"] = t

    toks.update(converted_real_tokenizers())

    paths = {}
    for name, tok in toks.items():
        d = Path(out_dir) / name
        d.mkdir(parents=True, exist_ok=True)
        p = d / "tokenizer.json"
        tok.save(str(p))
        if name == "gpt2":  # the older "a b" merge spelling
            j = json.loads(p.read_text(encoding="utf-8"))
            j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
            p.write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
        paths[name] = str(p)
    return paths


FUZZ_POOL = (list("aAbBzZ 09\t\n\r.,;:'\"!?-_/\\()[]{}<>|#@$%^&*+=~`") + [
    "中", "文", "日", "本", "ー", "カ", "한", "국", "ع", "ر", "ی", "х", "Ж", "é", "e\u0301", "ß", "İ", "σ", "ς",
    "😀", "👍🏽", "\u200d", "\ufe0f", "\u00a0", "\u2003", "\u3000", "\u0085", "\u200b", "１", "２", "Ⅻ", "②",
    "¼", "ﬁ", "Ⓐ", "  ", "   ", "'s", "'LL", "123", "4567", "<|sp|>", "<|sp|>x", "[LS]", "[RS]", "[LRS]",
    " word ", "Hello", "hello", "中文", " spaced", "<s>", "</s>", "<|eot_id|>", "<|begin_of_text|>", "[INST]",
    "<0x41>", "▁", "\r\n", "\n\n", "\t\t"])


def fuzz_texts(n=150, seed=5):
    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(1, 30))) for _ in range(n)]


def converted_real_tokenizers():
    """Real vocabularies as tokenizer.json, converted the way the Hub's files were made: Llama 3's tiktoken file
    (llama-models) through transformers' TikTokenConverter, Mistral's v3 sentencepiece model (mistral-common) into
    the Metaspace + byte-fallback BPE layout of Mistral's tokenizer.json."""
    out = {}
    try:
        import llama_models.llama3.tokenizer as l3
        from transformers.convert_slow_tokenizer import TikTokenConverter
    except ImportError:
        l3 = None
    if l3 is not None:
        path = Path(l3.__file__).parent / "tokenizer.model"
        tk = l3.Tokenizer(path)
        specials = sorted(tk.special_tokens, key=tk.special_tokens.get)
        t = TikTokenConverter(vocab_file=str(path), extra_special_tokens=specials).converted()
        t.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>",
                                                                                           tk.bos_id)])])
        out["llama3_real"] = t
    try:
        import mistral_common
        import sentencepiece as spm
    except ImportError:
        return out
    sp = spm.SentencePieceProcessor(
        model_file=str(Path(mistral_common.__file__).parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"))
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for piece, pid in vocab.items():
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in vocab and b in vocab:
                merges.append((pid, vocab[a], vocab[b], a, b))
    merges.sort()
    t = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for _, _, _, a, b in merges], unk_token="<unk>",
                             fuse_unk=True, byte_fallback=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    t.add_special_tokens([AddedToken(sp.id_to_piece(i), special=True, normalized=False)
                          for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", sp.bos_id())])
    out["mistral_v3_real"] = t
    return out


def stress_texts():
    return list(STRESS) + ["\n".join(STRESS), " ".join(STRESS)] + fuzz_texts()


def decode_probe_ids(ids, vocab_size, seed):
    """Id lists whose decode stresses byte fallback / byte-level joins: shuffled and truncated encodings."""
    rng = random.Random(seed)
    probes = []
    for seq in ids:
        if len(seq) > 2:
            cut = list(seq)
            rng.shuffle(cut)
            probes.append(cut[: rng.randint(1, len(cut))])
    probes.append([rng.randrange(vocab_size) for _ in range(40)])
    return probes


def byte_offsets(text, offsets):
    """tokenizers reports offsets in characters; ft_tokenizer in UTF-8 bytes."""
    pos = [0]
    for ch in text:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    return [[pos[b], pos[e]] for b, e in offsets]


def json_refs(paths):
    out = {}
    texts = stress_texts()
    for name, path in paths.items():
        tok = Tokenizer.from_file(path)
        encodings = [tok.encode(t, add_special_tokens=False) for t in texts]
        enc = [e.ids for e in encodings]
        offsets = [byte_offsets(t, e.offsets) for t, e in zip(texts, encodings)]
        tok.encode_special_tokens = True
        enc_split = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        tok.encode_special_tokens = False
        with_special = tok.encode("x", add_special_tokens=True).ids
        plain = tok.encode("x", add_special_tokens=False).ids
        idx = with_special.index(plain[0]) if plain else len(with_special)
        prefix = with_special[:idx]
        suffix = with_special[idx + len(plain):]
        vs = tok.get_vocab_size(with_added_tokens=True)
        probes = decode_probe_ids(enc, vs, 7)
        vocab = tok.get_vocab(with_added_tokens=True)
        sample_ids = sorted(vocab.values())[:: max(1, len(vocab) // 50)] + sorted(
            a for a in tok.get_added_tokens_decoder())
        out[name] = {
            "file": path,
            "texts": texts,
            "ids": enc,
            "offsets": offsets,
            "ids_split_special": enc_split,
            "decode": [tok.decode(ids, skip_special_tokens=False) for ids in enc],
            "decode_skip": [tok.decode(ids, skip_special_tokens=True) for ids in enc],
            "probe_ids": probes,
            "probe_decode": [tok.decode(p, skip_special_tokens=False) for p in probes],
            "prefix": prefix,
            "suffix": suffix,
            "vocab_size": max(vocab.values()) + 1,
            "id_to_token": {str(i): tok.id_to_token(i) for i in sample_ids},
            "token_to_id": {tok.id_to_token(i): tok.token_to_id(tok.id_to_token(i)) for i in sample_ids},
        }
        out[name]["special_ids"] = sorted(i for i, a in tok.get_added_tokens_decoder().items() if a.special)
        # add_tokens as transformers' tokenizer.add_tokens would: new ids after the vocabulary.
        tok2 = Tokenizer.from_file(path)
        n_plain = tok2.add_tokens(["<new_tok>", "Hello", "brandnewword"])
        n_special = tok2.add_special_tokens(["<|new_special|>"])
        out[name]["add_tokens"] = {
            "plain": ["<new_tok>", "Hello", "brandnewword"],
            "special": ["<|new_special|>"],
            "ids_plain": [tok2.token_to_id(t) for t in ["<new_tok>", "Hello", "brandnewword"]],
            "ids_special": [tok2.token_to_id("<|new_special|>")],
            "counts": [n_plain, n_special],
            "texts": ["a <new_tok> b brandnewword<|new_special|>c Hello"] + texts[:8],
        }
        out[name]["add_tokens"]["ids"] = [tok2.encode(t, add_special_tokens=False).ids
                                          for t in out[name]["add_tokens"]["texts"]]
    return out


def tiktoken_refs():
    try:
        import llama_models.llama3.tokenizer as l3
    except ImportError:
        return None
    model_path = Path(l3.__file__).parent / "tokenizer.model"
    tk = l3.Tokenizer(model_path)
    enc = tk.model
    texts = stress_texts()
    ids = [enc.encode(t, allowed_special="all") for t in texts]
    ids_split = [enc.encode(t, allowed_special=set(), disallowed_special=()) for t in texts]
    probes = decode_probe_ids(ids, enc.n_vocab, 11)
    return {
        "file": str(model_path),
        "texts": texts,
        "ids": ids,
        "ids_split_special": ids_split,
        "decode": [enc.decode(x) for x in ids],
        "decode_skip": [enc.decode([i for i in x if i < 128000]) for x in ids],
        "probe_ids": probes,
        "probe_decode": [enc.decode(p) for p in probes],
        "prefix": [tk.bos_id],
        "suffix": [],
        "vocab_size": tk.n_words,
        "special_tokens": tk.special_tokens,
    }


def tekken_refs():
    try:
        import mistral_common
        from mistral_common.tokens.tokenizers.tekken import SpecialTokenPolicy, Tekkenizer
    except ImportError:
        return None
    data = Path(mistral_common.__file__).parent / "data"
    out = {}
    for fname in ["tekken_240911.json"]:
        tk = Tekkenizer.from_file(data / fname)
        texts = stress_texts()
        ids = [tk.encode(t, bos=False, eos=False) for t in texts]
        probes = decode_probe_ids(ids, tk.n_words, 13)
        probes.append([1, 1000 + 0xE4 - 0, 5, 1000 + 200, 2])  # control tokens between byte tokens
        out[fname] = {
            "file": str(data / fname),
            "texts": texts,
            "ids": ids,
            "ids_split_special": ids,
            "decode": [tk.decode(x, special_token_policy=SpecialTokenPolicy.KEEP) for x in ids],
            "decode_skip": [tk.decode(x, special_token_policy=SpecialTokenPolicy.IGNORE) for x in ids],
            "probe_ids": probes,
            "probe_decode": [tk.decode(p, special_token_policy=SpecialTokenPolicy.KEEP) for p in probes],
            "probe_decode_skip": [tk.decode(p, special_token_policy=SpecialTokenPolicy.IGNORE) for p in probes],
            "prefix": tk.encode("", bos=True, eos=False),
            "suffix": [],
            "vocab_size": tk.n_words,
            "num_special": tk.num_special_tokens,
            "control": {t: tk.get_special_token(t) for t in ["<s>", "</s>", "[INST]", "<pad>"]},
        }
    return out


def main():
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    refs = {"tokenizer_json": json_refs(build_all(out_dir)), "tiktoken": tiktoken_refs(), "tekken": tekken_refs()}
    (out_dir / "refs.json").write_text(json.dumps(refs, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
