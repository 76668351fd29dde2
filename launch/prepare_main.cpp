// prepare: turns UTF-8 text files into byte-level token shards for `train`.
//
//   prepare --input /usr/share/doc --output-dir data --name corpus
//
// writes data/corpus_val_000000.bin, data/corpus_train_000000.bin, ... in
// llm.c's shard format (see token_shard.h).
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
// tokenizer.json instead (bpe_tokenizer.h, e.g. GPT-2's). Then every document
// (input file) starts with <|endoftext|> when the tokenizer has that token, as
// in llm.c's GPT-2 data, and text is cut only at line ends, so that no word or
// UTF-8 character is cut in two and tokenized differently from the whole: a
// block is extended to just past the next '\n' (or to the end of the file),
// and its validation part starts at the first line start at or after the
// val-fraction point (at the last line start before it when no line follows,
// at the point itself when the block is one line). The two parts are encoded
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

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "engine/check.h"
#include "launch/bpe_tokenizer.h"
#include "launch/bpe_trainer.h"
#include "launch/byte_tokenizer.h"
#include "launch/token_shard.h"

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kBlockBytes = 1 << 20;  // split granularity, see the top of the file
// Draw a progress bar when stderr is a terminal, or when the input is big
// enough that a log file benefits from seeing it move.
constexpr std::int64_t kProgressMinBytes = 64 << 20;
constexpr double kProgressRedrawSeconds = 0.1;
// A directory such as /usr/share/doc holds thousands of .gz files; name the
// first few skipped files and count the rest in the summary.
constexpr int kMaxSkipNotes = 10;

struct Options {
  std::vector<std::string> inputs;
  std::string output_dir;
  double val_fraction = 0.05;
  std::int64_t shard_tokens = 100'000'000;
  std::string name = "corpus";
  bool overwrite = false;
  std::string tokenizer;  // tokenizer.json; "" = bytes
  std::optional<int> train_tokenizer;  // learn a BPE of this many tokens
  std::string tokenizer_out;  // where the learned one goes; "" = DIR/NAME_tokenizer.json

  bool bpe() const { return !tokenizer.empty() || train_tokenizer; }
  std::string learned_tokenizer_path() const {
    return tokenizer_out.empty() ? (fs::path(output_dir) / (name + "_tokenizer.json")).string() : tokenizer_out;
  }
};

struct InputFile {
  fs::path path;
  std::int64_t bytes;
  bool named_on_command_line;  // errors on these are fatal; files found in a directory are skipped
};

// Expands --input arguments: files as given, directories to every regular
// file below them, sorted by path so the output does not depend on the order
// the file system lists them in.
std::vector<InputFile> collect_inputs(const std::vector<std::string>& inputs) {
  std::vector<InputFile> files;
  for (const std::string& input : inputs) {
    const fs::path path(input);
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    ENGINE_CHECK(fs::exists(status), "input '", input, "' does not exist");
    if (fs::is_directory(status)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied)) {
        if (entry.is_regular_file(error)) found.push_back(entry.path());
      }
      std::sort(found.begin(), found.end());
      for (const fs::path& file : found) files.push_back({file, static_cast<std::int64_t>(fs::file_size(file)), false});
    } else {
      ENGINE_CHECK(fs::is_regular_file(status), "input '", input, "' is neither a regular file nor a directory");
      files.push_back({path, static_cast<std::int64_t>(fs::file_size(path)), true});
    }
  }
  return files;
}

// Fills shards of at most `shard_tokens` tokens: DIR/NAME_SPLIT_000000.bin, ...
class ShardWriter {
 public:
  ShardWriter(fs::path dir, std::string prefix, std::int64_t shard_tokens)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens) {}

  void add(std::span<const std::uint16_t> tokens) {
    while (!tokens.empty()) {
      const auto room = static_cast<std::size_t>(shard_tokens_) - buffer_.size();
      const std::size_t take = std::min(room, tokens.size());
      buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(take));
      tokens = tokens.subspan(take);
      if (static_cast<std::int64_t>(buffer_.size()) == shard_tokens_) flush();
    }
  }

  // Writes what is left. A leftover of one token cannot form an (input,
  // target) pair and the shard format refuses it, so it is dropped.
  void finish() {
    if (static_cast<std::int64_t>(buffer_.size()) >= launch::kShardMinTokens) {
      flush();
    } else if (!buffer_.empty()) {
      std::cerr << "prepare: note: dropping the last " << buffer_.size() << " token(s) of " << prefix_
                << ": a shard needs at least " << launch::kShardMinTokens << "\n";
      buffer_.clear();
    }
  }

  std::int64_t tokens_written() const { return tokens_written_; }
  int shards_written() const { return shards_written_; }

 private:
  void flush() {
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), "_%06d.bin", shards_written_);
    launch::write_token_shard((dir_ / (prefix_ + suffix)).string(), buffer_);
    tokens_written_ += static_cast<std::int64_t>(buffer_.size());
    ++shards_written_;
    buffer_.clear();
  }

  fs::path dir_;
  std::string prefix_;
  std::int64_t shard_tokens_;
  std::vector<std::uint16_t> buffer_;
  std::int64_t tokens_written_ = 0;
  int shards_written_ = 0;
};

