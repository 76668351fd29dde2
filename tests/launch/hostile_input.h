// Shared by the tests of hostile input (tests/launch/checkpoint/, tests/launch/formats/):
// reading and writing raw bytes, FIFOs that would block a reader, a bounded
// wait for a reader that might block, variants of a valid file for the
// fuzz-style tests (truncated, bytes changed with a fixed seed, each JSON
// value replaced by values of the wrong type or out of range), and the check
// every refusal must pass (an engine::Error of one line of valid UTF-8).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/check.h"

namespace hostile {

namespace fs = std::filesystem;

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// What `fn` threw ("" when it returned) if it finished within `seconds`;
// nullopt when it did not (then `unblock` is called, to let it finish).
inline std::optional<std::string> error_within(double seconds, std::function<void()> fn,
                                               const std::function<void()>& unblock = [] {}) {
  auto result = std::make_shared<std::promise<std::string>>();
  std::future<std::string> done = result->get_future();
  std::thread([result, fn = std::move(fn)] {
    try {
      fn();
      result->set_value("");
    } catch (const std::exception& e) {
      result->set_value(e.what());
    }
  }).detach();
  if (done.wait_for(std::chrono::duration<double>(seconds)) == std::future_status::ready) return done.get();
  unblock();
  done.wait_for(std::chrono::seconds(5));
  return std::nullopt;
}

// Opens the FIFO at `path` for writing and closes it, which releases a reader
// blocked opening it (it then reads end-of-file).
inline void release_fifo(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);
}

inline void make_fifo(const fs::path& path) {
  fs::remove_all(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
}

// ---- generated variants of a valid file, for the fuzz-style tests ----

// A named variant of a file's text.
struct Variant {
  std::string what;  // how it was made, for failure messages
  std::string text;
};

// Values of every JSON type and of the edges of the integer types.
inline std::vector<nlohmann::json> hostile_values() {
  nlohmann::json deep = nlohmann::json::array();
  for (int i = 0; i < 64; ++i) deep = nlohmann::json::array({deep});
  const std::int64_t big = std::int64_t{1} << 32;
  return {nullptr, true, 0, -1, 1, 2.5, -0.5, 1e300,
          std::int64_t{1} << 31, big, std::numeric_limits<std::int64_t>::max(),
          std::uint64_t{1} << 63, std::numeric_limits<std::uint64_t>::max(), std::numeric_limits<std::int64_t>::min(),
          "", "../x", "/etc/passwd", "F16", nlohmann::json::array(), nlohmann::json::object(), deep,
          nlohmann::json::array({big, big, 4}), nlohmann::json::array({-1, 2}), nlohmann::json::array({2.5})};
}

// Every value of `j` replaced in turn by each hostile value, and every
// object member and array element removed in turn; only the values whose
// JSON pointer `keep` accepts, when given (to try one of many alike records).
inline std::vector<Variant> typed_variants(const nlohmann::json& j,
                                           const std::function<bool(const std::string&)>& keep = nullptr) {
  std::vector<Variant> out;
  const nlohmann::json flat = j.flatten();  // leaves only; their parents below
  std::vector<nlohmann::json::json_pointer> paths;
  for (const auto& [pointer, value] : flat.items()) {
    for (nlohmann::json::json_pointer p(pointer); !p.empty(); p = p.parent_pointer())
      if ((!keep || keep(p.to_string())) && std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
  }
  for (const nlohmann::json::json_pointer& p : paths) {
    for (const nlohmann::json& v : hostile_values()) {
      nlohmann::json edited = j;
      edited[p] = v;
      out.push_back({p.to_string() + " = " + v.dump().substr(0, 40), edited.dump(1)});
    }
    nlohmann::json removed = j;
    nlohmann::json& parent = removed[p.parent_pointer()];
    if (parent.is_object()) parent.erase(p.back());
    else if (parent.is_array()) parent.erase(static_cast<std::size_t>(std::stoul(p.back())));
    out.push_back({p.to_string() + " removed", removed.dump(1)});
  }
  return out;
}

// `text` cut at `count` offsets spread over its length (and at each of the
// first 16 bytes).
inline std::vector<Variant> truncations(const std::string& text, std::size_t count) {
  std::vector<Variant> out;
  for (std::size_t i = 0; i < std::min<std::size_t>(16, text.size()); ++i)
    out.push_back({"cut at " + std::to_string(i), text.substr(0, i)});
  for (std::size_t k = 1; k < count; ++k) {
    const std::size_t at = text.size() * k / count;
    out.push_back({"cut at " + std::to_string(at), text.substr(0, at)});
  }
  return out;
}

// `count` copies of `text` with 1 to 4 bytes in [first, text.size()) set to
// random values (a fixed seed: the same variants every run).
inline std::vector<Variant> byte_flips(const std::string& text, std::size_t count, std::uint64_t seed,
                                       std::size_t first = 0) {
  std::mt19937_64 rng(seed);
  std::vector<Variant> out;
  for (std::size_t k = 0; k < count && first < text.size(); ++k) {
    std::string t = text;
    std::string what = "bytes";
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const std::size_t at = first + rng() % (text.size() - first);
      t[at] = static_cast<char>(rng() & 0xff);
      what += " " + std::to_string(at);
    }
    out.push_back({what + " changed (seed " + std::to_string(seed) + ")", t});
  }
  return out;
}

// Checks the outcome of reading a variant: accepted, or refused with an
// engine::Error (never another exception) whose message is one line and,
// with `utf8`, valid UTF-8 (a checkpoint's damage goes into a JSON log).
inline void expect_accepted_or_refused(const std::function<void()>& read, const std::string& variant,
                                       bool utf8 = true) {
  try {
    read();
  } catch (const engine::Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << variant << ": " << message;
    if (utf8)
      EXPECT_NO_THROW(nlohmann::json(message).dump()) << variant << ": the message is not valid UTF-8: " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << variant << ": refused with an exception that is not an engine::Error: " << e.what();
  }
}

}  // namespace hostile

#define EXPECT_ONE_LINE(text) EXPECT_EQ(std::string(text).find('\n'), std::string::npos) << (text)
#define EXPECT_MENTIONS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)
