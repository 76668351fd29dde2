// Hostile variants of a valid JSON text, for the fuzz-style tests of every
// parser that reads JSON from a user or from disk (configs, tokenizer.json,
// safetensors headers and indexes, checkpoint state, cluster files).
//
// Each variant is what an adversarial run fed the parsers: nesting tens of
// thousands deep, numbers too large for a double or an int64, every value
// replaced by each wrong JSON type, the text truncated at many offsets,
// bytes flipped (a fixed seed, so a failure repeats), bytes that are not
// UTF-8, NUL bytes. The parser under test must accept a variant or refuse it
// with one line; it must never crash, hang or take unbounded memory.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <exception>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace engine_test {

struct HostileJson {
  std::string name;  // what was done, for the failure message
  std::string text;
};

// `deep` levels of `open` around `inner`, then the closers.
inline std::string nested(std::size_t deep, char open, const std::string& inner = "0") {
  const char close = open == '[' ? ']' : '}';
  std::string text;
  text.reserve(deep * 8 + inner.size());
  for (std::size_t i = 0; i < deep; ++i) text += open == '[' ? std::string("[") : std::string("{\"k\":");
  text += inner;
  text.append(deep, close);
  return text;
}

// The positions just after each `"key":` of `valid`, where a value starts.
inline std::vector<std::size_t> value_starts(const std::string& valid) {
  std::vector<std::size_t> starts;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < valid.size(); ++i) {
    const char c = valid[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ':') {
      std::size_t j = i + 1;
      while (j < valid.size() && valid[j] == ' ') ++j;
      starts.push_back(j);
    }
  }
  return starts;
}

// The end of the JSON value that starts at `at` (a scalar, string, array or object).
inline std::size_t value_end(const std::string& text, std::size_t at) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') { in_string = false; if (depth == 0) return i + 1; }
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') ++depth;
    else if (c == ']' || c == '}') { if (depth == 0) return i; if (--depth == 0) return i + 1; }
    else if (depth == 0 && (c == ',' || c == '\n')) return i;
  }
  return text.size();
}

// At most `max_per_kind` variants of each kind, spread over the text.
inline std::vector<HostileJson> hostile_json_variants(const std::string& valid, std::size_t max_per_kind = 40,
                                                      std::uint32_t seed = 1234) {
  std::vector<HostileJson> out;
  // Nesting: alone, and in place of the first value.
  for (std::size_t deep : {200u, 10000u, 100000u}) {
    out.push_back({"array nested " + std::to_string(deep), nested(deep, '[')});
    out.push_back({"object nested " + std::to_string(deep), nested(deep, '{')});
  }
  const std::vector<std::size_t> starts = value_starts(valid);
  const std::vector<std::string> replacements = {
      "1e400", "-1e400", "18446744073709551616", "9223372036854775807", "-9223372036854775808", "-1", "0",
      "0.5", "12.0", "null", "true", "\"\"", "\"x\"", "[]", "{}", "[1,2,3]", "{\"a\":1}", "\"\\ud800\"",
      "\"\xff\xfe\"", nested(100000, '['), "1" + std::string(5000, '0')};
  std::size_t step = starts.size() > max_per_kind ? starts.size() / max_per_kind : 1;
  for (std::size_t s = 0; s < starts.size(); s += step) {
    const std::size_t begin = starts[s], end = value_end(valid, begin);
    for (const std::string& r : replacements)
      out.push_back({"value at byte " + std::to_string(begin) + " replaced by " + r.substr(0, 24),
                     valid.substr(0, begin) + r + valid.substr(end)});
  }
  // Truncations and appended junk.
  const std::size_t cuts = std::min<std::size_t>(max_per_kind, valid.size());
  for (std::size_t i = 0; i < cuts; ++i) {
    const std::size_t at = valid.size() * i / cuts;
    out.push_back({"truncated at byte " + std::to_string(at), valid.substr(0, at)});
  }
  out.push_back({"trailing junk", valid + "}}]]"});
  out.push_back({"empty", ""});
  out.push_back({"NUL bytes", std::string("\0\0\0\0", 4) + valid});
  // Bytes flipped at random (fixed seed).
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < max_per_kind && !valid.empty(); ++i) {
    std::string t = valid;
    const std::size_t at = rng() % t.size();
    t[at] = static_cast<char>(rng() & 0xff);
    out.push_back({"byte " + std::to_string(at) + " flipped", std::move(t)});
  }
  return out;
}

// Feeds every variant to `read` (which parses its text, however the parser
// under test takes it): each must be accepted or refused with a
// std::exception whose message is one line, each within `seconds_each`.
// Returns how many were refused.
template <class Read>
std::size_t expect_accepted_or_one_line(const std::vector<HostileJson>& variants, Read read,
                                        double seconds_each = 5.0) {
  std::size_t refused = 0;
  for (const HostileJson& v : variants) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      read(v.text);
    } catch (const std::exception& e) {
      ++refused;
      const std::string message = e.what();
      EXPECT_FALSE(message.empty()) << v.name;
      EXPECT_EQ(message.find('\n'), std::string::npos) << v.name << ": not one line: " << message;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, seconds_each) << v.name;
  }
  return refused;
}

}  // namespace engine_test
