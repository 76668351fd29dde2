// Tests of the data pipeline: shard format and its validation, the stateless
// loader (layout, epochs, shuffling, vocabulary checks), BatchLayout's
// layout independence, and the `prepare` program end to end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/bpe_trainer.h"
#include "launch/data/byte_level.h"
#include "launch/data/prepare_split.h"
#include "launch/data/byte_tokenizer.h"
#include "launch/data/data_loader.h"
#include "launch/data/token_shard.h"
#include "tests/launch/data/data_test_util.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace launch {
namespace {

using data_test::TempDir;
using data_test::error_of;

// Shard s's token i is s * 1000 + i: every token says where it came from.
std::vector<std::uint16_t> labelled_tokens(int shard, int count) {
  std::vector<std::uint16_t> tokens(count);
  for (int i = 0; i < count; ++i) tokens[i] = static_cast<std::uint16_t>(shard * 1000 + i);
  return tokens;
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void set_header_int(const std::string& path, int index, std::int32_t value) {
  std::vector<char> bytes = read_bytes(path);
  std::memcpy(bytes.data() + 4 * index, &value, 4);
  write_bytes(path, bytes);
}

// ---- token shards --------------------------------------------------------------

TEST(TokenShard, WriteThenReadRoundTrips) {
  TempDir dir;
  const std::vector<std::uint16_t> tokens = {0, 1, 2, 65535, 50256, 7};
  write_token_shard(dir.file("a.bin"), tokens);
  EXPECT_FALSE(fs::exists(dir.file("a.bin.tmp"))) << "the temporary file must be renamed away";
  EXPECT_EQ(fs::file_size(dir.file("a.bin")), 1024u + 2 * tokens.size());

  const TokenShard shard(dir.file("a.bin"));
  EXPECT_EQ(shard.path(), dir.file("a.bin"));
  ASSERT_EQ(shard.num_tokens(), 6);
  EXPECT_EQ(shard.version(), kShardVersionU16);
  EXPECT_EQ(shard.bytes_per_token(), 2);
  EXPECT_EQ(shard.read_all(), std::vector<std::uint32_t>(tokens.begin(), tokens.end()));

  TokenShard moved = TokenShard(dir.file("a.bin"));
  moved = TokenShard(std::move(moved));  // move-assign over itself via a temporary
  EXPECT_EQ(moved.num_tokens(), 6);
  EXPECT_EQ(moved.read_all()[3], 65535);
}

TEST(TokenShard, RefusesWrongMagic) {
  TempDir dir;
  write_token_shard(dir.file("a.bin"), labelled_tokens(0, 10));
  set_header_int(dir.file("a.bin"), 0, 12345);
  const std::string message = error_of([&] { TokenShard shard(dir.file("a.bin")); });
  EXPECT_THAT(message, HasSubstr("magic"));
  EXPECT_THAT(message, HasSubstr("12345"));
  EXPECT_THAT(message, HasSubstr("20240520"));
  EXPECT_THAT(message, HasSubstr(dir.file("a.bin")));
}

TEST(TokenShard, RefusesWrongVersion) {
  TempDir dir;
  write_token_shard(dir.file("a.bin"), labelled_tokens(0, 10));
  set_header_int(dir.file("a.bin"), 1, 7);
  const std::string message = error_of([&] { TokenShard shard(dir.file("a.bin")); });
  EXPECT_THAT(message, HasSubstr("version 7"));
  EXPECT_THAT(message, HasSubstr(dir.file("a.bin")));
}

TEST(TokenShard, RefusesTruncatedFile) {
  TempDir dir;
  write_token_shard(dir.file("a.bin"), labelled_tokens(0, 10));
  std::vector<char> bytes = read_bytes(dir.file("a.bin"));
  bytes.resize(bytes.size() - 3);
  write_bytes(dir.file("a.bin"), bytes);
  const std::string message = error_of([&] { TokenShard shard(dir.file("a.bin")); });
  EXPECT_THAT(message, HasSubstr("truncated"));
  EXPECT_THAT(message, HasSubstr("1044"));  // expected size: 1024 + 2 * 10
  EXPECT_THAT(message, HasSubstr("1041"));  // actual size

  // Shorter than the header itself.
  bytes.resize(100);
  write_bytes(dir.file("a.bin"), bytes);
  EXPECT_THAT(error_of([&] { TokenShard shard(dir.file("a.bin")); }), HasSubstr("truncated"));
}

TEST(TokenShard, RefusesTrailingBytes) {
  TempDir dir;
  write_token_shard(dir.file("a.bin"), labelled_tokens(0, 10));
  std::vector<char> bytes = read_bytes(dir.file("a.bin"));
  bytes.push_back('x');
  write_bytes(dir.file("a.bin"), bytes);
  const std::string message = error_of([&] { TokenShard shard(dir.file("a.bin")); });
  EXPECT_THAT(message, HasSubstr("trailing"));
  EXPECT_THAT(message, HasSubstr("1045"));
}

TEST(TokenShard, RefusesFewerThanTwoTokens) {
  TempDir dir;
  write_token_shard(dir.file("a.bin"), labelled_tokens(0, 2));
  set_header_int(dir.file("a.bin"), 2, 1);  // header now claims 1 token
  EXPECT_THAT(error_of([&] { TokenShard shard(dir.file("a.bin")); }), HasSubstr("at least 2"));
  const std::vector<std::uint16_t> one = {5};
  EXPECT_THAT(error_of([&] { write_token_shard(dir.file("b.bin"), one); }), HasSubstr("at least 2"));
}

TEST(TokenShard, RefusesMissingFileAndDirectory) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { TokenShard shard(dir.file("nope.bin")); }), HasSubstr("nope.bin"));
  EXPECT_THAT(error_of([&] { TokenShard shard(dir.path().string()); }), HasSubstr("not a regular file"));
}

