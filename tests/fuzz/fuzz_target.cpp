#include "tests/fuzz/fuzz_target.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace fuzz {

namespace {

// One scratch folder per process, removed at exit.
const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("engine_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return d;
  }();
  return dir;
}

}  // namespace

std::string scratch_folder() { return scratch_dir().string(); }

std::string input_file(const std::uint8_t* data, std::size_t size, const std::string& name) {
  const std::filesystem::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) finding("could not write the input to " + path.string());
  return path.string();
}

void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

void report_verdict(const char* message) {
  static const bool verbose = [] {
    const char* v = std::getenv("ENGINE_FUZZ_VERBOSE");
    return v != nullptr && std::string(v) != "0";
  }();
  if (verbose) std::fprintf(stderr, message ? "refused: %s\n" : "accepted\n", message);
}

void check_refusal_message(const std::string& message) {
  if (message.empty()) finding("a refusal with an empty message");
  if (message.find('\n') != std::string::npos) finding("a refusal of more than one line: " + message);
  try {
    (void)nlohmann::json(message).dump();  // throws on invalid UTF-8
  } catch (const nlohmann::json::exception&) {
    const auto replace = nlohmann::json::error_handler_t::replace;
    finding("a refusal that is not valid UTF-8: " + nlohmann::json(message).dump(-1, ' ', false, replace));
  }
}

}  // namespace fuzz