// "[#######.............]  35.2%  120.3/341.0 MB  85.1 MB/s", redrawn in
// place with \r at most every kProgressRedrawSeconds.
class ProgressBar {
 public:
  explicit ProgressBar(std::int64_t total_bytes)
      : total_(total_bytes),
        enabled_(total_bytes > 0 && (::isatty(STDERR_FILENO) || total_bytes > kProgressMinBytes)),
        start_(Clock::now()),
        last_draw_(start_) {}

  void update(std::int64_t done_bytes) {
    done_ = done_bytes;
    if (!enabled_) return;
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_draw_).count() < kProgressRedrawSeconds) return;
    last_draw_ = now;
    draw(now);
  }

  void finish() {
    if (!enabled_) return;
    draw(Clock::now());
    end_line();
  }

  // Ends a partly drawn bar so a note printed next starts on its own line.
  void end_line() {
    if (drawn_) std::cerr << "\n";
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;

  void draw(Clock::time_point now) {
    drawn_ = true;
    constexpr int kWidth = 30;
    // Clamped: a file that grew since it was listed can push done_ past total_.
    const double fraction = std::clamp(static_cast<double>(done_) / static_cast<double>(total_), 0.0, 1.0);
    const int filled = static_cast<int>(fraction * kWidth);
    const double seconds = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
    const double mb = 1e6;
    std::fprintf(stderr, "\r[%s%s] %5.1f%%  %.1f/%.1f MB  %.1f MB/s", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), 100.0 * fraction, done_ / mb, total_ / mb,
                 done_ / mb / seconds);
    std::fflush(stderr);
  }

  std::int64_t total_;
  std::int64_t done_ = 0;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

// Creates the output directory, checks it is writable, and deals with shards
// of the same name left by an earlier run: a later glob would mix them with
// the new ones, so they are refused unless --overwrite removes them.
void prepare_output_dir(const Options& options) {
  const fs::path dir(options.output_dir);
  std::error_code error;
  fs::create_directories(dir, error);
  ENGINE_CHECK(!error, "cannot create output directory '", options.output_dir, "': ", error.message());
  ENGINE_CHECK(fs::is_directory(dir), "output path '", options.output_dir, "' exists and is not a directory");
  ENGINE_CHECK(::access(dir.c_str(), W_OK) == 0, "output directory '", options.output_dir, "' is not writable");

  const std::regex ours(options.name + "_(train|val)_[0-9]{6}\\.bin(\\.tmp)?");
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (std::regex_match(entry.path().filename().string(), ours)) stale.push_back(entry.path());
  }
  if (options.train_tokenizer && fs::exists(options.learned_tokenizer_path())) {
    ENGINE_CHECK(options.overwrite, "the learned tokenizer's file '", options.learned_tokenizer_path(),
                 "' already exists; pass --overwrite to replace it, or choose another --tokenizer-out or --name");
  }
  if (stale.empty()) return;
  ENGINE_CHECK(options.overwrite, "output directory '", options.output_dir, "' already holds ", stale.size(),
               " shard(s) named '", options.name, "_*' (e.g. ", stale.front().filename().string(),
               "); pass --overwrite to replace them, or choose another --name or --output-dir");
  for (const fs::path& path : stale) fs::remove(path);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ENGINE_CHECK(in, "cannot open '", path.string(), "' for reading: ", std::strerror(errno));
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ENGINE_CHECK(!in.bad(), "error reading '", path.string(), "'");
  return content;
}

