#include "launch/data/prepare_learn_tokenizer.h"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/bpe_trainer.h"
#include "launch/data/prepare_split.h"

namespace fs = std::filesystem;

namespace launch::prepare {

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

}  // namespace launch::prepare
