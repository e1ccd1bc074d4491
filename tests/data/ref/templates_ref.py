"""Reference for tests/data/templates_ref_test.cpp: the built-in mistral-* and gemma chat templates.

usage: templates_ref.py IN_JSON OUT_DIR

IN_JSON: {"jinja": {template name: the Jinja chat_template_jinja() gives}}. Writes OUT_DIR/templates_ref.json with
- mistral: per tokenizer file that mistral-common ships (v1, v2, v3 sentencepiece; tekken v3; a v3 tokenizer.json
  converted as tests/tokenizer/ref/make_refs.py does), the ids and loss mask of mistral-common's reference encoder
  (MistralTokenizer.encode_chat_completion, fine-tuning validation; serving validation for prompts) or its error;
  and what transformers' apply_chat_template renders with our Jinja for each variant (text or error). Paths of a
  v7 sentencepiece model and of a tekken file whose config says v7 (not built in).
- gemma: a Gemma-like tokenizer.json (make_refs' Gemma layout plus <start_of_turn>/<end_of_turn>), and for each
  conversation the text and ids of apply_chat_template with Gemma 3's official template (trl ships it), the ids and
  mask when text in contents that spells a special token stays text, and what our Jinja renders.
"""
import importlib.util
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tokenizer" / "ref"))
import make_refs  # noqa: E402  (the tokenizer layouts and conversions)
from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers, processors  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

MISTRAL_CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi, how can I help?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"},
     {"role": "assistant", "content": "6."}],
    [{"role": "user", "content": "Übersetze: 猫がいます 🐈‍⬛"}, {"role": "assistant", "content": "Es gibt eine Katze. 😺"}],
    [{"role": "user", "content": "  spaces around  "}, {"role": "assistant", "content": "  lead and trail  \n"}],
    [{"role": "user", "content": "Say [INST] and [/INST] and </s> and <s>"},
     {"role": "assistant", "content": "Markers: [INST] </s> [/INST] <s>"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "Empty question."}],
    [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"},
     {"role": "assistant", "content": "fine"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": ""}, {"role": "user", "content": "b"},
     {"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"}],
    [{"role": "user", "content": "a"}, {"role": "system", "content": "Be brief."}, {"role": "user", "content": "b"},
     {"role": "assistant", "content": "c"}],
    [{"role": "system", "content": "One."}, {"role": "system", "content": ""}, {"role": "system", "content": "Two."},
     {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    [{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"}],
    [{"role": "user", "content": "q "}, {"role": "assistant", "content": "answer   "}],
    [{"role": "user", "content": "line1\nline2\n"}, {"role": "assistant", "content": "\nnew lines\n\n"}],
    [{"role": "system", "content": "Rules."}, {"role": "user", "content": "first"},
     {"role": "assistant", "content": "one"}, {"role": "user", "content": "second"},
     {"role": "assistant", "content": "two"}, {"role": "user", "content": "third"},
     {"role": "assistant", "content": "three"}],
    # Malformed: mistral-common refuses these.
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "system", "content": "late"},
     {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}],
    [{"role": "user", "content": "only a question"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}],
    [{"role": "assistant", "content": "alone"}],
]
# Prompts for generation (mistral-common's serving validation; add_generation_prompt on our side).
MISTRAL_PROMPTS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"}],
    [{"role": "system", "content": "Only a system prompt."}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
]

GEMMA_CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi, how can I help?"}],
    [{"role": "system", "content": "You are terse.  "}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"},
     {"role": "assistant", "content": "6."}],
    [{"role": "user", "content": "Übersetze: 猫がいます 🐈‍⬛"}, {"role": "assistant", "content": "Es gibt eine Katze. 😺"}],
    [{"role": "user", "content": "\u00a0 spaces\taround \u3000"}, {"role": "assistant", "content": "\nnew lines\n\n"}],
    [{"role": "user", "content": "Say <start_of_turn> and <end_of_turn> and <bos>"},
     {"role": "assistant", "content": "Markers: <end_of_turn> <eos>"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "Empty question."}],
    [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "model\nmodel"}],
    # Malformed: the official template raises.
    [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "Out of order"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
]
GEMMA_PROMPTS = [
    [{"role": "system", "content": "S"}, {"role": "user", "content": "Hello"}],
]


def package_file(pkg, rel):
    spec = importlib.util.find_spec(pkg)
    if spec is None:
        raise SystemExit(f"the {pkg} package is needed")
    return Path(spec.submodule_search_locations[0]) / rel


def mistral_reference(path, conversations, prompts):
    """ids and loss masks of mistral-common, the encode_instruct loop spelled out to know each message's tokens."""
    from mistral_common.protocol.instruct.messages import UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.validator import ValidationMode
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    loaded = {mode: MistralTokenizer.from_file(str(path), mode=mode)
              for mode in (ValidationMode.finetuning, ValidationMode.test)}

    def encode(mode, conv):
        mt = loaded[mode]
        try:
            request = ChatCompletionRequest(messages=conv)
            expected = mt.encode_chat_completion(request).tokens
        except Exception as e:  # noqa: BLE001  (mistral-common's validation errors)
            return {"error": f"{type(e).__name__}: {e}"}
        it = mt.instruct_tokenizer
        req = mt._instruct_request_normalizer.from_chat_completion_request(
            mt._chat_completion_request_validator.validate_request(request))
        first, last = it.find_first_last_user(req)
        ids, loss = list(it.start()), [0]
        for i, msg in enumerate(req.messages):
            if isinstance(msg, UserMessage):
                t = it.encode_user_message(msg, req.available_tools, i == last, i == first,
                                           system_prompt=req.system_prompt, force_img_first=True,
                                           settings=req.settings)[0]
                ids += t
                loss += [0] * len(t)
            else:
                t = it.encode_assistant_message(msg, i < last)
                ids += t
                loss += [1] * len(t)
        assert ids == expected, (path, conv)
        return {"ids": ids, "loss": loss, "version": str(mt.instruct_tokenizer.tokenizer.version.value)}

    return ([encode(ValidationMode.finetuning, c) for c in conversations],
            [encode(ValidationMode.test, c) for c in prompts])


def render_all(hf, template, conversations, gen):
    out = []
    for conv in conversations:
        try:
            out.append(hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, chat_template=template))
        except Exception as e:  # noqa: BLE001  (raise_exception)
            out.append({"error": str(e)})
    return out