TEST(TokenShard, PatternExpandsSortedAndRefusesNoMatch) {
  TempDir dir;
  for (const char* name : {"x_002.bin", "x_000.bin", "x_001.bin", "y_000.bin"}) {
    write_token_shard(dir.file(name), labelled_tokens(0, 4));
  }
  const std::vector<std::string> files = expand_shard_pattern(dir.file("x_*.bin"));
  EXPECT_EQ(files, (std::vector<std::string>{dir.file("x_000.bin"), dir.file("x_001.bin"), dir.file("x_002.bin")}));

  const std::string pattern = dir.file("z_*.bin");
  const std::string message = error_of([&] { expand_shard_pattern(pattern); });
  EXPECT_THAT(message, HasSubstr("no file matches"));
  EXPECT_THAT(message, HasSubstr(pattern));
}

// ---- data loader ---------------------------------------------------------------

// Four shards, T = 4: n_s = (23-1)/4 = 5, (9-1)/4 = 2, (3-1)/4 = 0, (10-1)/4 = 2,
// so N = 9 and shard 2 holds no sequence at all.
constexpr int kT = 4;
const std::vector<int> kShardSizes = {23, 9, 3, 10};

// (shard, first token in the shard) of each global sequence, by hand.
const std::vector<std::pair<int, int>> kExpectedSequences = {{0, 0}, {0, 4}, {0, 8}, {0, 12}, {0, 16},
                                                             {1, 0}, {1, 4}, {3, 0}, {3, 4}};

std::string write_labelled_dataset(const TempDir& dir) {
  for (std::size_t s = 0; s < kShardSizes.size(); ++s) {
    write_token_shard(dir.file("d_" + std::to_string(s) + ".bin"), labelled_tokens(static_cast<int>(s), kShardSizes[s]));
  }
  return dir.file("d_*.bin");
}

// Reads stream positions [first, first + count) and checks each sequence is
// the expected global sequence: inputs are T consecutive tokens of one shard
// starting at its j*T, and targets are the same shifted by one.
void expect_sequences(const DataLoader& loader, std::int64_t first, const std::vector<std::int64_t>& expected_g) {
  const auto count = static_cast<std::int64_t>(expected_g.size());
  std::vector<std::int32_t> inputs(count * kT, -1), targets(count * kT, -1);
  loader.read_sequences(first, count, inputs.data(), targets.data());
  for (std::int64_t k = 0; k < count; ++k) {
    const auto [shard, start] = kExpectedSequences[expected_g[k]];
    for (int t = 0; t < kT; ++t) {
      EXPECT_EQ(inputs[k * kT + t], shard * 1000 + start + t) << "position " << first + k << " t " << t;
      EXPECT_EQ(targets[k * kT + t], shard * 1000 + start + t + 1) << "position " << first + k << " t " << t;
    }
  }
}

TEST(DataLoader, SequencesFollowShardsInOrderAndNeverCrossThem) {
  TempDir dir;
  const DataLoader loader(write_labelled_dataset(dir), kT, 65536, /*shuffle=*/false, /*seed=*/0);
  EXPECT_EQ(loader.files().size(), 4u);
  EXPECT_EQ(loader.sequences_per_epoch(), 9);
  EXPECT_EQ(loader.total_tokens(), 23 + 9 + 3 + 10);
  expect_sequences(loader, 0, {0, 1, 2, 3, 4, 5, 6, 7, 8});

  // Every (input, target) pair comes from one shard: token / 1000 is the shard.
  std::vector<std::int32_t> inputs(9 * kT), targets(9 * kT);
  loader.read_sequences(0, 9, inputs.data(), targets.data());
  for (int k = 0; k < 9; ++k) {
    for (int t = 0; t < kT; ++t) {
      EXPECT_EQ(inputs[k * kT] / 1000, targets[k * kT + t] / 1000);
      EXPECT_EQ(targets[k * kT + t], inputs[k * kT + t] + 1) << "targets are inputs shifted by one";
    }
  }
}

TEST(DataLoader, StreamWrapsIntoTheNextEpoch) {
  TempDir dir;
  const DataLoader loader(write_labelled_dataset(dir), kT, 65536, false, 0);
  expect_sequences(loader, 7, {7, 8, 0, 1, 2});  // crosses from epoch 0 into epoch 1
  expect_sequences(loader, 9 * 5 + 4, {4});      // epoch 5
  EXPECT_EQ(loader.sequence_at(9 * 1000 + 3), 3);
  // Reading zero sequences is allowed and touches nothing.
  loader.read_sequences(0, 0, nullptr, nullptr);
}

