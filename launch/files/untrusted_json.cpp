#include "launch/files/untrusted_json.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "engine/check.h"

namespace launch {

namespace {

// The deepest bracket, scanning at most until it passes `stop_above`.
std::size_t deepest(std::string_view text, std::size_t stop_above) {
  std::size_t depth = 0, deepest_seen = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest_seen) deepest_seen = depth;
      if (deepest_seen > stop_above) return deepest_seen;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest_seen;
}

}  // namespace

std::size_t json_nesting_depth(std::string_view text) { return deepest(text, static_cast<std::size_t>(-1)); }

void check_json_text(std::string_view text, const std::string& what, std::size_t max_bytes) {
  if (text.size() > max_bytes)
    throw engine::Error(what + ": " + std::to_string(text.size()) + " bytes of JSON, more than the " +
                             std::to_string(max_bytes) + " such a file may hold");
  if (deepest(text, kMaxJsonDepth) > kMaxJsonDepth)
    throw engine::Error(what + ": JSON nested more than " + std::to_string(kMaxJsonDepth) +
                             " levels deep (no file of this kind nests so deep)");
}

std::string read_json_file(const std::string& path, const std::string& what, std::size_t max_bytes) {
  std::error_code error;
  const std::uintmax_t bytes = std::filesystem::file_size(path, error);
  if (error) throw engine::Error(what + ": cannot read '" + path + "' (" + error.message() + ")");
  if (bytes > max_bytes)
    throw engine::Error(what + ": " + std::to_string(bytes) + " bytes of JSON, more than the " +
                             std::to_string(max_bytes) + " such a file may hold");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw engine::Error(what + ": cannot open '" + path + "' (" + std::strerror(errno) + ")");
  std::string text(std::istreambuf_iterator<char>(in), {});
  check_json_text(text, what, max_bytes);
  return text;
}

std::string printable_text(std::string_view text) {
  // nlohmann's serializer does the UTF-8 validation and the escaping; its
  // quotes and its escaping of '"' and '\' are then undone, as a message
  // needs neither.
  const std::string quoted =
      nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(quoted.size());
  for (std::size_t i = 1; i + 1 < quoted.size(); ++i) {
    if (quoted[i] == '\\' && (quoted[i + 1] == '"' || quoted[i + 1] == '\\')) ++i;
    out += quoted[i];
  }
  return out;
}

}  // namespace launch
