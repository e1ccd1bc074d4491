"""TRL's own DPO / robust DPO / IPO / SimPO / ORPO numbers on a tiny model, for the preference-training tests.

Usage: dpo_train_ref.py OUT_DIR

Writes into OUT_DIR:
- model/: a tiny random LlamaForCausalLM (fp32 safetensors) with a byte-level BPE tokenizer trained here
  (tokenizer.json whose post-processor puts <s> first, tokenizer_config.json with bos <s>, eos <|im_end|>, pad <|pad|>
  and a ChatML chat template that adds no BOS);
- pairs.jsonl (16 standard records) and pairs_chat.jsonl (8 conversational records);
- adapter/: a PEFT LoRA adapter with nonzero lora_B, so that the policy differs from the base;
- step0.json: {"settings": {...}, CASE: {"trainer", "loss", "metrics": {TRL name: float}, "grads": {adapter tensor
  name: nested list}, "sequences": {"input_ids", "labels", "completion_mask": 8 unpadded rows each, chosen rows
  then rejected rows; "padded_shape": [8, T]}}} for CASE in dpo, robust, ipo, simpo, orpo (one batch of the first
  4 records of pairs.jsonl) and chat_<CASE> (the same on pairs_chat.jsonl);
- train_dpo.json: {"losses": [per step], "metrics": [per step {name: float}], "settings": {...}} of a 20-step full
  fine-tune with DPOTrainer (batch 2, file order, the 16 pairs two and a half times).
If trl or peft cannot be imported it writes only OUT_DIR/skip.json {"skip": reason}.

Nothing is re-implemented. Each case builds the real trainer (trl==1.16.0: trl.DPOTrainer, trl.experimental
CPOTrainer and ORPOTrainer) on the base model with a LoraConfig, so that the reference of DPO is the base with the
adapter disabled (TRL's reference for an adapter it creates; a ready PeftModel would get a "ref" copy of the adapter
instead), loads the adapter's weights into it, takes the first batch of the trainer's own dataloader (its dataset
preparation and data collator) and runs its compute_loss, then backward; the metrics are what trainer.log() logs.
"""
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

try:
    import torch
    from datasets import Dataset, disable_progress_bars
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from torch.utils.data import SequentialSampler
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PrinterCallback, TrainerCallback, set_seed
    from transformers.utils import logging as hf_logging
    from trl import DPOConfig, DPOTrainer
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - any import failure means no reference
    IMPORT_ERROR = f"{type(e).__name__}: {e}"

SEED = 1234
MAX_LENGTH = 64
STEP0_PAIRS = 4
BOS, EOS, PAD, IM_START = "<s>", "<|im_end|>", "<|pad|>", "<|im_start|>"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
          " + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
LORA_B_STD = 0.02
MODEL = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
             attention_dropout=0.0)

# Prompts end without a space and completions start with one (TRL concatenates the strings as they are). Record 2 is
# longer than MAX_LENGTH tokens, so the step-0 batch exercises truncation.
PAIRS = [
    ("Q: What color is the sky on a clear day?\nA:", " Blue.", " The sky is green and made of cheese."),
    ("Name a fruit.", " An apple is a fruit.", " A chair."),
    ("List the numbers from one to thirty in words.",
     " One, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen, fourteen, fifteen,"
     " sixteen, seventeen, eighteen, nineteen, twenty, twenty-one, twenty-two, twenty-three, twenty-four,"
     " twenty-five, twenty-six, twenty-seven, twenty-eight, twenty-nine, thirty.",
     " One, two, many."),
    ("Where does the cat sleep?", " The cat sleeps on the warm mat.", " The dog barks."),
    ("Translate 'bonjour' to English.", " Hello.", " Goodbye, see you tomorrow."),
    ("What is two plus two?", " Four.", " Five, obviously."),
    ("Write a short greeting.", " Hi there, nice to meet you!", " Hi."),
    ("Is water wet?", " Yes, water makes things wet.", " Yes, water is dry."),
    ("Give an antonym of hot.", " Cold.", " Warm, maybe."),
    ("How many legs does a spider have?", " A spider has eight legs.", " A spider has six legs."),
    ("Summarize: the quick brown fox jumps over the lazy dog.", " A fox jumps over a dog.", " Foxes are lazy."),
    ("What do bees make?", " Honey.", " Bees make cars in large factories."),
    ("Name the largest planet.", " Jupiter is the largest planet.", " Mars."),
    ("Complete: once upon a", " time.", " tree."),
    ("Which is heavier, a kilo of iron or a kilo of feathers?", " They weigh the same.",
     " The iron is heavier."),
    ("Say something kind.", " You are doing great.", " You are doing badly."),
]
CHAT = [
    ("You are a helpful assistant.", "What is the capital of France?", "Paris.", "London, of course."),
    (None, "Tell me a color.", "Red.", "Seven."),
    ("Answer briefly.", "How many days are in a week?", "Seven days.", "Ten days are in a week."),
    (None, "Greet me.", "Hello! How can I help you today?", "Go away."),
    ("You are terse.", "Is fire cold?", "No.", "Yes, very cold."),
    (None, "Name an animal that flies.", "A bird flies.", "A fish flies."),
    ("Be polite.", "Can you help me?", "Of course, happy to help.", "No."),
    (None, "What is one plus one?", "Two.", "Eleven."),
]