TEST(DataLoader, IsStatelessAcrossCallOrder) {
  TempDir dir;
  const std::string pattern = write_labelled_dataset(dir);
  const DataLoader a(pattern, kT, 65536, true, 42);
  const DataLoader b(pattern, kT, 65536, true, 42);
  // Ask a for epochs out of order; b in order. Same answers.
  std::vector<std::int64_t> from_a(40), from_b(40);
  for (int p = 39; p >= 0; p -= 2) from_a[p] = a.sequence_at(p);
  for (int p = 0; p < 40; p += 2) from_a[p] = a.sequence_at(p);
  for (int p = 0; p < 40; ++p) from_b[p] = b.sequence_at(p);
  EXPECT_EQ(from_a, from_b);
}

TEST(DataLoader, ShuffleIsAPermutationPerEpochDeterministicAndDiffersBetweenEpochs) {
  TempDir dir;
  // 200 sequences in 3 shards, so "differs" is not left to chance.
  write_token_shard(dir.file("s_0.bin"), labelled_tokens(0, 4 * 70 + 1));
  write_token_shard(dir.file("s_1.bin"), labelled_tokens(1, 4 * 60 + 3));
  write_token_shard(dir.file("s_2.bin"), labelled_tokens(2, 4 * 70 + 1));
  const std::string pattern = dir.file("s_*.bin");
  const DataLoader loader(pattern, kT, 65536, true, 1234);
  const DataLoader same_seed(pattern, kT, 65536, true, 1234);
  const DataLoader other_seed(pattern, kT, 65536, true, 1235);
  const std::int64_t n = loader.sequences_per_epoch();
  ASSERT_EQ(n, 200);

  auto epoch_order = [&](const DataLoader& l, std::int64_t epoch) {
    std::vector<std::int64_t> order(n);
    for (std::int64_t i = 0; i < n; ++i) order[i] = l.sequence_at(epoch * n + i);
    return order;
  };
  std::vector<std::int64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);

  const auto epoch0 = epoch_order(loader, 0);
  const auto epoch1 = epoch_order(loader, 1);
  for (const auto& order : {epoch0, epoch1}) {
    std::vector<std::int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "every sequence exactly once per epoch";
    EXPECT_NE(order, identity) << "actually shuffled";
  }
  EXPECT_NE(epoch0, epoch1) << "each epoch has its own order";
  EXPECT_EQ(epoch0, epoch_order(same_seed, 0));
  EXPECT_EQ(epoch1, epoch_order(same_seed, 1));
  EXPECT_NE(epoch0, epoch_order(other_seed, 0));

  // The shuffled read returns exactly the sequence sequence_at names.
  const DataLoader plain(pattern, kT, 65536, false, 0);
  std::vector<std::int32_t> shuffled_in(n * kT), shuffled_tg(n * kT), plain_in(kT), plain_tg(kT);
  loader.read_sequences(n, n, shuffled_in.data(), shuffled_tg.data());  // epoch 1
  for (std::int64_t i = 0; i < n; ++i) {
    plain.read_sequences(epoch1[i], 1, plain_in.data(), plain_tg.data());
    EXPECT_TRUE(std::equal(plain_in.begin(), plain_in.end(), shuffled_in.begin() + i * kT));
    EXPECT_TRUE(std::equal(plain_tg.begin(), plain_tg.end(), shuffled_tg.begin() + i * kT));
  }
}

