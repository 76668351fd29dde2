// The two shard versions (launch/data/token_shard.h): version 1 (llm.c's,
// uint16 ids) and version 2 (uint32 ids, for vocabularies past 65536) round
// trip through the writer and the reader, the loader reads either and a mix
// of both, refuses an id at or past the model's vocabulary in either, and
// `prepare` writes version 1 exactly when the tokenizer's ids fit 16 bits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/data_loader.h"
#include "launch/data/token_shard.h"
#include "tests/launch/data/data_test_util.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace launch {
namespace {

using data_test::TempDir;
using data_test::error_of;

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::int32_t header_int(const std::vector<char>& bytes, int index) {
  std::int32_t value = 0;
  std::memcpy(&value, bytes.data() + 4 * index, 4);
  return value;
}

// Ids spread over [0, limit), the extremes included, from a fixed seed.
std::vector<std::uint32_t> spread_ids(std::size_t count, std::uint32_t limit, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> ids(count);
  for (std::uint32_t& id : ids) id = static_cast<std::uint32_t>(rng() % limit);
  ids[0] = 0;
  ids[1] = limit - 1;
  return ids;
}

TEST(TokenShardVersions, VersionForVocabulary) {
  EXPECT_EQ(shard_version_for_vocab(256), kShardVersionU16);
  EXPECT_EQ(shard_version_for_vocab(50257), kShardVersionU16);
  EXPECT_EQ(shard_version_for_vocab(65536), kShardVersionU16);  // ids 0..65535 fit 16 bits
  EXPECT_EQ(shard_version_for_vocab(65537), kShardVersionU32);
  EXPECT_EQ(shard_version_for_vocab(128256), kShardVersionU32);  // Llama 3
  EXPECT_EQ(shard_version_for_vocab(151936), kShardVersionU32);  // Qwen2
  EXPECT_THAT(error_of([] { shard_version_for_vocab(0); }), HasSubstr("vocabulary of 0 ids"));
}

TEST(TokenShardVersions, Version1RoundTripsAndIsLlmcs) {
  TempDir dir;
  const std::vector<std::uint32_t> wide = spread_ids(1001, 65536, 1);
  const std::vector<std::uint16_t> ids(wide.begin(), wide.end());
  write_token_shard(dir.file("v1.bin"), ids);
  const std::vector<char> bytes = read_bytes(dir.file("v1.bin"));
  ASSERT_EQ(bytes.size(), 1024u + 2 * ids.size());
  // llm.c's header: magic, version 1, count, and zeros after.
  EXPECT_EQ(header_int(bytes, 0), 20240520);
  EXPECT_EQ(header_int(bytes, 1), 1);
  EXPECT_EQ(header_int(bytes, 2), 1001);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header_int(bytes, i), 0) << i;
  const TokenShard shard(dir.file("v1.bin"));
  EXPECT_EQ(shard.version(), kShardVersionU16);
  EXPECT_EQ(shard.bytes_per_token(), 2);
  EXPECT_EQ(shard.read_all(), wide);
}

TEST(TokenShardVersions, Version2RoundTripsWithItsWidthInTheHeader) {
  TempDir dir;
  std::vector<std::uint32_t> ids = spread_ids(1001, 151936, 2);
  ids[2] = 65535;
  ids[3] = 65536;
  ids[4] = 0xFFFFFFFFu;  // any uint32 round trips; the loader is what checks the vocabulary
  write_token_shard(dir.file("v2.bin"), std::span<const std::uint32_t>(ids));
  EXPECT_FALSE(fs::exists(dir.file("v2.bin.tmp")));
  const std::vector<char> bytes = read_bytes(dir.file("v2.bin"));
  ASSERT_EQ(bytes.size(), 1024u + 4 * ids.size());
  EXPECT_EQ(header_int(bytes, 0), 20240520);
  EXPECT_EQ(header_int(bytes, 1), 2);
  EXPECT_EQ(header_int(bytes, 2), 1001);
  EXPECT_EQ(header_int(bytes, 3), 4);  // bytes per token
  for (int i = 4; i < 256; ++i) EXPECT_EQ(header_int(bytes, i), 0) << i;
  const TokenShard shard(dir.file("v2.bin"));
  EXPECT_EQ(shard.version(), kShardVersionU32);
  EXPECT_EQ(shard.bytes_per_token(), 4);
  ASSERT_EQ(shard.num_tokens(), 1001);
  EXPECT_EQ(shard.read_all(), ids);
  const std::vector<std::uint32_t> one = {7};
  EXPECT_THAT(error_of([&] { write_token_shard(dir.file("one.bin"), std::span<const std::uint32_t>(one)); }),
              HasSubstr("at least 2"));
}