def gemma_tokenizer():
    # make_refs' Gemma layout: Replace(" " -> "▁") normalizer only, byte fallback, <bos>; plus the turn markers.
    t = make_refs.spm_style(normalizers.Replace(" ", "▁"), None,
                            decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]),
                            train_pre=pre_tokenizers.Split(" ", behavior="merged_with_next"),
                            specials=("<pad>", "<eos>", "<bos>", "<unk>"))
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ("<start_of_turn>", "<end_of_turn>")])
    t.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return t


def gemma_pieces(conv, gen):
    """The official template's output as (special token | text) pieces: text between the template's own markers."""
    pieces = [("special", "<bos>")]
    prefix, msgs = "", conv
    if conv[0]["role"] == "system":
        prefix, msgs = conv[0]["content"] + "\n\n", conv[1:]
    for i, m in enumerate(msgs):
        role = "model" if m["role"] == "assistant" else m["role"]
        head = role + "\n" + (prefix if i == 0 else "")
        pieces += [("special", "<start_of_turn>"), ("text", head, m["content"].strip(), role == "model"),
                   ("special", "<end_of_turn>", role == "model"), ("text", "\n", "", False)]
    if gen:
        pieces += [("special", "<start_of_turn>"), ("text", "model\n", "", False)]
    return pieces


def gemma_safe(tok, conv, gen):
    """ids and mask when contents spelling a special token stay text: each text run encoded with special tokens
    split, a token trained when it starts in a model turn's content; markers as their ids."""
    split = make_refs.Tokenizer.from_str(tok.to_str())
    split.encode_special_tokens = True
    text, ids, loss = "", [], []
    for p in gemma_pieces(conv, gen):
        if p[0] == "special":
            text += p[1]
            ids.append(tok.token_to_id(p[1]))
            loss.append(1 if len(p) > 2 and p[2] else 0)
            continue
        _, head, content, trained = p
        run = head + content
        text += run
        enc = split.encode(run, add_special_tokens=False)
        ids += enc.ids
        loss += [1 if trained and start >= len(head) else 0 for start, _ in enc.offsets]
    return text, ids, loss


