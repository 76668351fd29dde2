// Values read from untrusted files (model files, checkpoints), checked before
// they are used: an integer field must be a JSON integer in range (12.0,
// "12", 2^63 and -1 are not a head count), an element count must not
// overflow, and what a message quotes of the file must print on one line as
// valid UTF-8 (a message may end up in a JSON log, whose serializer throws on
// invalid UTF-8).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/files/untrusted_json.h"  // printable_text

namespace launch {

// `value` as an integer in [lo, hi]; nullopt when it is not a JSON integer
// (a float, even 12.0, a string, a boolean, null...) or lies outside.
std::optional<std::int64_t> json_integer(const nlohmann::json& value, std::int64_t lo, std::int64_t hi);

// The product of `dims` (each non-negative); nullopt when it overflows int64.
std::optional<std::int64_t> checked_product(const std::vector<std::int64_t>& dims);

// `value`'s compact JSON text, for a message: invalid UTF-8 replaced, cut
// to about 60 characters.
std::string json_excerpt(const nlohmann::json& value);

}  // namespace launch
