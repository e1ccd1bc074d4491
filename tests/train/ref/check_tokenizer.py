"""Loads a model directory written by `finetune train` with transformers' AutoTokenizer and checks that it encodes
texts to the same ids as sentencepiece with the directory's tokenizer.model, and starts each with BOS as training
did (tokenizer.add_bos: true). Prints one line per text; exits 1 on a mismatch."""
import sys

import sentencepiece as spm
from transformers import AutoTokenizer

model_dir = sys.argv[1]
texts = sys.argv[2:]
sp = spm.SentencePieceProcessor(model_file=f"{model_dir}/tokenizer.model")
tok = AutoTokenizer.from_pretrained(model_dir)
ok = True
for text in texts:
    ours = sp.encode(text)
    theirs = tok(text, add_special_tokens=False)["input_ids"]
    # As in training (tokenizer.add_bos: true), a plain encode starts with BOS.
    with_specials = tok(text)["input_ids"]
    same = ours == theirs and with_specials == [sp.bos_id()] + ours
    ok = ok and same
    print(f"{'same' if same else 'DIFFERENT'} {text!r}: sentencepiece {ours} transformers {with_specials}")
print(f"bos {tok.bos_token_id} eos {tok.eos_token_id} class {type(tok).__name__}")
sys.exit(0 if ok else 1)
