#include "launch/data/prepare_split.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace launch::prepare {

namespace {

constexpr std::int64_t kBlockBytes = 1 << 20;  // split granularity, see the top of launch/prepare_main.cpp

// A printable ASCII character other than a space: never part of a
// whitespace run, whatever the pre-tokenizer's notion of whitespace.
bool graphic(char c) { return c > 0x20 && c < 0x7F; }

// The first position p >= from with text[p - 1] == '\n' between two graphic
// characters, or npos. GPT-2's pre-tokenizer pattern splits there whatever
// comes before or after: the '\n' is its own pre-token, the letters, digits
// or punctuation either side end and start theirs, and no whitespace run
// crosses it. After a '\n' next to whitespace it may not be so: "a\n\n b"
// pre-tokenizes as "a", "\n\n", " b", but cut after the first '\n' as "a",
// "\n" and "\n", " b", which encodes to other ids (issue 38: 3 in 19.5M
// tokens of a real corpus).
std::size_t safe_cut_at_or_after(std::string_view text, std::size_t from) {
  for (std::size_t p = std::max<std::size_t>(from, 2); p < text.size(); ++p) {
    p = text.find('\n', p - 1);
    if (p == std::string_view::npos) return p;
    ++p;  // just past the '\n'
    if (p < text.size() && graphic(text[p - 2]) && graphic(text[p])) return p;
  }
  return std::string_view::npos;
}

// The last such position p <= to, or npos.
std::size_t safe_cut_at_or_before(std::string_view text, std::size_t to) {
  for (std::size_t p = std::min(to, text.size()); p >= 2;) {
    const std::size_t newline = text.rfind('\n', p - 1);
    if (newline == std::string_view::npos || newline == 0) return std::string_view::npos;
    p = newline + 1;
    if (p < text.size() && graphic(text[p - 2]) && graphic(text[p])) return p;
    p = newline;
  }
  return std::string_view::npos;
}

}  // namespace

std::size_t validation_start(std::string_view block, double val_fraction, bool whole_lines) {
  const std::size_t cut = block.size() - static_cast<std::size_t>(std::llround(val_fraction * block.size()));
  if (!whole_lines || cut == block.size() || cut == 0) return cut;
  // A cut the pre-tokenizer makes anyway (see safe_cut_at_or_after), so the
  // two parts encode as the whole would; else a line start.
  const std::size_t safe_after = safe_cut_at_or_after(block, cut);
  if (safe_after != std::string_view::npos) return safe_after;
  const std::size_t safe_before = safe_cut_at_or_before(block, cut);
  if (safe_before != std::string_view::npos && safe_before > 0) return safe_before;
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
    if (options.bpe() && at + size < text.size()) {
      // Whole lines, cut where the pre-tokenizer splits anyway (see the top
      // of launch/prepare_main.cpp), so blocks encode as the whole file would.
      const std::size_t cut = safe_cut_at_or_after(text, at + size);
      size = cut == std::string_view::npos ? text.size() - at : cut - at;
    }
    const std::string_view block = text.substr(at, size);
    const std::size_t cut = validation_start(block, options.val_fraction, options.bpe());
    on_block({block.substr(0, cut), block.substr(cut), at == 0});
  }
}

}  // namespace launch::prepare
