#include "launch/data/unicode_normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/check.h"
#include "launch/data/regex_split.h"

namespace launch {

namespace {

// What utf8proc_NFC() passes: canonical (not compatibility) mappings, and no
// composition that Unicode's stability policy excludes.
constexpr auto kNfcOptions = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);

int combining_class(utf8proc_int32_t cp) { return utf8proc_get_property(cp)->combining_class; }

// NFC of one stretch of valid UTF-8, appended to `out`.
void normalize_valid(std::string_view text, std::string& out) {
  // 1. Full canonical decomposition, character by character (no reordering).
  std::vector<utf8proc_int32_t> points;
  points.reserve(text.size() + 1);
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  for (std::size_t at = 0; at < text.size();) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(bytes + at, static_cast<utf8proc_ssize_t>(text.size() - at), &cp);
    ENGINE_CHECK(n > 0, "NFC: invalid UTF-8 at byte ", at, " of a stretch checked as valid");  // cannot happen
    at += static_cast<std::size_t>(n);
    utf8proc_int32_t decomposed[32];  // canonical decompositions are at most 4 code points
    int boundclass = 0;
    const utf8proc_ssize_t count = utf8proc_decompose_char(cp, decomposed, 32, kNfcOptions, &boundclass);
    ENGINE_CHECK(count > 0 && count <= 32, "NFC: utf8proc could not decompose U+", std::hex, cp, ": ",
                 count < 0 ? utf8proc_errmsg(count) : "too long");
    points.insert(points.end(), decomposed, decomposed + count);
  }
  // 2. Canonical ordering (Unicode 15.0 section 3.11, D108-D109): each run of
  // characters of non-zero combining class sorted by class, stably.
  for (std::size_t begin = 0; begin < points.size();) {
    if (combining_class(points[begin]) == 0) {
      ++begin;
      continue;
    }
    std::size_t end = begin + 1;
    while (end < points.size() && combining_class(points[end]) != 0) ++end;
    if (end - begin > 1)
      std::stable_sort(points.begin() + static_cast<std::ptrdiff_t>(begin),
                       points.begin() + static_cast<std::ptrdiff_t>(end),
                       [](utf8proc_int32_t a, utf8proc_int32_t b) { return combining_class(a) < combining_class(b); });
    begin = end;
  }
  // 3. Canonical composition and UTF-8, in place: utf8proc_reencode writes
  // at most 4 bytes per code point into the buffer it reads, plus a NUL.
  const auto length = static_cast<utf8proc_ssize_t>(points.size());
  points.push_back(0);
  const utf8proc_ssize_t written = utf8proc_reencode(points.data(), length, kNfcOptions);
  ENGINE_CHECK(written >= 0, "NFC: utf8proc could not compose: ", utf8proc_errmsg(written));
  out.append(reinterpret_cast<const char*>(points.data()), static_cast<std::size_t>(written));
}

}  // namespace

std::string normalize_nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);  // ASCII is NFC
  std::string out;
  out.reserve(text.size());
  for_each_utf8_stretch(
      text, [&](std::size_t begin, std::size_t end) { normalize_valid(text.substr(begin, end - begin), out); },
      [&](std::size_t begin, std::size_t end) { out.append(text.substr(begin, end - begin)); });
  return out;
}

std::string nfc_library_version() {
  return std::string("utf8proc ") + utf8proc_version() + " (Unicode " + utf8proc_unicode_version() + ")";
}

}  // namespace launch