// The text of an input file, or nullopt and why it is skipped: a file found
// in a directory that cannot be read, or any file with NUL bytes (not text).
// A file named on the command line that cannot be read is an error.
std::optional<std::string> read_text_file(const InputFile& file, std::string& why_skipped) {
  std::string text;
  try {
    text = read_file(file.path);
  } catch (const engine::Error& error) {
    if (file.named_on_command_line) throw;
    why_skipped = error.what();
    return std::nullopt;
  }
  if (std::memchr(text.data(), '\0', text.size()) != nullptr) {
    why_skipped = "'" + file.path.string() + "': contains NUL bytes, so not text";
    return std::nullopt;
  }
  return text;
}

// One block of a file (see the top of the file): its training and its
// validation text, and whether it starts the document.
struct Block {
  std::string_view train, val;
  bool document_start;
};

// Where a block's validation text starts: val-fraction of it from the end,
// rounded to whole bytes, or with a BPE at a line start (see the top).
std::size_t validation_start(std::string_view block, double val_fraction, bool whole_lines) {
  const std::size_t cut = block.size() - static_cast<std::size_t>(std::llround(val_fraction * block.size()));
  if (!whole_lines || cut == block.size() || cut == 0) return cut;
  const std::size_t after = block.find('\n', cut - 1);
  if (after != std::string_view::npos && after + 1 < block.size()) return after + 1;
  const std::size_t before = block.rfind('\n', cut - 1);
  if (before != std::string_view::npos) return before + 1;
  std::size_t at = cut;  // one line: at the point, moved to the start of a UTF-8 character
  while (at < block.size() && (static_cast<unsigned char>(block[at]) & 0xC0) == 0x80) ++at;
  return at;
}

void for_each_block(std::string_view text, const Options& options, const std::function<void(const Block&)>& on_block) {
  for (std::size_t at = 0, size = 0; at < text.size(); at += size) {
    size = std::min<std::size_t>(kBlockBytes, text.size() - at);
    if (options.bpe() && at + size < text.size()) {  // whole lines only (see the top of the file)
      const std::size_t newline = text.find('\n', at + size - 1);
      size = newline == std::string::npos ? text.size() - at : newline + 1 - at;
    }
    const std::string_view block = text.substr(at, size);
    const std::size_t cut = validation_start(block, options.val_fraction, options.bpe());
    on_block({block.substr(0, cut), block.substr(cut), at == 0});
  }
}

// --train-tokenizer: learns the BPE from the training text of every file
// that the encoding pass will use, and writes it (whole or not at all).
void learn_tokenizer(const std::vector<InputFile>& files, const Options& options) {
  const auto start = std::chrono::steady_clock::now();
  launch::BpeTrainer trainer;
  std::int64_t train_bytes = 0;
  for (const InputFile& file : files) {
    std::string why_skipped;  // reported by the encoding pass
    const std::optional<std::string> text = read_text_file(file, why_skipped);
    if (!text) continue;
    for_each_block(*text, options, [&](const Block& block) {
      trainer.add_text(block.train);
      train_bytes += static_cast<std::int64_t>(block.train.size());
    });
  }
  const launch::LearnedBpe learned = trainer.train(*options.train_tokenizer);
  const std::string path = options.learned_tokenizer_path();
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    ENGINE_CHECK(out, "cannot write the learned tokenizer to '", temp, "': ", std::strerror(errno));
    out << learned.to_json();
    out.close();
    ENGINE_CHECK(out, "error writing the learned tokenizer to '", temp, "'");
  }
  std::error_code error;
  fs::rename(temp, path, error);
  ENGINE_CHECK(!error, "cannot rename '", temp, "' to '", path, "': ", error.message());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "prepare: learned a byte-level BPE of " << learned.tokens.size() << " tokens (256 bytes, "
            << learned.merges.size() << " merges, " << launch::kEndOfText << ") from " << train_bytes
            << " bytes of training text (" << trainer.distinct_words() << " distinct words) in " << std::fixed
            << std::setprecision(1) << seconds << " s: wrote " << path << "\n";
  std::cout.unsetf(std::ios::fixed);
}

