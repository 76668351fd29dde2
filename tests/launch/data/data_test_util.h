// Shared by the tests of launch/data/ that need no trainer (test_data,
// test_token_shard_versions): a temporary folder and the message of an
// expected engine::Error.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

#include "engine/check.h"

namespace launch::data_test {

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
             std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs `body` and returns the engine::Error message it throws ("" and a
// test failure if it does not throw).
template <typename Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const engine::Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected engine::Error, nothing was thrown";
  return "";
}

}  // namespace launch::data_test
