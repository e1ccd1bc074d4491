"""Reference for tests/data/chat_template_test.cpp: model directories whose tokenizer.json is a real vocabulary
(Llama 3's tiktoken file from llama-models, Mistral's v3 sentencepiece model from mistral-common, converted as
tests/tokenizer/ref/make_refs.py does) and whose tokenizer_config.json holds a real chat template (Llama 3.1, Mistral
and Phi-3 from llm-templates, a Qwen3-style one from chat-bricks), plus what transformers' apply_chat_template gives
for a set of conversations: the text, the ids, or the template's error. Usage: chat_ref.py OUT_DIR."""
import ast
import importlib.util
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tokenizer" / "ref"))
import make_refs  # noqa: E402  (the tokenizer conversions)
from tokenizers import AddedToken, Tokenizer  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402


def package_template(pkg, file, must_contain):
    spec = importlib.util.find_spec(pkg)
    root = Path(spec.submodule_search_locations[0])
    for path in sorted(root.rglob(file)):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = None
            if isinstance(node, ast.keyword) and node.arg == "chat_template":
                value = node.value
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("template_str", "chat_template")
                                                      for t in node.targets):
                value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and must_contain in value.value:
                return value.value
    raise SystemExit(f"no template with {must_contain!r} in {pkg}/{file}")


CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi, how can I help?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"},
     {"role": "assistant", "content": "6."}],
    [{"role": "user", "content": "Übersetze: 猫がいます 🐈‍⬛"}, {"role": "assistant", "content": "Es gibt eine Katze. 😺"}],
    [{"role": "user", "content": "  spaces around  "}, {"role": "assistant", "content": "\nnew lines\n\n"}],
    [{"role": "user", "content": "Say <|eot_id|> and </s> and <|im_end|> and [INST]"},
     {"role": "assistant", "content": "Markers: <|eot_id|> </s> <|im_end|> [/INST]"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "Empty question."}],
    [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "Out of order"}],
]


def build_models(out):
    """The model directories under OUT (tokenizer.json and tokenizer_config.json with its chat template), each with
    the transformers tokenizer that reads them: {name: (dir, tokenizer)}. Shared with preference_ref.py."""
    toks = make_refs.converted_real_tokenizers()
    llama3, mistral = toks.get("llama3_real"), toks.get("mistral_v3_real")
    if llama3 is None or mistral is None:
        raise SystemExit("llama-models and mistral-common are needed")
    # Copies through the serialized form: a conversion takes seconds, the copy a fraction of it.
    qwen_like = Tokenizer.from_str(llama3.to_str())
    qwen_like.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<|im_start|>", "<|im_end|>")])
    phi3 = Tokenizer.from_str(mistral.to_str())
    phi3.add_special_tokens([AddedToken(t, special=True, normalized=False)
                             for t in ("<|user|>", "<|assistant|>", "<|end|>", "<|system|>")])
    models = {
        "llama31": (llama3, "<|begin_of_text|>", "<|eot_id|>",
                    package_template("llm_templates", "llama31.py", "<|start_header_id|>")),
        "mistral": (mistral, "<s>", "</s>", package_template("llm_templates", "mistral.py", "[INST]")),
        "phi3": (phi3, "<s>", "<|end|>", package_template("llm_templates", "phi3.py", "<|user|>")),
        "qwen3": (qwen_like, None, "<|im_end|>", package_template("chat_bricks", "*.py", "<think>")),
    }
    result = {}
    for name, (tok, bos, eos, template) in models.items():
        d = Path(out) / name
        d.mkdir(parents=True, exist_ok=True)
        tok.save(str(d / "tokenizer.json"))
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
                  "chat_template": template}
        (d / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
        hf = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"), bos_token=bos, eos_token=eos)
        hf.chat_template = template
        result[name] = (d, hf)
    return result


def main(out):
    out = Path(out)
    result = {}
    for name, (d, hf) in build_models(out).items():
        cases = []
        for conv in CONVERSATIONS:
            case = {"messages": conv}
            try:
                case["text"] = hf.apply_chat_template(conv, tokenize=False)
                case["ids"] = hf(case["text"], add_special_tokens=False)["input_ids"]
                # apply_chat_template's own tokenization must agree with encoding its text.
                direct = hf.apply_chat_template(conv, tokenize=True, return_dict=True)
                assert list(direct["input_ids"]) == case["ids"], name
            except Exception as e:  # noqa: BLE001  (the template's raise_exception)
                case = {"messages": conv, "error": str(e)}
            cases.append(case)
        result[name] = {"dir": str(d), "cases": cases}
    (out / "chat_ref.json").write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