TEST(DataLoader, ConcurrentReadersOfDifferentEpochsAgree) {
  TempDir dir;
  const std::string pattern = write_labelled_dataset(dir);
  const DataLoader shared(pattern, kT, 65536, true, 7);
  const DataLoader reference(pattern, kT, 65536, true, 7);
  std::vector<std::int64_t> expected(9 * 20);
  for (std::size_t p = 0; p < expected.size(); ++p) expected[p] = reference.sequence_at(static_cast<std::int64_t>(p));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 50; ++round) {
        for (std::size_t p = w; p < expected.size(); p += 4) {
          if (shared.sequence_at(static_cast<std::int64_t>(p)) != expected[p]) ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(DataLoader, TokenOutsideVocabularyIsReportedWhenItsSequenceIsRead) {
  TempDir dir;
  std::vector<std::uint16_t> tokens(21, 65);
  tokens[13] = 300;  // inside sequence 3 only: tokens [12, 17)
  write_token_shard(dir.file("v.bin"), tokens);
  const DataLoader loader(dir.file("v.bin"), kT, 256, false, 0);
  std::vector<std::int32_t> inputs(3 * kT), targets(3 * kT);
  loader.read_sequences(0, 3, inputs.data(), targets.data());  // sequences 0..2 are fine
  const std::string message = error_of([&] { loader.read_sequences(2, 2, inputs.data(), targets.data()); });
  EXPECT_THAT(message, HasSubstr(dir.file("v.bin")));
  EXPECT_THAT(message, HasSubstr("token 13 is 300"));
  EXPECT_THAT(message, HasSubstr("vocabulary of size 256"));
}

TEST(DataLoader, RefusesDatasetWithoutOneWholeSequence) {
  TempDir dir;
  write_token_shard(dir.file("t_0.bin"), labelled_tokens(0, 4));
  write_token_shard(dir.file("t_1.bin"), labelled_tokens(1, 4));
  const std::string message = error_of([&] { DataLoader loader(dir.file("t_*.bin"), 4, 65536, false, 0); });
  EXPECT_THAT(message, HasSubstr("hold 8 tokens"));
  EXPECT_THAT(message, HasSubstr("needs at least 5"));
}

TEST(DataLoader, RefusesBadArguments) {
  TempDir dir;
  const std::string pattern = write_labelled_dataset(dir);
  EXPECT_THAT(error_of([&] { DataLoader loader(pattern, 0, 256, false, 0); }), HasSubstr("seq_len"));
  EXPECT_THAT(error_of([&] { DataLoader loader(pattern, 4, 0, false, 0); }), HasSubstr("vocab_size"));
  EXPECT_THAT(error_of([&] { DataLoader loader(dir.file("none_*.bin"), 4, 256, false, 0); }),
              HasSubstr("no file matches"));
  const DataLoader loader(pattern, kT, 65536, false, 0);
  std::int32_t buffer[kT];
  EXPECT_THAT(error_of([&] { loader.read_sequences(-1, 1, buffer, buffer); }), HasSubstr("first_sequence"));
}

TEST(DataLoader, FingerprintFollowsNamesAndSizesNotDirectories) {
  TempDir one, two;
  const DataLoader a(write_labelled_dataset(one), kT, 65536, false, 0);
  const DataLoader b(write_labelled_dataset(two), kT, 65536, true, 99);
  EXPECT_EQ(a.fingerprint().size(), 16u);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  write_token_shard(two.file("d_3.bin"), labelled_tokens(3, 11));  // one more token
  const DataLoader c(two.file("d_*.bin"), kT, 65536, false, 0);
  EXPECT_NE(a.fingerprint(), c.fingerprint());
}

// ---- batch layout --------------------------------------------------------------

TEST(BatchLayout, EveryLayoutReadsTheSingleProcessBatch) {
  constexpr std::int64_t kGlobal = 24;
  TempDir dir;
  write_token_shard(dir.file("b.bin"), labelled_tokens(0, 4 * 50 + 1));  // 50 sequences: steps wrap epochs
  const DataLoader loader(dir.file("b.bin"), kT, 65536, true, 3);

  for (std::int64_t step : {0, 1, 5}) {
    const BatchLayout single{kGlobal, 1, 0, kGlobal};
    single.validate();
    ASSERT_EQ(single.micro_batches(), 1);
    std::vector<std::int32_t> want_in(kGlobal * kT), want_tg(kGlobal * kT);
    loader.read_sequences(single.first_sequence(step, 0), kGlobal, want_in.data(), want_tg.data());

    for (int dp : {1, 2, 3, 4, 6}) {
      for (std::int64_t micro : {1, 2, 4}) {
        if ((kGlobal / dp) % micro != 0) continue;
        std::vector<std::int32_t> got_in, got_tg;
        std::vector<std::int64_t> positions;
        for (int rank = 0; rank < dp; ++rank) {  // rank-major concatenation
          const BatchLayout layout{kGlobal, dp, rank, micro};
          layout.validate();
          EXPECT_EQ(layout.micro_batches(), kGlobal / dp / micro);
          for (int m = 0; m < layout.micro_batches(); ++m) {
            const std::int64_t first = layout.first_sequence(step, m);
            for (std::int64_t k = 0; k < micro; ++k) positions.push_back(first + k);
            std::vector<std::int32_t> in(micro * kT), tg(micro * kT);
            loader.read_sequences(first, micro, in.data(), tg.data());
            got_in.insert(got_in.end(), in.begin(), in.end());
            got_tg.insert(got_tg.end(), tg.begin(), tg.end());
          }
        }
        std::vector<std::int64_t> want_positions(kGlobal);
        std::iota(want_positions.begin(), want_positions.end(), step * kGlobal);
        EXPECT_EQ(positions, want_positions) << "dp " << dp << " micro " << micro;
        EXPECT_EQ(got_in, want_in) << "dp " << dp << " micro " << micro;
        EXPECT_EQ(got_tg, want_tg) << "dp " << dp << " micro " << micro;
      }
    }
  }
}

TEST(BatchLayout, RefusesBadLayouts) {
  EXPECT_THAT(error_of([] { BatchLayout{10, 3, 0, 1}.validate(); }), HasSubstr("does not divide among dp_size 3"));
  EXPECT_THAT(error_of([] { BatchLayout{12, 2, 0, 4}.validate(); }), HasSubstr("micro-batches of 4"));
  EXPECT_THAT(error_of([] { BatchLayout{12, 2, 2, 1}.validate(); }), HasSubstr("dp_rank is 2"));
  EXPECT_THAT(error_of([] { BatchLayout{0, 1, 0, 1}.validate(); }), HasSubstr("global_sequences"));
  EXPECT_THAT(error_of([] { BatchLayout{4, 0, 0, 1}.validate(); }), HasSubstr("dp_size"));
  EXPECT_THAT(error_of([] { BatchLayout{4, 1, 0, 0}.validate(); }), HasSubstr("micro_batch"));
  const BatchLayout ok{12, 2, 1, 3};
  EXPECT_EQ(ok.first_sequence(2, 1), 2 * 12 + 6 + 3);
  EXPECT_THAT(error_of([&] { ok.first_sequence(0, 2); }), HasSubstr("micro-batch 2"));
}

// ---- byte tokenizer ------------------------------------------------------------

TEST(ByteTokenizer, EncodesBytesAndDecodesBack) {
  const ByteTokenizer tokenizer;
  const std::string text = "h\xC3\xA9llo \xE2\x82\xAC\n";  // "héllo €\n"
  const std::vector<std::uint16_t> ids = tokenizer.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0xC3);
  EXPECT_EQ(tokenizer.decode(std::span<const std::uint16_t>(ids)), text);
  const std::vector<std::int32_t> with_bad = {104, 300, -1, 105};
  EXPECT_EQ(tokenizer.decode(std::span<const std::int32_t>(with_bad)), "h\xEF\xBF\xBD\xEF\xBF\xBDi");
  EXPECT_EQ(tokenizer.vocab_size(), 256);
}

// ---- prepare, end to end -------------------------------------------------------

// Runs a shell command, returns its exit code.
int run_command(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string decode_shards(const std::string& pattern) {
  std::string text;
  for (const std::string& file : expand_shard_pattern(pattern)) {
    const TokenShard shard(file);
    const std::vector<std::uint32_t> ids = shard.read_all();
    text += ByteTokenizer().decode(std::vector<std::int32_t>(ids.begin(), ids.end()));
  }
  return text;
}

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

TEST(Prepare, ShardsDecodeBackToTheInputText) {
  TempDir dir;
  const std::string a = "First file.\nIt has two lines, and \xC3\xA9 in UTF-8.\n";
  const std::string b = "Second file, in a subdirectory; long enough to need several shards.\n";
  write_text(dir.file("in/a.txt"), a);
  write_text(dir.file("in/sub/b.txt"), b);
  write_bytes(dir.file("in/c.bin"), {'b', 'i', 'n', '\0', 'x'});  // not text: skipped
  const std::string log = dir.file("log.txt");
  const std::string prepare = PREPARE_BIN;

  // No validation split: train is every text file, in path order, unchanged.
  ASSERT_EQ(run_command(prepare + " --input " + dir.file("in") + " --output-dir " + dir.file("out") +
                        " --val-fraction 0 --shard-tokens 16 --name t >" + log + " 2>&1"),
            0)
      << std::string(read_bytes(log).data(), read_bytes(log).size());
  const std::string all = a + b;
  ASSERT_NE(all.size() % 16, 1u) << "a leftover single token would be dropped; change the texts";
  EXPECT_EQ(decode_shards(dir.file("out/t_train_*.bin")), all);
  EXPECT_EQ(expand_shard_pattern(dir.file("out/t_train_*.bin")).size(), (all.size() + 15) / 16);
  EXPECT_FALSE(fs::exists(dir.file("out/t_val_000000.bin")));
  const std::vector<char> log_bytes = read_bytes(log);
  EXPECT_THAT(std::string(log_bytes.begin(), log_bytes.end()), HasSubstr("c.bin"));  // the skip note
  EXPECT_THAT(std::string(log_bytes.begin(), log_bytes.end()),
              HasSubstr("prepare: 2 text file(s), " + std::to_string(all.size()) +
                        " bytes tokenized; 1 file(s) skipped (5 bytes)\n"));

  // With a split: each file's last quarter (rounded) goes to validation.
  ASSERT_EQ(run_command(prepare + " --input " + dir.file("in/a.txt") + " " + dir.file("in/sub/b.txt") +
                        " --output-dir " + dir.file("out") + " --val-fraction 0.25 --name s >" + log + " 2>&1"),
            0);
  auto head = [](const std::string& s) { return s.substr(0, s.size() - std::llround(0.25 * s.size())); };
  auto tail = [](const std::string& s) { return s.substr(s.size() - std::llround(0.25 * s.size())); };
  EXPECT_EQ(decode_shards(dir.file("out/s_train_*.bin")), head(a) + head(b));
  EXPECT_EQ(decode_shards(dir.file("out/s_val_*.bin")), tail(a) + tail(b));

  // Shards are usable by the loader with the byte vocabulary.
  const DataLoader loader(dir.file("out/s_train_*.bin"), 8, ByteTokenizer::kVocabSize, true, 0);
  EXPECT_GT(loader.sequences_per_epoch(), 0);
}

// The corpus size reported is what was tokenized: a skipped binary file's
// bytes are counted apart, not in it.
TEST(Prepare, SummaryCountsOnlyTokenizedBytes) {
  TempDir dir;
  const std::string text = "The only text in this directory.\n";
  write_text(dir.file("in/a.txt"), text);
  std::vector<char> binary(1000, 'x');
  binary[10] = '\0';
  write_bytes(dir.file("in/b.bin"), binary);
  const std::string log = dir.file("log.txt");
  ASSERT_EQ(run_command(std::string(PREPARE_BIN) + " --input " + dir.file("in") + " --output-dir " +
                        dir.file("out") + " >" + log + " 2>&1"),
            0)
      << std::string(read_bytes(log).data(), read_bytes(log).size());
  const std::vector<char> log_bytes = read_bytes(log);
  EXPECT_THAT(std::string(log_bytes.begin(), log_bytes.end()),
              HasSubstr("prepare: 1 text file(s), " + std::to_string(text.size()) +
                        " bytes tokenized; 1 file(s) skipped (1000 bytes)\n"));
}

// A folder that lists a text again through a symlink (fortune's "art.u8 ->
// art") or a hard link, and a file named twice: each file is read once, and
// one note says how many paths were left out.
TEST(Prepare, ReadsEachFileOnceThroughSymlinksHardLinksAndRepeats) {
  TempDir dir;
  const std::string a = "The art file.\n", b = "Another text.\n";
  write_text(dir.file("in/art"), a);
  write_text(dir.file("in/zeta"), b);
  fs::create_symlink("art", dir.file("in/art.u8"));
  fs::create_hard_link(dir.file("in/zeta"), dir.file("in/zeta.link"));
  const std::string log = dir.file("log.txt");
  ASSERT_EQ(run_command(std::string(PREPARE_BIN) + " --input " + dir.file("in") + " " + dir.file("in/art") +
                        " --output-dir " + dir.file("out") + " --val-fraction 0 --name t >" + log + " 2>&1"),
            0)
      << std::string(read_bytes(log).data(), read_bytes(log).size());
  EXPECT_EQ(decode_shards(dir.file("out/t_train_*.bin")), a + b);  // sorted paths: art, art.u8, zeta, zeta.link
  const std::vector<char> log_bytes = read_bytes(log);
  const std::string printed(log_bytes.begin(), log_bytes.end());
  EXPECT_THAT(printed, HasSubstr("prepare: note: 3 path(s) skipped as a file already listed (symlink, hard link or "
                                 "repeated path), e.g. '" + dir.file("in/art.u8") + "' (the same file as '" +
                                 dir.file("in/art") + "')\n"));
  EXPECT_THAT(printed, HasSubstr("prepare: 2 text file(s), " + std::to_string(a.size() + b.size()) + " bytes"));
}

TEST(Prepare, FailsWithNonZeroExitOnBadInput) {
  TempDir dir;
  const std::string prepare = PREPARE_BIN;
  const std::string quiet = " >/dev/null 2>&1";
  EXPECT_NE(run_command(prepare + " --input " + dir.file("missing.txt") + " --output-dir " + dir.file("out") + quiet),
            0);
  fs::create_directories(dir.file("empty"));
  EXPECT_NE(run_command(prepare + " --input " + dir.file("empty") + " --output-dir " + dir.file("out") + quiet), 0);
  write_text(dir.file("blank.txt"), "");
  EXPECT_NE(run_command(prepare + " --input " + dir.file("blank.txt") + " --output-dir " + dir.file("out") + quiet),
            0);
  EXPECT_NE(run_command(prepare + " --output-dir " + dir.file("out") + quiet), 0) << "--input is required";

  // Shards of the same name are not silently mixed with old ones.
  write_text(dir.file("a.txt"), "some text for a shard\n");
  const std::string base = prepare + " --input " + dir.file("a.txt") + " --output-dir " + dir.file("out");
  EXPECT_EQ(run_command(base + quiet), 0);
  EXPECT_NE(run_command(base + quiet), 0);
  EXPECT_EQ(run_command(base + " --overwrite" + quiet), 0);
}

// --tokenizer: the byte-level BPE's ids, <|endoftext|> before each document,
// and a bad tokenizer file refused on one line.
TEST(Prepare, TokenizerFileEncodesWithBpeAndStartsDocumentsWithEndOfText) {
  TempDir dir;
  const std::string tokenizer_file = std::string(TOKENIZER_DATA_DIR) + "/tiny_bpe.json";
  const BpeTokenizer tokenizer = BpeTokenizer::from_file(tokenizer_file);
  const std::string a = "Crème brûlée, it's 1234 日本語 😀\n  trailing  \n";
  const std::string b = "I'm sure they'll say we've done it.\n";
  write_text(dir.file("in/a.txt"), a);
  write_text(dir.file("in/b.txt"), b);
  const std::string log = dir.file("log.txt");
  ASSERT_EQ(run_command(std::string(PREPARE_BIN) + " --input " + dir.file("in") + " --output-dir " + dir.file("out") +
                        " --val-fraction 0 --tokenizer " + tokenizer_file + " >" + log + " 2>&1"),
            0)
      << std::string(read_bytes(log).data(), read_bytes(log).size());
  const std::int32_t eot = tokenizer.token_to_id(kEndOfText).value();
  std::vector<std::int32_t> expected{eot};
  for (const std::int32_t id : tokenizer.encode(a)) expected.push_back(id);
  expected.push_back(eot);
  for (const std::int32_t id : tokenizer.encode(b)) expected.push_back(id);
  const TokenShard shard(dir.file("out/corpus_train_000000.bin"));
  EXPECT_EQ(shard.version(), kShardVersionU16);  // a vocabulary of 600
  const std::vector<std::uint32_t> read = shard.read_all();
  const std::vector<std::int32_t> ids(read.begin(), read.end());
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tokenizer.decode(ids), "<|endoftext|>" + a + "<|endoftext|>" + b);
  const DataLoader loader(dir.file("out/corpus_train_*.bin"), 4, tokenizer.vocab_size(), false, 0);
  EXPECT_GT(loader.sequences_per_epoch(), 0);

  write_text(dir.file("bad.json"), R"({"model": {"type": "BPE", "vocab": {"a": 0}}})");
  EXPECT_NE(run_command(std::string(PREPARE_BIN) + " --input " + dir.file("in") + " --output-dir " +
                        dir.file("out2") + " --tokenizer " + dir.file("bad.json") + " >" + log + " 2>&1"),
            0);
  const std::vector<char> bytes = read_bytes(log);
  const std::string message(bytes.begin(), bytes.end());
  EXPECT_THAT(message, HasSubstr("prepare: error: "));
  EXPECT_THAT(message, HasSubstr("tokenizer '" + dir.file("bad.json") + "': missing model.merges (a list)"));
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 1) << message;
}

