"""Greedy generation with transformers' own generate() on a model directory written by `finetune train`, with no
stopping criteria of our own: whatever makes it stop comes from the directory (config.json, generation_config.json).
Usage: generate_stop.py MODEL_DIR MAX_NEW_TOKENS "PROMPT IDS" ["PROMPT IDS" ...].
Prints {"generated_ids": [[...] per prompt], "eos_token_id": ...}."""
import json
import sys

import torch
from transformers import AutoModelForCausalLM

model_dir, max_new = sys.argv[1], int(sys.argv[2])
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
model.eval()
generated = []
with torch.no_grad():
    for text in sys.argv[3:]:
        prompt = [int(t) for t in text.split()]
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False)
        generated.append(out[0, len(prompt):].tolist())
print(json.dumps({"generated_ids": generated, "eos_token_id": model.generation_config.eos_token_id}))