def standard_records():
    return [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS]


def chat_records():
    records = []
    for system, user, chosen, rejected in CHAT:
        prompt = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        records.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": chosen}],
                        "rejected": [{"role": "assistant", "content": rejected}]})
    return records


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


# ----------------------------------------------------------------------------------------------- model and adapter

def build_tokenizer(model_dir):
    """A Llama-3-style byte-level BPE trained on the records; its post-processor puts BOS first, as Llama's does, so
    that tokenizer(text) (DPOTrainer's standard path) adds BOS while the chat template adds none."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    corpus = [t for rec in PAIRS for t in rec] + [t for rec in CHAT for t in rec if t] + ["system user assistant"] * 8
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=512, special_tokens=[BOS, EOS, IM_START, PAD], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B:1",
                                      special_tokens=[(BOS, tok.token_to_id(BOS))])])
    tok.save(str(model_dir / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
              "chat_template": CHATML, "model_max_length": 256}
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return AutoTokenizer.from_pretrained(model_dir)


def build_model(model_dir, hf):
    set_seed(SEED)
    cfg = LlamaConfig(vocab_size=len(hf), bos_token_id=hf.bos_token_id, eos_token_id=hf.eos_token_id,
                      pad_token_id=hf.pad_token_id, **MODEL)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(model_dir, safe_serialization=True)


def load_base(model_dir):
    return LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def build_adapter(model_dir, adapter_dir):
    """LoRA with PEFT's init for lora_A and a seeded normal lora_B (PEFT's zeros would make policy == reference)."""
    set_seed(SEED)
    model = get_peft_model(load_base(model_dir), LoraConfig(**LORA))
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * LORA_B_STD)
    model.save_pretrained(adapter_dir)
    return load_file(str(adapter_dir / "adapter_model.safetensors"))


# ------------------------------------------------------------------------------------------------------ trainers

def common_args(tmp, batch_size):
    # bf16 and gradient checkpointing are TRL's defaults: both off for an exact fp32 reference.
    return dict(output_dir=tmp, report_to="none", use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
                seed=SEED, per_device_train_batch_size=batch_size, max_length=MAX_LENGTH, disable_dropout=True,
                logging_steps=1, save_strategy="no", dataloader_num_workers=0, train_sampling_strategy="sequential",
                disable_tqdm=True)


def trainer_cases():
    """{case: (trainer class, config class, hyper-parameters)}."""
    return {
        "dpo": (DPOTrainer, DPOConfig, dict(loss_type=["sigmoid"], beta=0.1)),
        "robust": (DPOTrainer, DPOConfig, dict(loss_type=["robust"], beta=0.1, label_smoothing=0.1)),
        "ipo": (DPOTrainer, DPOConfig, dict(loss_type=["ipo"], beta=0.1)),
        # cpo_alpha=0 drops CPO's NLL term: plain SimPO. CPO/ORPO have no max_prompt_length in TRL 1.16 and read
        # max_completion_length only for encoder-decoders, so max_length alone is set.
        "simpo": (CPOTrainer, CPOConfig, dict(loss_type="simpo", cpo_alpha=0.0, beta=2.0, simpo_gamma=0.5)),
        "orpo": (ORPOTrainer, ORPOConfig, dict(beta=0.1)),
    }


class LogCapture(TrainerCallback):
    """Every dict the trainer logs, as logged."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def make_trainer(case, records, model, hf, tmp, batch_size, capture, peft=True, **extra_args):
    """The case's trainer on `records` in file order; ref_model=None for DPO (TRL's default reference)."""
    trainer_cls, config_cls, hyper = trainer_cases()[case]
    args = config_cls(**common_args(tmp, batch_size), **hyper, **extra_args)
    kwargs = dict(model=model, args=args, train_dataset=Dataset.from_list(records), processing_class=hf,
                  callbacks=[capture], peft_config=LoraConfig(**LORA) if peft else None)
    if trainer_cls is DPOTrainer:
        kwargs["ref_model"] = None
    trainer = trainer_cls(**kwargs)
    trainer.remove_callback(PrinterCallback)  # it prints every log dict
    assert isinstance(trainer._get_train_sampler(), SequentialSampler)
    return trainer