// --threads: blocks are encoded on several threads and written in order, so
// the shards are byte-identical for every thread count, with the byte
// tokenizer and with a BPE, over files of several blocks (1 MiB each) and
// files smaller than one.
TEST(Prepare, ShardsAreTheSameForEveryThreadCount) {
  TempDir dir;
  std::mt19937 random(7);
  const std::vector<std::string> words{"the", "cat's", "caf\xC3\xA9", "1234", "  spaced", "end.", "\xF0\x9F\x98\x80"};
  auto text_of = [&](std::size_t bytes) {
    std::string text;
    while (text.size() < bytes) {
      for (int w = 0; w < 12; ++w) text += words[random() % words.size()] + (w % 5 == 4 ? "\n\n" : " ");
      text += "line" + std::to_string(random() % 1000) + "\n";
    }
    return text;
  };
  const std::vector<std::size_t> sizes{(5u << 20) / 2, 300, (3u << 20) / 2, 20, 4u << 20};  // 8 blocks, 5 files
  for (std::size_t i = 0; i < sizes.size(); ++i) write_text(dir.file("in/f" + std::to_string(i)), text_of(sizes[i]));
  const std::string tokenizer_file = std::string(TOKENIZER_DATA_DIR) + "/tiny_bpe.json";
  for (const std::string& tokenizer : {std::string(), " --tokenizer " + tokenizer_file}) {
    std::vector<std::string> shard_bytes[2];
    for (const int threads : {1, 3}) {
      const std::string out = dir.file("out" + std::to_string(threads) + (tokenizer.empty() ? "b" : "t"));
      const std::string log = dir.file("log.txt");
      ASSERT_EQ(run_command(std::string(PREPARE_BIN) + " --input " + dir.file("in") + " --output-dir " + out +
                            " --shard-tokens 1000000 --threads " + std::to_string(threads) + tokenizer + " >" + log +
                            " 2>&1"),
                0)
          << std::string(read_bytes(log).data(), read_bytes(log).size());
      for (const char* split : {"train", "val"})
        for (const std::string& shard : expand_shard_pattern(out + "/corpus_" + split + "_*.bin")) {
          const std::vector<char> bytes = read_bytes(shard);
          shard_bytes[threads == 1 ? 0 : 1].emplace_back(bytes.begin(), bytes.end());
        }
    }
    EXPECT_GT(shard_bytes[0].size(), 3u) << "several shards";
    EXPECT_TRUE(shard_bytes[0] == shard_bytes[1]) << "--threads 3 wrote other shards than --threads 1" << tokenizer;
  }
  EXPECT_NE(run_command(std::string(PREPARE_BIN) + " --input " + dir.file("in") + " --output-dir " +
                        dir.file("out0") + " --threads 0 >/dev/null 2>&1"),
            0);
}

