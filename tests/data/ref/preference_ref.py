"""Reference for tests/data/preference_test.cpp: preference pairs as TRL 1.16 reads and tokenizes them.

usage: preference_ref.py IN_JSON OUT_DIR

IN_JSON: {"records": path of a JSON Lines file, "configs": [{"model", "style": "dpo" | "cpo", "max_length": int or
null, "truncation": "keep_start" | "keep_end"}], "batch": {"config": index into configs, "pad_id": int}}.
The model directories are chat_ref.py's (real vocabularies and chat templates from pinned packages). Writes
OUT_DIR/preference_ref.json with
- models: {name: directory};
- extract: per record, trl.data_utils.maybe_extract_prompt's output;
- results: per config, per record, TRL's ids and completion masks of prompt + chosen and prompt + rejected
  ({"chosen", "chosen_mask", "rejected", "rejected_mask"}), {"dropped": true} where DPOTrainer filters the pair out,
  or {"error": message} where TRL raises;
- batch: DataCollatorForPreference's input_ids and completion_mask for the kept pairs of one DPO config.

Nothing is re-implemented: "dpo" runs DPOTrainer._prepare_dataset (extract_prompt, add_eos, tokenize_fn, the
max_length filter) and DataCollatorForPreference (truncation); "cpo" runs maybe_extract_prompt,
maybe_apply_chat_template and CPOTrainer.tokenize_row (checked equal to ORPOTrainer.tokenize_row). The trainers'
methods are called on stand-ins holding the few attributes they read, so no model is built.
"""
import json
import os
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chat_ref  # noqa: E402  (the model directories)
from datasets import Dataset, disable_progress_bars  # noqa: E402
from trl.data_utils import extract_prompt, is_conversational, maybe_apply_chat_template, maybe_extract_prompt  # noqa: E402
from trl.experimental.cpo.cpo_trainer import CPOTrainer  # noqa: E402
from trl.experimental.orpo.orpo_trainer import ORPOTrainer  # noqa: E402
from trl.trainer.dpo_trainer import DataCollatorForPreference, DPOTrainer  # noqa: E402
import datasets.arrow_dataset  # noqa: E402
import datasets.fingerprint  # noqa: E402


def random_fingerprint(fingerprint, transform, transform_args):
    return datasets.fingerprint.generate_random_fingerprint()


# Every map of DPOTrainer._prepare_dataset fingerprints its transform, which pickles the tokenizer: two thirds of
# this script's time. The one-record datasets live in memory and are never cached, so a random fingerprint (what
# datasets itself falls back to when hashing fails) changes no result.
datasets.fingerprint.update_fingerprint = random_fingerprint
datasets.arrow_dataset.update_fingerprint = random_fingerprint


def strip_padding(batch, row):
    n = int(batch["attention_mask"][row].sum())
    return batch["input_ids"][row][:n].tolist(), batch["completion_mask"][row][:n].tolist()


def mixed_prompt(record):
    """A prompt of another kind than chosen (maybe_extract_prompt then splits the answers instead)."""
    return "prompt" in record and (is_conversational({"prompt": record["prompt"]}) !=
                                   is_conversational({"chosen": record["chosen"]}))


def dpo(hf, record, cfg):
    """DPOTrainer._prepare_dataset on a one-record dataset, then DataCollatorForPreference."""
    if mixed_prompt(record):
        # DPOTrainer keeps such a prompt and fails on it; the reader follows maybe_extract_prompt, as CPO/ORPO do.
        record = extract_prompt(record)
    stand_in = types.SimpleNamespace(_tokenizer=hf)
    args = types.SimpleNamespace(dataset_num_proc=None, max_length=cfg["max_length"],
                                 truncation_mode=cfg["truncation"])
    ds = DPOTrainer._prepare_dataset(stand_in, Dataset.from_list([record]), hf, args, "train")
    if len(ds) == 0:
        return {"dropped": True}, None
    example = {k: ds[0][k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")}
    collator = DataCollatorForPreference(pad_token_id=0, max_length=cfg["max_length"],
                                         truncation_mode=cfg["truncation"])
    batch = collator([example])
    chosen, chosen_mask = strip_padding(batch, 0)
    rejected, rejected_mask = strip_padding(batch, 1)
    return {"chosen": chosen, "chosen_mask": chosen_mask, "rejected": rejected,
            "rejected_mask": rejected_mask}, example


def cpo(hf, record, cfg):
    """maybe_extract_prompt, maybe_apply_chat_template, tokenize_row (CPO's and ORPO's, which must agree)."""
    example = maybe_apply_chat_template(maybe_extract_prompt(record), hf)
    rows = []
    for trainer in (CPOTrainer, ORPOTrainer):
        stand_in = types.SimpleNamespace(processing_class=hf, is_encoder_decoder=False, max_length=cfg["max_length"])
        stand_in.build_tokenized_answer = lambda p, a, s=stand_in, t=trainer: t.build_tokenized_answer(s, p, a)
        rows.append(trainer.tokenize_row(stand_in, dict(example)))
    assert rows[0] == rows[1], "CPOTrainer and ORPOTrainer tokenize differently"
    row = rows[0]
    return {"chosen": row["chosen_input_ids"], "chosen_mask": [int(x != -100) for x in row["chosen_labels"]],
            "rejected": row["rejected_input_ids"], "rejected_mask": [int(x != -100) for x in row["rejected_labels"]]}


def main(in_json, out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    disable_progress_bars()
    spec = json.loads(Path(in_json).read_text(encoding="utf-8"))
    records = [json.loads(line) for line in Path(spec["records"]).read_text(encoding="utf-8").splitlines()
               if line.strip()]
    models = chat_ref.build_models(out)
    result = {"models": {name: str(d) for name, (d, _) in models.items()}, "results": [],
              "extract": [maybe_extract_prompt(dict(r)) for r in records]}
    batch_examples = []
    for i, cfg in enumerate(spec["configs"]):
        hf = models[cfg["model"]][1]
        per_record = []
        for record in records:
            try:
                if cfg["style"] == "dpo":
                    res, example = dpo(hf, dict(record), cfg)
                    if i == spec["batch"]["config"] and example is not None:
                        batch_examples.append(example)
                else:
                    res = cpo(hf, dict(record), cfg)
            except Exception as e:  # noqa: BLE001  (TRL's or the template's refusal)
                res = {"error": f"{type(e).__name__}: {e}"}
            per_record.append(res)
        result["results"].append(per_record)
    cfg = spec["configs"][spec["batch"]["config"]]
    collator = DataCollatorForPreference(pad_token_id=spec["batch"]["pad_id"], max_length=cfg["max_length"],
                                         truncation_mode=cfg["truncation"])
    batch = collator(batch_examples)
    result["batch"] = {"input_ids": batch["input_ids"].tolist(), "completion_mask": batch["completion_mask"].tolist()}
    (out / "preference_ref.json").write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(sys.argv[1], sys.argv[2])
