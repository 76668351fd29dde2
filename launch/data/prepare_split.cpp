#include "launch/data/prepare_split.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace launch::prepare {

namespace {

constexpr std::int64_t kBlockBytes = 1 << 20;  // split granularity, see the top of launch/prepare_main.cpp

}  // namespace

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
    if (options.bpe() && at + size < text.size()) {  // whole lines only (see the top of launch/prepare_main.cpp)
      const std::size_t newline = text.find('\n', at + size - 1);
      size = newline == std::string::npos ? text.size() - at : newline + 1 - at;
    }
    const std::string_view block = text.substr(at, size);
    const std::size_t cut = validation_start(block, options.val_fraction, options.bpe());
    on_block({block.substr(0, cut), block.substr(cut), at == 0});
  }
}

}  // namespace launch::prepare
