#!/usr/bin/env python3
"""Scores the runs of bpe_demo.sh (standard library only).

  decode: the text of token shards under a tokenizer.json (a byte-level BPE's
          ByteLevel decoding: token -> its characters -> GPT-2's byte stand-ins
          mapped back to bytes; added tokens verbatim).
  report: per run, validation bits per byte and the share of sample words found
          in the training text, as a markdown table.

Bits per byte = val loss (nats per token, the mean over the tokens scored)
x tokens / bytes of the validation text / ln 2, over the whole validation
split (--val-tokens larger than it; the last part-sequence is not scored).
Sample words: the first --sample-bytes bytes of each sample (the prompt "\\n"
and the last, possibly cut, word left out), split at whitespace, punctuation
stripped from both ends, lower-cased; the share of those found among the
training text's words treated the same way, pooled over the seeds.
"""
import argparse
import glob
import json
import math
import os
import re
import string
import struct

PUNCTUATION = string.punctuation + "\u2018\u2019\u201c\u201d\u2014\u2013\u2026"


def read_shards(pattern):
    tokens = []
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            header = struct.unpack("<256i", f.read(1024))
            assert header[0] == 20240520 and header[1] == 1, path
            data = f.read()
        assert len(data) == 2 * header[2], path
        tokens.extend(struct.unpack(f"<{header[2]}H", data))
    assert tokens, pattern
    return tokens


def bytes_to_unicode():
    """GPT-2's encoder.py bytes_to_unicode (launch/data/byte_level.h)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def decoder(tokenizer_path):
    if tokenizer_path is None:
        return lambda ids: bytes(ids)
    with open(tokenizer_path, encoding="utf-8") as f:
        spec = json.load(f)
    to_byte = bytes_to_unicode()
    table = {}
    for token, i in spec["model"]["vocab"].items():
        table[i] = bytes(to_byte[c] for c in token) if all(c in to_byte for c in token) else token.encode()
    for added in spec.get("added_tokens") or []:
        table[added["id"]] = added["content"].encode()
    return lambda ids: b"".join(table[i] for i in ids)


def words(text):
    out = []
    for word in text.split():
        word = word.strip(PUNCTUATION).lower()
        if word:
            out.append(word)
    return out


def sample_of(log_path):
    with open(log_path, encoding="utf-8", errors="replace") as f:
        log = f.read()
    match = re.search(r"^sample +----\n(.*)\n----$", log, re.S | re.M)
    assert match, log_path
    return match.group(1).encode("utf-8", errors="replace")


def report(args):
    known = set(words(bytes(read_shards(args.words_from)).decode("utf-8", errors="replace")))
    rows = []
    for run in args.runs:
        tokenizer = os.path.join(args.out, "data", run, "fortunes_tokenizer.json")
        tokenizer = tokenizer if os.path.exists(tokenizer) else None
        with open(os.path.join(args.out, run, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
        val_loss = summary["final_val_loss"]
        with open(os.path.join(args.out, run, "config.json"), encoding="utf-8") as f:
            val_glob = json.load(f)["val-data"]
        val_tokens = read_shards(val_glob)
        val_bytes = len(decoder(tokenizer)(val_tokens))
        bpb = val_loss * len(val_tokens) / val_bytes / math.log(2)
        found = total = 0
        for log in sorted(glob.glob(os.path.join(args.out, "samples", run + ".seed*.log"))):
            text = sample_of(log)[1:1 + args.sample_bytes].decode("utf-8", errors="replace")
            assert len(text.encode()) >= args.sample_bytes - 3, (log, "sample shorter than --sample-bytes")
            ws = words(text)[:-1]
            found += sum(w in known for w in ws)
            total += len(ws)
        rows.append((run, summary.get("steps", ""), val_loss, len(val_tokens), val_bytes, bpb, found, total))
    print("| tokenizer | val loss (nats/token) | val tokens | val bytes | bytes/token | bits/byte | "
          "sample words in training text |")
    print("|---|---|---|---|---|---|---|")
    for run, _, loss, tokens, nbytes, bpb, found, total in rows:
        print(f"| {run} | {loss:.4f} | {tokens:,} | {nbytes:,} | {nbytes / tokens:.3f} | {bpb:.4f} | "
              f"{found}/{total} = {100.0 * found / max(total, 1):.1f}% |")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("decode")
    d.add_argument("--tokenizer")
    d.add_argument("--shards", required=True)
    d.add_argument("--out", required=True)
    r = sub.add_parser("report")
    r.add_argument("--out", required=True)
    r.add_argument("--sample-bytes", type=int, required=True)
    r.add_argument("--words-from", required=True)
    r.add_argument("--runs", nargs="+", required=True)
    args = parser.parse_args()
    if args.command == "decode":
        with open(args.out, "wb") as f:
            f.write(decoder(args.tokenizer)(read_shards(args.shards)))
    else:
        report(args)


if __name__ == "__main__":
    main()