def main(in_json, out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jinja = json.loads(Path(in_json).read_text(encoding="utf-8"))["jinja"]
    import mistral_common
    data = Path(mistral_common.__file__).parent / "data"

    # A v3 sentencepiece vocabulary as tokenizer.json, converted as make_refs does (HF's Mistral v0.3 layout).
    v3_json = out / "mistral_v3_json"
    v3_json.mkdir(exist_ok=True)
    make_refs.converted_real_tokenizers()["mistral_v3_real"].save(str(v3_json / "tokenizer.json"))
    (v3_json / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    # A tekken file that says v7 (mistral-common then writes [SYSTEM_PROMPT] blocks): not built in.
    tekken7 = out / "tekken_v7.json"
    t = json.loads((data / "tekken_240718.json").read_text(encoding="utf-8"))
    t["config"]["version"] = "v7"
    tekken7.write_text(json.dumps(t), encoding="utf-8")

    tokenizers = {
        "v1": (data / "tokenizer.model.v1", data / "tokenizer.model.v1", "mistral-v1"),
        "v2": (data / "mistral_instruct_tokenizer_240216.model.v2",
               data / "mistral_instruct_tokenizer_240216.model.v2", "mistral-v3"),
        "v3": (data / "mistral_instruct_tokenizer_240323.model.v3",
               data / "mistral_instruct_tokenizer_240323.model.v3", "mistral-v3"),
        "v3_json": (v3_json, data / "mistral_instruct_tokenizer_240323.model.v3", "mistral-v3"),
        "tekken": (data / "tekken_240718.json", data / "tekken_240718.json", "mistral-tekken"),
        "tekken_mm": (data / "tekken_240911.json", data / "tekken_240911.json", "mistral-tekken"),
    }
    mistral = {"conversations": MISTRAL_CONVERSATIONS, "prompts": MISTRAL_PROMPTS, "tokenizers": {},
               "jinja": {}, "v7": [str(data / "mistral_instruct_tokenizer_241114.model.v7"), str(tekken7)]}
    for name, (load_path, ref_path, variant) in tokenizers.items():
        convs, prompts = mistral_reference(ref_path, MISTRAL_CONVERSATIONS, MISTRAL_PROMPTS)
        mistral["tokenizers"][name] = {"path": str(load_path), "variant": variant, "cases": convs, "prompts": prompts}
    # Where the converted tokenizer.json and the sentencepiece model encode a message differently (BPE merges derived
    # from a sentencepiece vocabulary differ on runs of spaces), its ids cannot equal mistral-common's.
    import sentencepiece as spm
    from tokenizers import Tokenizer
    sp = spm.SentencePieceProcessor(model_file=str(tokenizers["v3"][1]))
    converted = Tokenizer.from_file(str(v3_json / "tokenizer.json"))
    converted.encode_special_tokens = True  # as our templates encode contents: spelled markers stay text
    for i, conv in enumerate(MISTRAL_CONVERSATIONS):
        texts = [m["content"] for m in conv] + [m["content"].rstrip(" ") for m in conv]
        same = all(converted.encode(t, add_special_tokens=False).ids == sp.encode(t) for t in texts if t)
        mistral["tokenizers"]["v3_json"]["cases"][i]["same_as_sentencepiece"] = same
    hf = PreTrainedTokenizerFast(tokenizer_file=str(v3_json / "tokenizer.json"), bos_token="<s>", eos_token="</s>")
    for variant in ("mistral-v1", "mistral-v3", "mistral-tekken"):
        mistral["jinja"][variant] = {"cases": render_all(hf, jinja[variant], MISTRAL_CONVERSATIONS, False),
                                     "prompts": render_all(hf, jinja[variant], MISTRAL_PROMPTS, True)}

    gdir = out / "gemma"
    gdir.mkdir(exist_ok=True)
    gtok = gemma_tokenizer()
    gtok.save(str(gdir / "tokenizer.json"))
    (gdir / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}))
    official = package_file("trl", "chat_templates/gemma3.jinja").read_text(encoding="utf-8")
    ghf = PreTrainedTokenizerFast(tokenizer_file=str(gdir / "tokenizer.json"), bos_token="<bos>", eos_token="<eos>")
    gemma = {"dir": str(gdir), "cases": []}
    for conv, gen in [(c, False) for c in GEMMA_CONVERSATIONS] + [(c, True) for c in GEMMA_PROMPTS]:
        case = {"messages": conv, "gen": gen}
        ours = render_all(ghf, jinja["gemma"], [conv], gen)[0]
        case["ours"] = ours
        try:
            text = ghf.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, chat_template=official)
        except Exception as e:  # noqa: BLE001  (the official template's raise_exception)
            case["error"] = str(e)
            gemma["cases"].append(case)
            continue
        case["text"] = text
        case["exact_ids"] = list(ghf.apply_chat_template(conv, tokenize=True, add_generation_prompt=gen,
                                                         chat_template=official, return_dict=True)["input_ids"])
        safe_text, case["ids"], case["loss"] = gemma_safe(gtok, conv, gen)
        assert safe_text == text, (safe_text, text)
        spells = any(s in m["content"] for m in conv for s in ("<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"))
        assert spells or case["ids"] == case["exact_ids"], conv
        gemma["cases"].append(case)

    (out / "templates_ref.json").write_text(json.dumps({"mistral": mistral, "gemma": gemma}, ensure_ascii=False),
                                            encoding="utf-8")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(sys.argv[1], sys.argv[2])