def fed_sequences(trainer, batch):
    """The rows the model was given ([chosen..., rejected...]), unpadded, with TRL's labels (-100 where not scored)."""
    if isinstance(trainer, DPOTrainer):
        ids, attn = batch["input_ids"], batch["attention_mask"]
        labels = ids.masked_fill(batch["completion_mask"] == 0, -100)  # as DPOTrainer._compute_loss
    else:
        # ORPO pads with its padding_value, CPO with the tokenizer's pad id (concatenated_forward's arguments)
        pad = getattr(trainer, "padding_value", None)
        cat = trainer.concatenated_inputs(batch, is_encoder_decoder=False,
                                          padding_value=trainer.pad_token_id if pad is None else pad)
        ids, attn = cat["concatenated_input_ids"], cat["concatenated_attention_mask"]
        labels = cat["concatenated_labels"]
    out = {"input_ids": [], "completion_mask": [], "labels": [], "padded_shape": list(ids.shape)}
    for row in range(ids.size(0)):
        n = int(attn[row].sum())
        assert attn[row, :n].all(), "right padding expected"
        out["input_ids"].append(ids[row, :n].tolist())
        out["labels"].append(labels[row, :n].tolist())
        out["completion_mask"].append([int(x != -100) for x in out["labels"][-1]])
    return out


def lora_grads(model):
    """Gradients under the names adapter_model.safetensors uses (PEFT drops the adapter name)."""
    return {name.replace(".default.", "."): p.grad.tolist()
            for name, p in model.named_parameters() if "lora_" in name}


def step0_case(case, records, model_dir, adapter_sd, hf, tmp):
    capture = LogCapture()
    trainer = make_trainer(case, records[:STEP0_PAIRS], load_base(model_dir), hf, tmp, STEP0_PAIRS, capture)
    result = set_peft_model_state_dict(trainer.model, adapter_sd)
    assert not result.unexpected_keys, result.unexpected_keys
    batch = next(iter(trainer.get_train_dataloader()))
    inputs = trainer._prepare_inputs(batch)
    trainer.model.train()  # Trainer.train does this; DPOTrainer reads the mode to file its metrics under "train"
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grads = lora_grads(trainer.model)
    assert set(grads) == set(adapter_sd), "gradient names differ from the saved adapter's"
    trainer.log({"loss": loss.item()})  # the trainer adds (and for DPO averages) its stored metrics here
    metrics = {k: float(v) for k, v in capture.logs[-1].items() if k not in ("loss", "epoch")}
    return {"trainer": type(trainer).__name__, "loss": loss.item(), "metrics": metrics,
            "sequences": fed_sequences(trainer, batch), "grads": grads}


# Steps of the full fine-tune: 20 over the 16 pairs, 2 a step, so the file is read two and a half times.
TRAIN_STEPS = 20


