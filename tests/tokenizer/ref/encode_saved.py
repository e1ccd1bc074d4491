"""Loads a tokenizer.json written by ft_tokenizer's save() with `tokenizers` and encodes texts with it.

usage: encode_saved.py TOKENIZER_JSON TEXTS_JSON OUT_JSON   (OUT_JSON: {"ids": [[...]], "vocab_size": n})
"""
import json
import sys

from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
texts = json.load(open(sys.argv[2], encoding="utf-8"))
out = {"ids": [tok.encode(t, add_special_tokens=False).ids for t in texts],
       "vocab_size": tok.get_vocab_size(with_added_tokens=True)}
json.dump(out, open(sys.argv[3], "w", encoding="utf-8"))