int run(const Options& options) {
  ENGINE_CHECK(!options.name.empty() && options.name.find('/') == std::string::npos, "--name '", options.name,
               "' must be non-empty and contain no '/'");
  if (options.train_tokenizer) {  // before reading anything (the trainer would say the same, later)
    const int n = *options.train_tokenizer;
    ENGINE_CHECK(n >= launch::BpeTrainer::kMinVocab && n <= launch::BpeTrainer::kMaxVocab, "--train-tokenizer ", n,
                 ": a byte-level BPE needs ", launch::BpeTrainer::kMinVocab, " tokens at least (the 256 bytes and ",
                 launch::kEndOfText, ") and ", launch::BpeTrainer::kMaxVocab, " at most (the shards' uint16 ids)");
  }
  const std::vector<InputFile> files = collect_inputs(options.inputs);
  std::int64_t total_bytes = 0;
  for (const InputFile& file : files) total_bytes += file.bytes;
  ENGINE_CHECK(!files.empty(), "no files found in the inputs (", options.inputs.size(), " path(s) given)");
  prepare_output_dir(options);

  const launch::ByteTokenizer bytes;
  std::optional<launch::BpeTokenizer> bpe;
  std::optional<std::uint16_t> end_of_text;
  if (options.train_tokenizer) learn_tokenizer(files, options);
  if (options.bpe()) {
    const std::string path = options.train_tokenizer ? options.learned_tokenizer_path() : options.tokenizer;
    bpe = launch::BpeTokenizer::from_file(path);
    if (const auto id = bpe->token_to_id(launch::kEndOfText)) end_of_text = static_cast<std::uint16_t>(*id);
    std::cout << "prepare: tokenizer " << path << ": vocabulary " << bpe->vocab_size()
              << (end_of_text ? ", <|endoftext|> before each document" : ", no <|endoftext|> token")
              << " (train with --tokenizer " << path << ")\n";
  }
  auto encode = [&](std::string_view text) {
    if (!bpe) return bytes.encode(text);
    const std::vector<std::int32_t> ids = bpe->encode(text);
    return std::vector<std::uint16_t>(ids.begin(), ids.end());  // ids < 65536: checked when loaded
  };
  const fs::path dir(options.output_dir);
  ShardWriter train(dir, options.name + "_train", options.shard_tokens);
  ShardWriter val(dir, options.name + "_val", options.shard_tokens);
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
      // Encoded apart: with a BPE no token spans the cut (see the top of the file).
      std::vector<std::uint16_t> train_tokens = encode(block.train);
      if (end_of_text && block.document_start) train_tokens.insert(train_tokens.begin(), *end_of_text);
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

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app(
      "Tokenize UTF-8 text files with the byte-level tokenizer (vocab 256), a BPE tokenizer.json\n"
      "(--tokenizer), or a byte-level BPE learned here from the training split (--train-tokenizer N),\n"
      "into llm.c-format token shards.\n"
      "Writes DIR/NAME_train_000000.bin, ... and DIR/NAME_val_000000.bin, ... (and, with\n"
      "--train-tokenizer, DIR/NAME_tokenizer.json unless --tokenizer-out says where).\n"
      "Split: each input file is cut into 1 MiB blocks; the last val-fraction of every block goes to the\n"
      "validation split, the rest to training (deterministic, no RNG; with a BPE, cut at line starts).\n"
      "Files containing NUL bytes are skipped as not text; files are concatenated in order with no\n"
      "separator (with a BPE that has <|endoftext|>, that token starts each file).",
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
                 "Encode with the byte-level BPE of this Hugging Face tokenizer.json (e.g. GPT-2's) instead of "
                 "bytes; <|endoftext|> starts each document when the tokenizer has it");
  auto* learn = app.add_option("--train-tokenizer", options.train_tokenizer,
                               "Learn a byte-level BPE of N tokens in all (256 bytes + merges + <|endoftext|>, as "
                               "Hugging Face tokenizers' BpeTrainer with GPT-2's pre-tokenizer) from the training "
                               "split, write its tokenizer.json and encode with it")
                    ->excludes("--tokenizer");
  app.add_option("--tokenizer-out", options.tokenizer_out,
                 "Where --train-tokenizer writes the tokenizer.json (default DIR/NAME_tokenizer.json); give it to "
                 "train --tokenizer")
      ->needs(learn);
  app.add_flag("--overwrite", options.overwrite, "Replace shards of the same name left by an earlier run");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help exits 0; every real parse error exits 1 like other failures.
    return app.exit(error) == 0 ? 0 : 1;
  }
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::cerr << "prepare: error: " << error.what() << "\n";
    return 1;
  }
}