def train_dpo(records, model_dir, hf, tmp):
    """Full fine-tune: ref_model=None makes DPOTrainer load a frozen copy of the initial model from model_dir."""
    capture = LogCapture()
    trainer = make_trainer("dpo", records, load_base(model_dir), hf, tmp, 2, capture, peft=False,
                           max_steps=TRAIN_STEPS, learning_rate=1e-4, optim="adamw_torch", adam_beta1=0.9,
                           adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0, lr_scheduler_type="constant",
                           warmup_steps=0, max_grad_norm=1.0, gradient_accumulation_steps=1)
    assert trainer.ref_model is not None
    trainer.train()
    steps = [log for log in capture.logs if "loss" in log and "train_runtime" not in log]
    assert len(steps) == TRAIN_STEPS, len(steps)
    settings = {"loss_type": "sigmoid", "beta": 0.1, "max_length": MAX_LENGTH, "truncation_mode": "keep_start",
                "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "steps": len(steps),
                "sampler": "sequential (file order, 2.5 epochs)", "optimizer": "adamw_torch", "learning_rate": 1e-4,
                "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "lr_scheduler_type": "constant",
                "warmup_steps": 0, "max_grad_norm": 1.0, "seed": SEED, "dtype": "float32", "disable_dropout": True,
                "reference": "frozen copy of the initial model (ref_model=None)", "records": "pairs.jsonl"}
    return {"losses": [float(s["loss"]) for s in steps],
            "metrics": [{k: float(v) for k, v in s.items() if k != "loss"} for s in steps], "settings": settings}


def step0_settings():
    cases = {name: {"trainer": spec[0].__name__, **spec[2]} for name, spec in trainer_cases().items()}
    return {"pairs_per_batch": STEP0_PAIRS, "records": "first 4 of pairs.jsonl / pairs_chat.jsonl (chat_*)",
            "max_length": MAX_LENGTH, "truncation_mode": "keep_start (DPO); CPO/ORPO cut the completion",
            "max_prompt_length": None, "max_completion_length": None, "dtype": "float32", "seed": SEED,
            "lora": dict(LORA, lora_b_init_std=LORA_B_STD), "reference": "base model, adapter disabled (DPO family)",
            "cases": cases}


# ---------------------------------------------------------------------------------------------------------- main

def main(out):
    start = time.time()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if IMPORT_ERROR is not None:
        (out / "skip.json").write_text(json.dumps({"skip": f"trl/peft cannot be imported ({IMPORT_ERROR})"}))
        print(f"dpo_train_ref: skipped ({IMPORT_ERROR})")
        return
    disable_progress_bars()
    hf_logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)  # e.g. CPO/ORPO's remove_unused_columns notice
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' gradient_checkpointing rename
    model_dir, adapter_dir = out / "model", out / "adapter"
    model_dir.mkdir(exist_ok=True)
    hf = build_tokenizer(model_dir)
    build_model(model_dir, hf)
    adapter_sd = build_adapter(model_dir, adapter_dir)
    standard, chat = standard_records(), chat_records()
    write_jsonl(out / "pairs.jsonl", standard)
    write_jsonl(out / "pairs_chat.jsonl", chat)

    step0 = {"settings": step0_settings()}
    with tempfile.TemporaryDirectory() as tmp:
        for prefix, records in (("", standard), ("chat_", chat)):
            for case in trainer_cases():
                step0[prefix + case] = step0_case(case, records, model_dir, adapter_sd, hf, tmp)
        train = train_dpo(standard, model_dir, hf, tmp)
    (out / "step0.json").write_text(json.dumps(step0), encoding="utf-8")
    (out / "train_dpo.json").write_text(json.dumps(train, indent=1), encoding="utf-8")
    print(f"dpo_train_ref: vocab {len(hf)}, step-0 losses "
          + ", ".join(f"{k} {v['loss']:.6f}" for k, v in step0.items() if k != "settings")
          + f"; DPO train losses {train['losses'][0]:.6f} .. {train['losses'][-1]:.6f}; {time.time() - start:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: dpo_train_ref.py OUT_DIR")
    main(sys.argv[1])
