// JSON from a user or from disk is untrusted input: a config file, a
// tokenizer.json, a safetensors header and its index, a checkpoint's
// state.json and rank index, a cluster file. Before any of them is parsed,
// check_json_text() refuses, in one line naming the file, text that is larger
// than its kind allows or nested deeper than any real file of these kinds
// (tens of thousands of nested brackets would otherwise cost gigabytes and
// overflow the stack in code that walks the parsed tree). Each caller then
// catches nlohmann::json::exception (the base of parse_error, out_of_range
// for a number like 1e400, type_error) rather than parse_error alone, so
// no parse failure escapes as an uncaught exception.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace launch {

// The deepest nesting accepted. The files above nest at most 6 levels
// (Hugging Face tokenizer.json: model -> merges -> [pair]); 128 leaves room
// for hand-grouped configs and refuses what only an attacker writes.
inline constexpr std::size_t kMaxJsonDepth = 128;

// Size bounds by kind. safetensors caps its header at 100 MB (its format
// spec); a tokenizer.json of a 256k-token vocabulary is about 30 MB.
inline constexpr std::size_t kMaxConfigJsonBytes = std::size_t{16} << 20;      // configs, cluster files, state.json
inline constexpr std::size_t kMaxLargeJsonBytes = std::size_t{100} * 1000 * 1000;  // tokenizer.json, safetensors headers

// Throws engine::Error "<what>: ..." (a bad input, so without the source
// location internal errors carry) when `text` is over `max_bytes` or
// nested deeper than kMaxJsonDepth (brackets inside strings do not count).
// Linear in the text, no allocation.
void check_json_text(std::string_view text, const std::string& what, std::size_t max_bytes);

// The whole text of a JSON file, checked as above; the size is checked
// before anything is read, so a huge file costs no memory. Throws
// engine::Error "<what>: ..." when the file cannot be read.
std::string read_json_file(const std::string& path, const std::string& what, std::size_t max_bytes);

// The depth of the deepest bracket of `text` (0 for a scalar); for tests.
std::size_t json_nesting_depth(std::string_view text);

// `text` safe to print on one line and to store in JSON: invalid UTF-8
// replaced by U+FFFD, control characters (line breaks too) escaped as JSON
// escapes them ("\n", "\u0001"). For every message that quotes an untrusted
// file, nlohmann-json's parse errors too: they quote the bytes last read
// ("last read: '...'"), whatever they are.
std::string printable_text(std::string_view text);

}  // namespace launch