// read_tokens widens version 1 ids in place: every range, odd starts and
// lengths included, gives the same ids as the whole shard.
TEST(TokenShardVersions, EveryRangeReadsTheSameIdsInBothVersions) {
  TempDir dir;
  const std::vector<std::uint32_t> wide = spread_ids(97, 65536, 3);
  const std::vector<std::uint16_t> narrow(wide.begin(), wide.end());
  write_token_shard(dir.file("v1.bin"), narrow);
  write_token_shard(dir.file("v2.bin"), std::span<const std::uint32_t>(wide));
  for (const char* name : {"v1.bin", "v2.bin"}) {
    const TokenShard shard(dir.file(name));
    for (std::int64_t first = 0; first <= 97; first += 7) {
      for (std::int64_t count : {0, 1, 2, 3, 17, 50}) {
        if (first + count > 97) continue;
        std::vector<std::uint32_t> got(static_cast<std::size_t>(count) + 1, 0xDEADBEEFu);
        shard.read_tokens(first, count, got.data());
        EXPECT_EQ(got.back(), 0xDEADBEEFu) << name << ": wrote past the range";
        got.pop_back();
        EXPECT_EQ(got, std::vector<std::uint32_t>(wide.begin() + first, wide.begin() + first + count))
            << name << " [" << first << ", " << first + count << ")";
      }
    }
  }
}

// One dataset of both versions (e.g. shards re-made with a wider tokenizer
// next to old ones): sequences follow the shards in order, ids past 16 bits
// included.
TEST(TokenShardVersions, LoaderReadsVersion1AndVersion2ShardsTogether) {
  TempDir dir;
  const std::vector<std::uint32_t> first = spread_ids(9, 65536, 4);
  const std::vector<std::uint32_t> second = spread_ids(9, 128256, 5);
  write_token_shard(dir.file("d_0.bin"), std::vector<std::uint16_t>(first.begin(), first.end()));
  write_token_shard(dir.file("d_1.bin"), std::span<const std::uint32_t>(second));
  const DataLoader loader(dir.file("d_*.bin"), 4, 128256, false, 0);
  ASSERT_EQ(loader.sequences_per_epoch(), 4);  // (9 - 1) / 4 = 2 per shard
  loader.verify_all();
  std::vector<std::int32_t> inputs(4 * 4), targets(4 * 4);
  loader.read_sequences(0, 4, inputs.data(), targets.data());
  for (int k = 0; k < 4; ++k) {
    const std::vector<std::uint32_t>& shard = k < 2 ? first : second;
    const int start = (k % 2) * 4;
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(inputs[k * 4 + t], static_cast<std::int32_t>(shard[start + t])) << k << " " << t;
      EXPECT_EQ(targets[k * 4 + t], static_cast<std::int32_t>(shard[start + t + 1])) << k << " " << t;
    }
  }
}

// What the trainer relies on (launch/run/input_checks.cpp checks validation
// shards whole before any step, Trainer::check_step_data each training shard
// before its first step): an id at or past the model's vocabulary in a
// version 2 shard is refused in one line naming the shard, the id and the
// vocabulary size, both by the whole-shard scan and by the read itself.
TEST(TokenShardVersions, IdOutsideTheVocabularyIsRefusedInVersion2) {
  TempDir dir;
  std::vector<std::uint32_t> ids(41, 128000);
  ids[29] = 128256;  // Llama 3's vocabulary is [0, 128256)
  write_token_shard(dir.file("v2.bin"), std::span<const std::uint32_t>(ids));
  const DataLoader loader(dir.file("v2.bin"), 8, 128256, false, 0);
  const std::string scan = error_of([&] { loader.verify_all(); });
  EXPECT_THAT(scan, HasSubstr("token shard " + dir.file("v2.bin") + ": token 29 is 128256, outside the vocabulary "
                              "of size 128256"));
  EXPECT_EQ(scan.find('\n'), std::string::npos);
  std::vector<std::int32_t> inputs(8 * 5), targets(8 * 5);
  loader.read_sequences(0, 3, inputs.data(), targets.data());  // tokens [0, 25): fine
  const std::string read = error_of([&] { loader.read_sequences(3, 1, inputs.data(), targets.data()); });
  EXPECT_THAT(read, HasSubstr("token 29 is 128256, outside the vocabulary of size 128256"));
  // A vocabulary of 16-bit size reading a version 2 shard: ids past 65535 are named as they are, not truncated.
  const std::string narrow = error_of([&] { DataLoader(dir.file("v2.bin"), 8, 50257, false, 0).verify_all(); });
  EXPECT_THAT(narrow, HasSubstr("token 0 is 128000, outside the vocabulary of size 50257"));
}

