#include "launch/formats/untrusted_values.h"

#include <limits>

namespace launch {

std::optional<std::int64_t> json_integer(const nlohmann::json& value, std::int64_t lo, std::int64_t hi) {
  // nlohmann keeps a non-negative integer of the text as unsigned, a
  // negative one as signed; a float stays a float, even when integral.
  if (value.is_number_unsigned()) {
    const std::uint64_t n = value.get<std::uint64_t>();
    if (hi < 0 || n > static_cast<std::uint64_t>(hi)) return std::nullopt;
    const auto signed_n = static_cast<std::int64_t>(n);
    return signed_n >= lo ? std::optional<std::int64_t>(signed_n) : std::nullopt;
  }
  if (value.is_number_integer()) {
    const std::int64_t n = value.get<std::int64_t>();
    return n >= lo && n <= hi ? std::optional<std::int64_t>(n) : std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::int64_t> checked_product(const std::vector<std::int64_t>& dims) {
  for (std::int64_t d : dims)
    if (d == 0) return 0;  // whatever the others, even if their product alone would overflow
  std::int64_t n = 1;
  for (std::int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

std::string json_excerpt(const nlohmann::json& value) {
  constexpr std::size_t kMax = 60;
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() <= kMax) return text;
  // Cut on a character boundary (not inside a UTF-8 sequence).
  std::size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

}  // namespace launch
