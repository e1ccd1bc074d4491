"""The Python contender of bench/compare's dpo workload: TRL's DPOTrainer (trl==1.16) with a PEFT LoRA r16 on all 7
projections of a Hugging Face model directory (bf16 base, fp32 adapters, bf16 autocast, fused AdamW, clipping at
1.0), the reference being the base with the adapters disabled, as `finetune train` with train.objective dpo does.
Eager, or with TrainingArguments.torch_compile. Reads the same pairs file; counts the real (non-padding) tokens of
every batch through its collator, and prints one JSON line: tokens/s over the steps after the warm-up, and the peak
memory."""
import argparse
import contextlib
import json
import os
import sys
import time

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
import datasets  # noqa: E402
import peft  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

p = argparse.ArgumentParser()
p.add_argument("--model-dir", required=True)
p.add_argument("--pairs", required=True, help="JSON Lines of prompt/chosen/rejected strings")
p.add_argument("--mode", choices=["eager", "compile"], default="eager")
p.add_argument("--loss", default="sigmoid", help="DPOConfig.loss_type")
p.add_argument("--batch", type=int, default=4, help="pairs per micro-batch")
p.add_argument("--max-length", type=int, default=1024)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--steps", type=int, default=10)
a = p.parse_args()

tokenizer = transformers.AutoTokenizer.from_pretrained(a.model_dir)
if tokenizer.pad_token is None:
    tokenizer.pad_token = tokenizer.eos_token
model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.bfloat16,
                                                          attn_implementation="sdpa", device_map={"": 0})
pairs = datasets.load_dataset("json", data_files=a.pairs, split="train")
args = trl.DPOConfig(output_dir="/tmp/ft-compare/trl-dpo", per_device_train_batch_size=a.batch,
                     gradient_accumulation_steps=1, max_steps=a.warmup + a.steps, learning_rate=5e-6,
                     lr_scheduler_type="constant", warmup_steps=0, bf16=True, max_grad_norm=1.0,
                     optim="adamw_torch_fused", logging_steps=10_000, save_strategy="no", report_to="none",
                     max_length=a.max_length, beta=0.1, loss_type=a.loss, torch_compile=a.mode == "compile",
                     gradient_checkpointing=False, dataloader_num_workers=0, seed=0)
trainer = trl.DPOTrainer(model=model, args=args, train_dataset=pairs, processing_class=tokenizer,
                         peft_config=peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS,
                                                     task_type="CAUSAL_LM"))

tokens = []  # real tokens of every batch, in order
collate = trainer.data_collator


def counting_collator(examples):
    batch = collate(examples)
    tokens.append(int(batch["attention_mask"].sum()))
    return batch


trainer.data_collator = counting_collator
times = []


class StepTimes(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        torch.cuda.synchronize()
        times.append(time.perf_counter())


trainer.add_callback(StepTimes())
torch.cuda.reset_peak_memory_stats()
with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its summary; stdout holds only our JSON line
    trainer.train()
# Step w's time is times[w] - times[w - 1]; the tokens of steps warmup+1 .. warmup+steps.
dt = times[-1] - times[a.warmup - 1]
measured = sum(tokens[a.warmup:a.warmup + a.steps])
print(json.dumps(dict(workload="dpo", runner=f"trl-{a.loss}-{a.mode}", tokens_per_s=measured / dt,
                      step_s=dt / a.steps, peak_alloc_gib=torch.cuda.max_memory_allocated() / 2**30,
                      peak_reserved_gib=torch.cuda.max_memory_reserved() / 2**30)), flush=True)