// --train-tokenizer: a BPE learned from the training split only, written next
// to the shards (or to --tokenizer-out), equal to the trainer's on that text,
// and the shards encoded with it; the validation split starts at a line start.
TEST(Prepare, TrainTokenizerLearnsFromTheTrainingSplitAndEncodesWithIt) {
  TempDir dir;
  std::string a, b;
  for (int i = 0; i < 40; ++i) a += "Line " + std::to_string(i) + " of the first file: it's caf\xC3\xA9 time.\n";
  for (int i = 0; i < 30; ++i) b += "The second file says hello, world number " + std::to_string(i * 7) + ".\n";
  b += "VALIDATIONONLYWORD ends the second file\n";
  write_text(dir.file("in/a.txt"), a);
  write_text(dir.file("in/b.txt"), b);
  const std::string log = dir.file("log.txt");
  const std::string base = std::string(PREPARE_BIN) + " --input " + dir.file("in") + " --val-fraction 0.1";
  ASSERT_EQ(run_command(base + " --output-dir " + dir.file("out") + " --train-tokenizer 300 >" + log + " 2>&1"), 0)
      << std::string(read_bytes(log).data(), read_bytes(log).size());
  const std::string file = dir.file("out/corpus_tokenizer.json");
  const BpeTokenizer tokenizer = BpeTokenizer::from_file(file);
  EXPECT_EQ(tokenizer.vocab_size(), 300);
  EXPECT_EQ(tokenizer.token_to_id(kEndOfText), 0);

  // The validation text: each file's last lines from the 10% point on, whole.
  auto val_start = [](const std::string& s) {
    return s.find('\n', s.size() - std::llround(0.1 * s.size()) - 1) + 1;
  };
  const std::string train_text = a.substr(0, val_start(a)) + b.substr(0, val_start(b));
  const std::string val_text = a.substr(val_start(a)) + b.substr(val_start(b));
  BpeTrainer trainer;
  trainer.add_text(a.substr(0, val_start(a)));
  trainer.add_text(b.substr(0, val_start(b)));
  const std::vector<char> written = read_bytes(file);
  EXPECT_EQ(std::string(written.begin(), written.end()), trainer.train(300).to_json());

  auto ids_of = [&](const std::string& pattern) {
    std::vector<std::int32_t> ids;
    for (const std::string& shard_file : expand_shard_pattern(dir.file(pattern))) {
      const TokenShard shard(shard_file);
      const std::vector<std::uint32_t> read = shard.read_all();
      ids.insert(ids.end(), read.begin(), read.end());
    }
    return ids;
  };
  const std::vector<std::int32_t> train_ids = ids_of("out/corpus_train_*.bin"), val_ids = ids_of("out/corpus_val_*.bin");
  EXPECT_EQ(tokenizer.decode(train_ids), std::string(kEndOfText) + a.substr(0, val_start(a)) + kEndOfText +
                                             b.substr(0, val_start(b)));
  EXPECT_EQ(tokenizer.decode(val_ids), val_text);
  EXPECT_NE(val_text.find("VALIDATIONONLYWORD"), std::string::npos);
  EXPECT_EQ(train_text.find("VALIDATIONONLYWORD"), std::string::npos);

  // An existing tokenizer file is not silently replaced; --tokenizer-out puts it elsewhere; --overwrite replaces.
  const std::string again = base + " --output-dir " + dir.file("out") + " --train-tokenizer 300";
  EXPECT_NE(run_command(again + " >" + log + " 2>&1"), 0);
  const std::vector<char> refused = read_bytes(log);
  EXPECT_THAT(std::string(refused.begin(), refused.end()), HasSubstr("already exists"));
  EXPECT_EQ(run_command(again + " --overwrite >" + log + " 2>&1"), 0);
  EXPECT_EQ(run_command(base + " --output-dir " + dir.file("out2") + " --train-tokenizer 300 --tokenizer-out " +
                        dir.file("elsewhere.json") + " >" + log + " 2>&1"),
            0);
  EXPECT_TRUE(fs::exists(dir.file("elsewhere.json")));
  EXPECT_FALSE(fs::exists(dir.file("out2/corpus_tokenizer.json")));

  // Sizes it cannot learn are refused on one line, naming the problem.
  for (const auto& [size, says] : std::vector<std::pair<std::string, std::string>>{
           {"256", "--train-tokenizer 256: a byte-level BPE needs 257 tokens at least"},
           {"60000", "a byte-level BPE of 60000 tokens: the text gives only"}}) {
    EXPECT_NE(run_command(base + " --output-dir " + dir.file("out3") + " --train-tokenizer " + size + " >" + log +
                          " 2>&1"),
              0);
    const std::vector<char> bytes = read_bytes(log);
    const std::string message(bytes.begin(), bytes.end());
    EXPECT_THAT(message, HasSubstr("prepare: error: " + says)) << message;
    EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 1) << message;
  }
}

}  // namespace
}  // namespace launch

