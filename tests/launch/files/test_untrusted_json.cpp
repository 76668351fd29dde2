// launch/files/untrusted_json.h: the bounds every JSON from a user or from
// disk passes before a parser sees it: nesting counted outside strings only,
// the size refused before a file is read, each refusal one line naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/check.h"
#include "launch/files/untrusted_json.h"
#include "tests/support/hostile_json.h"

namespace fs = std::filesystem;

namespace {

std::string refusal(const std::string& text, std::size_t max_bytes = launch::kMaxConfigJsonBytes) {
  try {
    launch::check_json_text(text, "file 'x.json'", max_bytes);
  } catch (const engine::Error& e) {
    return e.what();
  }
  return "";
}

TEST(UntrustedJson, CountsNestingOutsideStringsOnly) {
  EXPECT_EQ(launch::json_nesting_depth("3"), 0u);
  EXPECT_EQ(launch::json_nesting_depth(R"({"a": [1, {"b": [[]]}]})"), 5u);
  EXPECT_EQ(launch::json_nesting_depth(R"({"a": "[[[[{{{{"})"), 1u) << "brackets inside a string";
  EXPECT_EQ(launch::json_nesting_depth(R"({"a": "\"[[[", "b": [1]})"), 2u) << "an escaped quote does not end the string";
  EXPECT_EQ(launch::json_nesting_depth(R"({"a": "\\", "b": [[1]]})"), 3u) << "an escaped backslash does";
  EXPECT_EQ(launch::json_nesting_depth("]]]]["), 1u) << "closers never go below zero";
}

TEST(UntrustedJson, RefusesDeeperThanTheLimitInOneLine) {
  EXPECT_EQ(refusal(engine_test::nested(launch::kMaxJsonDepth, '[')), "");
  const std::string too_deep = refusal(engine_test::nested(launch::kMaxJsonDepth + 1, '{'));
  EXPECT_NE(too_deep.find("file 'x.json': JSON nested more than 128 levels deep"), std::string::npos) << too_deep;
  EXPECT_EQ(too_deep.find('\n'), std::string::npos) << too_deep;
  // A million levels are refused after reading the first 129 brackets: no time, no memory.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(refusal(engine_test::nested(1000000, '[')), "");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(UntrustedJson, RefusesTextOverItsKindsSize) {
  const std::string message = refusal(std::string(1001, ' '), 1000);
  EXPECT_NE(message.find("file 'x.json': 1001 bytes of JSON, more than the 1000"), std::string::npos) << message;
  EXPECT_EQ(refusal(std::string(1000, ' '), 1000), "");
}

TEST(UntrustedJson, ReadsAFileOnlyWhenItsSizeIsWithinBounds) {
  const fs::path dir = fs::temp_directory_path() / ("untrusted_json_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path small = dir / "small.json", huge = dir / "huge.json";
  std::ofstream(small) << R"({"a": [1, 2]})";
  EXPECT_EQ(launch::read_json_file(small.string(), "small", 100), R"({"a": [1, 2]})");
  // A sparse file of 1 GiB: refused by its size before a byte is read.
  std::ofstream(huge).close();
  fs::resize_file(huge, std::uintmax_t{1} << 30);
  try {
    launch::read_json_file(huge.string(), "config file 'huge.json'", launch::kMaxConfigJsonBytes);
    ADD_FAILURE() << "a 1 GiB file was read";
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("config file 'huge.json': 1073741824 bytes of JSON"), std::string::npos)
        << e.what();
  }
  try {
    launch::read_json_file((dir / "missing.json").string(), "config file 'missing.json'", 100);
    ADD_FAILURE() << "a missing file was read";
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("config file 'missing.json': cannot read"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// The generator the parsers' fuzz tests share makes what it says.
TEST(UntrustedJson, HostileVariantsCoverEachKind) {
  const auto variants = engine_test::hostile_json_variants(R"({"a": 1, "b": {"c": "x"}})");
  auto has = [&](const std::string& part) {
    for (const auto& v : variants)
      if (v.name.find(part) != std::string::npos) return true;
    return false;
  };
  for (const char* kind : {"nested 100000", "replaced by 1e400", "replaced by 18446744073709551616", "truncated at",
                           "flipped", "NUL bytes"})
    EXPECT_TRUE(has(kind)) << kind;
  std::size_t deep = 0;
  for (const auto& v : variants) deep = std::max(deep, launch::json_nesting_depth(v.text));
  EXPECT_GE(deep, 100000u);
}

}  // namespace

// printable_text: what a message quotes of a file prints on one line as valid
// UTF-8. nlohmann-json's parse errors quote the bytes last read, which is how
// tests/fuzz found tokenizer.json, cluster file and --config refusals that
// were not valid UTF-8.
TEST(UntrustedJson, PrintableTextIsOneLineOfValidUtf8) {
  EXPECT_EQ(launch::printable_text("plain 'text' \"quoted\" back\\slash"), "plain 'text' \"quoted\" back\\slash");
  EXPECT_EQ(launch::printable_text("caf\xC3\xA9 \xE6\x9D\xB1"), "caf\xC3\xA9 \xE6\x9D\xB1");  // valid UTF-8 kept
  EXPECT_EQ(launch::printable_text("a\nb\tc\x01"), "a\\nb\\tc\\u0001");
  EXPECT_EQ(launch::printable_text("bad \xFF\xC3 end"), "bad \xEF\xBF\xBD\xEF\xBF\xBD end");  // U+FFFD each
  EXPECT_EQ(launch::printable_text(""), "");
  std::string message;
  try {
    (void)nlohmann::json::parse(std::string("{\"key\"\xFF: 1}"));
  } catch (const nlohmann::json::exception& e) {
    message = e.what();
  }
  ASSERT_NE(message.find("last read"), std::string::npos) << message;
  EXPECT_THROW((void)nlohmann::json(message).dump(), nlohmann::json::exception) << "nlohmann quotes the raw byte";
  EXPECT_NO_THROW((void)nlohmann::json(launch::printable_text(message)).dump());
}
