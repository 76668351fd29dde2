#include "launch/data/prepare_run.h"

#include <cstdint>
#include <deque>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/bpe_trainer.h"
#include "launch/data/prepare_encode.h"
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

// Blocks (1 MiB each, see prepare_split.h) per thread in one encoding batch:
// enough that a file's short last block does not leave threads idle for long.
constexpr std::size_t kBatchBlocksPerThread = 4;

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

  if (options.train_tokenizer) learn_tokenizer(files, options);
  const std::string tokenizer_path =
      options.train_tokenizer ? options.learned_tokenizer_path() : options.tokenizer;  // "" = bytes
  BlockEncoder encoder(tokenizer_path, options.threads);
  if (const launch::BpeTokenizer* bpe = encoder.bpe()) {
    const bool starts = !bpe->document_start().empty();
    std::cout << "prepare: tokenizer " << tokenizer_path << ": vocabulary " << bpe->vocab_size() << ", "
              << (starts ? bpe->decode(bpe->document_start()) + " before each document"
                         : std::string("nothing between documents"))
              << (bpe->document_start_from_template() ? " (its post_processor's template)"
                                                      : !starts ? " (no <|endoftext|> token)" : "")
              << " (train with --tokenizer " << tokenizer_path << ")\n";
  }
  // One shard version for the whole dataset, from the vocabulary, before any
  // shard is written: 16-bit ids (llm.c's version 1) whenever they fit.
  const std::int32_t version = launch::shard_version_for_vocab(encoder.vocab_size());
  if (version != launch::kShardVersionU16)
    std::cout << "prepare: vocabulary of " << encoder.vocab_size() << " ids does not fit 16 bits: writing version "
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
  // Blocks are gathered across files into batches of about kBatchBlocksPerThread
  // per thread, encoded on the threads, and appended in their order, so the
  // shards do not depend on --threads. The batch's texts stay alive (in a
  // deque, whose elements never move) until its blocks are written.
  std::deque<std::string> batch_texts;
  std::vector<Block> batch;
  const auto batch_limit = static_cast<std::size_t>(encoder.threads()) * kBatchBlocksPerThread;
  auto write_batch = [&] {
    const std::vector<EncodedBlock> encoded = encoder.encode(batch);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      train.add(encoded[i].train);
      val.add(encoded[i].val);
      const auto bytes = static_cast<std::int64_t>(batch[i].train.size() + batch[i].val.size());
      text_bytes += bytes;
      progress_bytes += bytes;
      progress.update(progress_bytes);
    }
    batch.clear();
    batch_texts.clear();
  };
  for (const InputFile& file : files) {
    std::string why_skipped;
    std::optional<std::string> text = read_text_file(file, why_skipped);
    if (!text) {
      skip(file, why_skipped);
      continue;
    }
    ++files_used;
    batch_texts.push_back(std::move(*text));
    for_each_block(batch_texts.back(), options, [&](const Block& block) { batch.push_back(block); });
    // A file's blocks stay in one batch (they point into its text).
    if (batch.size() >= batch_limit) write_batch();
  }
  if (!batch.empty()) write_batch();
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