// prepare's cuts with a BPE (blocks of 1 MiB and each block's validation
// start) fall where GPT-2's pre-tokenizer splits anyway, so the parts
// pre-tokenize exactly as the whole file does. The text is built so that a cut
// at any line start would land inside whitespace runs ("a\n\n b",
// indented lines) most of the time (issue 38: a whitespace run cut in two
// changed 3 of 19.5M ids).
TEST(PrepareSplit, BpeCutsPreTokenizeAsTheWholeText) {
  std::mt19937 rng(38);
  const char* lines[] = {"a\n\n b", "  indented line", "\t\ttabbed", "word", "x\n \n y", "", "   ", "end."};
  std::string text;
  while (text.size() < (5u << 19)) {  // 2.5 MiB: three blocks
    text += lines[rng() % (sizeof lines / sizeof lines[0])];
    text += '\n';
  }
  launch::prepare::Options options;
  options.tokenizer = "tokenizer.json";  // any: bpe() is what matters
  options.val_fraction = 0.1;
  std::vector<std::string_view> parts;
  launch::prepare::for_each_block(text, options, [&](const launch::prepare::Block& b) {
    parts.push_back(b.train);
    parts.push_back(b.val);
  });
  ASSERT_GE(parts.size(), 6u);
  const launch::Gpt2Splitter splitter;
  const auto pieces = [&](std::string_view t) {
    std::vector<std::string> out;
    splitter.split(t, [&](std::string_view p) { out.emplace_back(p); });
    return out;
  };
  std::vector<std::string> joined;
  std::size_t at = 0;
  for (std::string_view part : parts) {
    ASSERT_EQ(part.data(), text.data() + at) << "the parts tile the text in order";
    at += part.size();
    for (std::string& p : pieces(part)) joined.push_back(std::move(p));
  }
  ASSERT_EQ(at, text.size());
  EXPECT_TRUE(joined == pieces(text)) << "a cut changed the pre-tokens";
}
