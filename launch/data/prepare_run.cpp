#include "launch/data/prepare_run.h"

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/bpe_trainer.h"
#include "launch/data/byte_tokenizer.h"
#include "launch/data/prepare_inputs.h"
#include "launch/data/prepare_learn_tokenizer.h"
#include "launch/data/prepare_output.h"
#include "launch/data/prepare_progress.h"
#include "launch/data/prepare_split.h"
#include "launch/data/token_shard.h"

namespace fs = std::filesystem;

namespace launch::prepare {

namespace {

// A directory such as /usr/share/doc holds thousands of .gz files; name the
// first few skipped files and count the rest in the summary.
constexpr int kMaxSkipNotes = 10;

}  // namespace

int run(const Options& options) {
  ENGINE_CHECK(!options.name.empty() && options.name.find('/') == std::string::npos, "--name '", options.name,
               "' must be non-empty and contain no '/'");
  if (options.train_tokenizer) {  // before reading anything (the trainer would say the same, later)
    const int n = *options.train_tokenizer;
    ENGINE_CHECK(n >= launch::BpeTrainer::kMinVocab && n <= launch::BpeTrainer::kMaxVocab, "--train-tokenizer ", n,
                 ": a byte-level BPE needs ", launch::BpeTrainer::kMinVocab, " tokens at least (the 256 bytes and ",
                 launch::kEndOfText, ") and ", launch::BpeTrainer::kMaxVocab,
                 " at most (so its shards stay llm.c's uint16 ones)");
  }
  const InputFiles inputs = collect_inputs(options.inputs);
  const std::vector<InputFile>& files = inputs.files;
  // fortune's folder lists each text again as a NAME.u8 symlink: read once.
  if (inputs.duplicates > 0)
    std::cerr << "prepare: note: " << inputs.duplicates << " path(s) skipped as a file already listed (symlink, hard "
              << "link or repeated path), e.g. " << inputs.first_duplicate << "\n";
  std::int64_t total_bytes = 0;
  for (const InputFile& file : files) total_bytes += file.bytes;
  ENGINE_CHECK(!files.empty(), "no files found in the inputs (", options.inputs.size(), " path(s) given)");
  prepare_output_dir(options);

  const launch::ByteTokenizer bytes;
  std::optional<launch::BpeTokenizer> bpe;
  std::vector<std::uint32_t> document_start;  // ids before each document
  if (options.train_tokenizer) learn_tokenizer(files, options);
  if (options.bpe()) {
    const std::string path = options.train_tokenizer ? options.learned_tokenizer_path() : options.tokenizer;
    bpe = launch::BpeTokenizer::from_file(path);
    document_start.assign(bpe->document_start().begin(), bpe->document_start().end());
    std::cout << "prepare: tokenizer " << path << ": vocabulary " << bpe->vocab_size() << ", "
              << (!document_start.empty() ? bpe->decode(bpe->document_start()) + " before each document"
                                          : std::string("nothing between documents"))
              << (bpe->document_start_from_template() ? " (its post_processor's template)"
                                                      : document_start.empty() ? " (no <|endoftext|> token)" : "")
              << " (train with --tokenizer " << path << ")\n";
  }
  auto encode = [&](std::string_view text) {
    if (!bpe) {
      const std::vector<std::uint16_t> ids = bytes.encode(text);
      return std::vector<std::uint32_t>(ids.begin(), ids.end());
    }
    const std::vector<std::int32_t> ids = bpe->encode(text);
    return std::vector<std::uint32_t>(ids.begin(), ids.end());  // in [0, vocab_size()): checked when loaded
  };
  // One shard version for the whole dataset, from the vocabulary, before any
  // shard is written: 16-bit ids (llm.c's version 1) whenever they fit.
  const std::int32_t version = launch::shard_version_for_vocab(bpe ? bpe->vocab_size() : bytes.vocab_size());
  if (version != launch::kShardVersionU16)
    std::cout << "prepare: vocabulary of " << bpe->vocab_size() << " ids does not fit 16 bits: writing version "
              << version << " shards (uint32 ids, launch/data/token_shard.h), which llm.c cannot read\n";
  const fs::path dir(options.output_dir);
  ShardWriter train(dir, options.name + "_train", options.shard_tokens, version);
  ShardWriter val(dir, options.name + "_val", options.shard_tokens, version);
  ProgressBar progress(total_bytes);

  // The bar moves over every listed byte, skipped files included, since it
  // started from their total; the summary counts the corpus apart from what
  // was skipped, so a directory of mostly binary files does not look big.
  std::int64_t progress_bytes = 0;
  std::int64_t text_bytes = 0;     // tokenized
  std::int64_t skipped_bytes = 0;  // in skipped files, at their listed size
  int files_used = 0;
  int files_skipped = 0;
  auto skip = [&](const InputFile& file, const std::string& why) {
    if (files_skipped < kMaxSkipNotes) {
      progress.end_line();
      std::cerr << "prepare: note: skipping " << why << "\n";
    } else if (files_skipped == kMaxSkipNotes) {
      progress.end_line();
      std::cerr << "prepare: note: skipping more files; the summary counts them\n";
    }
    ++files_skipped;
    skipped_bytes += file.bytes;
    progress_bytes += file.bytes;
    progress.update(progress_bytes);
  };
  for (const InputFile& file : files) {
    std::string why_skipped;
    const std::optional<std::string> text = read_text_file(file, why_skipped);
    if (!text) {
      skip(file, why_skipped);
      continue;
    }
    ++files_used;
    for_each_block(*text, options, [&](const Block& block) {
      // Encoded apart: with a BPE no token spans the cut (see the top of launch/prepare_main.cpp).
      std::vector<std::uint32_t> train_tokens = encode(block.train);
      if (block.document_start) train_tokens.insert(train_tokens.begin(), document_start.begin(), document_start.end());
      train.add(train_tokens);
      val.add(encode(block.val));
      const auto bytes = static_cast<std::int64_t>(block.train.size() + block.val.size());
      text_bytes += bytes;
      progress_bytes += bytes;
      progress.update(progress_bytes);
    });
  }
  progress.finish();
  train.finish();  // may print a note, so after the bar's last line
  val.finish();
  ENGINE_CHECK(train.shards_written() > 0, "the inputs hold no usable text (", files_used, " text file(s), ",
               files_skipped, " skipped): nothing to write");

  std::cout << "prepare: " << files_used << " text file(s), " << text_bytes << " bytes tokenized; " << files_skipped
            << " file(s) skipped (" << skipped_bytes << " bytes)\n"
            << "prepare: train: " << train.tokens_written() << " tokens in " << train.shards_written() << " shard(s)\n"
            << "prepare: val:   " << val.tokens_written() << " tokens in " << val.shards_written() << " shard(s)\n"
            << "prepare: wrote " << (dir / (options.name + "_{train,val}_*.bin")).string() << "\n";
  return 0;
}

}  // namespace launch::prepare
