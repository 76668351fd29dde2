// prepare: turns UTF-8 text files into byte-level token shards for `train`.
//
//   prepare --input /usr/share/doc --output-dir data --name corpus
//
// writes data/corpus_val_000000.bin, data/corpus_train_000000.bin, ... in
// llm.c's shard format (see token_shard.h): version 1, uint16 ids, whenever
// the tokenizer's ids fit 16 bits; version 2, uint32 ids, for a larger
// vocabulary (Llama 3's, Qwen2's), decided before anything is written.
//
// Train/validation split: every input file is cut into blocks of kBlockBytes;
// the last val-fraction of each block (rounded to whole bytes) goes to the
// validation split and the rest to training. It is deterministic (no RNG, the
// same input gives byte-identical shards), it spreads validation text over the
// whole corpus rather than taking one corner of it, and it gives even a tiny
// input a non-empty validation split.
//
// Documents are concatenated with nothing between them: the byte vocabulary
// has no spare id for an end-of-text token (see byte_tokenizer.h).
//
// --tokenizer FILE encodes with a byte-level BPE from a Hugging Face
// tokenizer.json instead (bpe_tokenizer.h: GPT-2's, Llama 3's, Qwen2's,
// SmolLM2's kind). Then every document (input file) starts with what the
// tokenizer's post_processor template puts first (Llama 3: <|begin_of_text|>),
// else with <|endoftext|> when the tokenizer has that token, as in llm.c's
// GPT-2 data (BpeTokenizer::document_start). Text is cut only where the
// pre-tokenizer splits anyway, so that nothing is tokenized differently from
// the whole: just past a '\n' between two printable non-space ASCII characters
// (a '\n' next to whitespace may belong to a whitespace run: "a\n\n b"
// pre-tokenizes as "a", "\n\n", " b"). GPT-2's, Llama 3's and Qwen2's patterns
// and SmolLM2's digits all split there (Llama 3's keeps the '\n' with the
// punctuation before it, "end.\n", which still ends there), and NFC changes
// nothing across it. A block is extended to the next such point (or to the end of
// the file), and its validation part starts at the first such point at or
// after the val-fraction point (else the last one before it, else a line
// start, else the point itself when the block is one line). The two parts are encoded
// apart, so the validation split is text the training split never holds. The
// shards then hold ids below the tokenizer's vocab_size(), which `train
// --tokenizer FILE` takes as the model's vocabulary.
//
// --train-tokenizer N first learns a byte-level BPE of N tokens (bpe_trainer.h:
// Hugging Face tokenizers' BpeTrainer, GPT-2's pre-tokenizer) from the
// training parts of those blocks only, writes it as a tokenizer.json
// (--tokenizer-out, default DIR/NAME_tokenizer.json), then encodes with it as
// --tokenizer does. The input is read twice (learn, then encode) rather than
// held in memory.
//
// --threads N encodes blocks on N threads (default: the CPUs this process may
// run on).
// Each block is encoded on its own anyway, so the shards are byte-identical
// for every N (launch/data/prepare_encode.h).
//
// This file is the command line; the steps are launch/data/prepare_*.h
// (prepare_run.h runs them in order).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <exception>
#include <iostream>
#include <limits>

#include "launch/data/prepare_encode.h"
#include "launch/data/prepare_options.h"
#include "launch/data/prepare_run.h"
#include "launch/data/token_shard.h"
#include "launch/resilience/command_line.h"

int main(int argc, char** argv) {
  launch::prepare::Options options;
  CLI::App app(
      "Tokenize UTF-8 text files with the byte-level tokenizer (vocab 256), a BPE tokenizer.json\n"
      "(--tokenizer), or a byte-level BPE learned here from the training split (--train-tokenizer N),\n"
      "into llm.c-format token shards (uint16 ids; uint32 ids, shard version 2, for a vocabulary over 65536).\n"
      "Writes DIR/NAME_train_000000.bin, ... and DIR/NAME_val_000000.bin, ... (and, with\n"
      "--train-tokenizer, DIR/NAME_tokenizer.json unless --tokenizer-out says where).\n"
      "Split: each input file is cut into 1 MiB blocks; the last val-fraction of every block goes to the\n"
      "validation split, the rest to training (deterministic, no RNG; with a BPE, cut only where its pre-tokenizer splits).\n"
      "Files containing NUL bytes are skipped as not text; files are concatenated in order with no\n"
      "separator (with a BPE, its template's first tokens or <|endoftext|> start each file).",
      "prepare");
  app.add_option("--input", options.inputs,
                 "Text file or directory (every regular file below it, sorted by path); repeatable")
      ->required()
      ->take_all();
  app.add_option("--output-dir", options.output_dir, "Directory for the shards (created if missing)")->required();
  app.add_option("--val-fraction", options.val_fraction, "Fraction of every block that goes to validation")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--shard-tokens", options.shard_tokens, "Maximum tokens per shard")
      ->check(CLI::Range(std::int64_t{launch::kShardMinTokens}, std::int64_t{std::numeric_limits<std::int32_t>::max()}))
      ->capture_default_str();
  app.add_option("--name", options.name, "Shard file name prefix")->capture_default_str();
  app.add_option("--tokenizer", options.tokenizer,
                 "Encode with the byte-level BPE of this Hugging Face tokenizer.json (GPT-2's, Llama 3's, Qwen2's, "
                 "SmolLM2's kind) instead of bytes; each document starts with what its post_processor's template "
                 "puts first (Llama 3: <|begin_of_text|>), else with <|endoftext|> when the tokenizer has it");
  auto* learn = app.add_option("--train-tokenizer", options.train_tokenizer,
                               "Learn a byte-level BPE of N tokens in all (256 bytes + merges + <|endoftext|>, as "
                               "Hugging Face tokenizers' BpeTrainer with GPT-2's pre-tokenizer) from the training "
                               "split, write its tokenizer.json and encode with it")
                    ->excludes("--tokenizer");
  app.add_option("--tokenizer-out", options.tokenizer_out,
                 "Where --train-tokenizer writes the tokenizer.json (default DIR/NAME_tokenizer.json); give it to "
                 "train --tokenizer")
      ->needs(learn);
  options.threads = launch::prepare::default_prepare_threads();
  app.add_option("--threads", options.threads,
                 "Threads that encode text (default: the CPUs this process may run on); the shards are byte-identical for "
                 "every count")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_flag("--overwrite", options.overwrite, "Replace shards of the same name left by an earlier run");

  try {
    launch::parse_command_line(app, argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help exits 0; every real parse error exits 1 like other failures.
    return launch::report_command_line_error(app, error) == 0 ? 0 : 1;
  }
  try {
    return launch::prepare::run(options);
  } catch (const std::exception& error) {
    // Errors here are in the input (files, flags): no source location.
    std::cerr << "prepare: error: " << launch::without_source_location(error.what()) << "\n";
    return 1;
  }
}