// ---- prepare chooses the version from the tokenizer's vocabulary ---------------

int run_command(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// tiny_bpe.json (600 ids) with one more added token at `id`: a vocabulary of id + 1.
std::string tokenizer_with_added_token(const std::string& path, std::int64_t id) {
  std::ifstream in(std::string(TOKENIZER_DATA_DIR) + "/tiny_bpe.json");
  nlohmann::json spec = nlohmann::json::parse(in);
  spec["added_tokens"].push_back({{"id", id}, {"content", "<|far|>"}, {"single_word", false}, {"lstrip", false},
                                  {"rstrip", false}, {"normalized", false}, {"special", true}});
  std::ofstream(path) << spec.dump();
  return path;
}

std::vector<std::int32_t> ids_of(const std::string& shard_path, std::int32_t* version) {
  const TokenShard shard(shard_path);
  *version = shard.version();
  const std::vector<std::uint32_t> ids = shard.read_all();
  return {ids.begin(), ids.end()};
}

TEST(TokenShardVersions, PrepareWritesVersion2OnlyWhenTheVocabularyPassesSixteenBits) {
  TempDir dir;
  const std::string text = "Crème brûlée <|far|> it's 1234 日本語\nsecond line <|far|>\n";
  std::ofstream(dir.file("a.txt")) << text;
  // vocab_size 65536 (largest id 65535): still version 1; 65537: version 2.
  for (const std::int64_t largest : {std::int64_t{65535}, std::int64_t{65536}, std::int64_t{151935}}) {
    SCOPED_TRACE(largest);
    const std::string json = tokenizer_with_added_token(dir.file("tok.json"), largest);
    const BpeTokenizer tokenizer = BpeTokenizer::from_file(json);
    ASSERT_EQ(tokenizer.vocab_size(), largest + 1);
    const std::string out = dir.file("out" + std::to_string(largest)), log = dir.file("log.txt");
    ASSERT_EQ(run_command(std::string(PREPARE_BIN) + " --input " + dir.file("a.txt") + " --output-dir " + out +
                          " --val-fraction 0 --tokenizer " + json + " >" + log + " 2>&1"),
              0)
        << std::string(read_bytes(log).data(), read_bytes(log).size());
    std::int32_t version = 0;
    const std::vector<std::int32_t> ids = ids_of(out + "/corpus_train_000000.bin", &version);
    EXPECT_EQ(version, largest < 65536 ? kShardVersionU16 : kShardVersionU32);
    std::vector<std::int32_t> expected{tokenizer.token_to_id(kEndOfText).value()};
    for (const std::int32_t id : tokenizer.encode(text)) expected.push_back(id);
    EXPECT_EQ(ids, expected);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), static_cast<std::int32_t>(largest)), 2);
    const std::vector<char> printed = read_bytes(log);
    EXPECT_EQ(std::string(printed.begin(), printed.end()).find("version 2 shards") != std::string::npos,
              largest >= 65536);
    // The loader takes them with the tokenizer's vocabulary, and refuses them with one id less.
    const DataLoader loader(out + "/corpus_train_*.bin", 4, tokenizer.vocab_size(), false, 0);
    loader.verify_all();
    EXPECT_THAT(error_of([&] { DataLoader(out + "/corpus_train_*.bin", 4, largest, false, 0).verify_all(); }),
                HasSubstr(" is " + std::to_string(largest) + ", outside the vocabulary of size " +
                          std::to_string(largest)));
  }
}

}  // namespace
}  // namespace launch
