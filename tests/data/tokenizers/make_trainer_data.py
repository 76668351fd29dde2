#!/usr/bin/env python3
"""Generates the reference data of tests/launch/data/test_bpe_trainer.cpp.

Reference: Hugging Face `tokenizers` (recorded with 0.23.3). It is needed only
to run this script, never by the tests:

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install tokenizers
    /tmp/hfvenv/bin/python tests/data/tokenizers/make_trainer_data.py

Trains tokenizers' BpeTrainer on bpe_train_corpus.txt with the settings that
launch/data/bpe_trainer.h reproduces (GPT-2's layout: ByteLevel pre-tokenizer
without a prefix space, ByteLevel decoder, <|endoftext|> special, the 256-byte
initial alphabet), and writes, next to this script:
  hf_trained_bpe.json        the corpus fed as one sequence (train_from_iterator([text]))
  hf_trained_bpe_lines.json  the corpus fed line by line, each line keeping its "\\n"
  hf_trained_ids.json        {"vocab_size": N, "cases": [{"tokenizer": FILE, "text": TEXT, "ids": [...]}]}:
                             ids = Tokenizer.from_file(FILE).encode(text, add_special_tokens=False).ids
"""
import json
import os

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB_SIZE = 700

HELD_OUT = [
    "Hello world, it's a held-out text: 2027 numbers, naïve café, 東京, 😀!",
    "the the the   spaces\n\n\tand tabs",
    "<|endoftext|>The end.<|endoftext|>",
]


def train(sequences):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=0, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(sequences, trainer)
    assert tok.get_vocab_size() == VOCAB_SIZE, tok.get_vocab_size()
    return tok


def main():
    with open(os.path.join(HERE, "bpe_train_corpus.txt"), encoding="utf-8", newline="") as f:
        corpus = f.read()
    files = {
        "hf_trained_bpe.json": train([corpus]),
        "hf_trained_bpe_lines.json": train(corpus.splitlines(keepends=True)),
    }
    cases = []
    for name, tok in files.items():
        path = os.path.join(HERE, name)
        tok.save(path, pretty=True)
        loaded = Tokenizer.from_file(path)
        for text in [corpus] + HELD_OUT:
            cases.append({"tokenizer": name, "text": text,
                          "ids": loaded.encode(text, add_special_tokens=False).ids})
    with open(os.path.join(HERE, "hf_trained_ids.json"), "w", encoding="utf-8") as f:
        json.dump({"reference": f"Hugging Face tokenizers {tokenizers.__version__}", "vocab_size": VOCAB_SIZE,
                   "cases": cases}, f, ensure_ascii=True, indent=0)
        f.write("\n")
    print(f"wrote {len(files)} tokenizer(s), {len(cases)} cases")


if __name__ == "__main__":
    main()
