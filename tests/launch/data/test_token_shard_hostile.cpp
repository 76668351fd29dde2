// Hostile token shards: a FIFO or a directory given as a shard, a shard that
// shrinks while the loader reads it, and generated broken shards of both
// versions (truncated at many offsets, trailing bytes, bad
// magic/version/counts/bytes per token, out-of-vocabulary ids). Each
// must end in one engine::Error line naming the file, within a bounded time,
// never a hang or a crash. Every case runs in a forked child so that a hang
// is killed at its deadline and a crash (SIGBUS) is seen as one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/check.h"
#include "launch/data/data_loader.h"
#include "launch/data/token_shard.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

namespace launch {
namespace {

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("test_shard_hostile_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// How a forked body ended.
struct Outcome {
  bool timed_out = false;
  int signal = 0;       // the signal that killed the child, or 0
  bool threw = false;   // the body threw engine::Error
  std::string message;  // its what()
  double seconds = 0;
};

// Runs `body` in a forked child and waits at most `limit_s` for it: the child
// sends back the engine::Error it throws (or nothing), a hang is SIGKILLed
// at the deadline and a crash is reported as the signal that caused it.
Outcome run_forked(const std::function<void()>& body, double limit_s = 10) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(pipe_fds[0]);
    std::string text;
    char kind = 'n';
    try {
      body();
    } catch (const engine::Error& e) {
      kind = 'e';
      text = e.what();
    } catch (const std::exception& e) {
      kind = 'x';
      text = e.what();
    }
    [[maybe_unused]] ssize_t n = ::write(pipe_fds[1], &kind, 1);
    n = ::write(pipe_fds[1], text.data(), text.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  Outcome out;
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      out.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFSIGNALED(status) && !out.timed_out) out.signal = WTERMSIG(status);
  std::string received;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) received.append(buffer, n);
  ::close(pipe_fds[0]);
  if (!received.empty() && received[0] == 'e') {
    out.threw = true;
    out.message = received.substr(1);
  } else if (!received.empty()) {
    out.message = received.substr(1);
  }
  return out;
}

// The outcome is one engine::Error line naming `path`, in bounded time.
void expect_one_line_error(const Outcome& out, const std::string& path, const std::string& what) {
  EXPECT_FALSE(out.timed_out) << what << ": hung";
  EXPECT_EQ(out.signal, 0) << what << ": killed by signal " << out.signal;
  EXPECT_TRUE(out.threw) << what << ": no engine::Error (got '" << out.message << "')";
  EXPECT_THAT(out.message, HasSubstr(path)) << what;
  EXPECT_EQ(out.message.find('\n'), std::string::npos) << what << ": more than one line: " << out.message;
}

// A shard's bytes as written by hand: header[0..3] as given, then the ids at
// their own width (uint16 or uint32), whatever the header says.
template <typename Id>
std::vector<char> shard_bytes(std::int32_t magic, std::int32_t version, std::int32_t count,
                              const std::vector<Id>& tokens, std::int32_t header3 = 0) {
  std::vector<char> bytes(kShardHeaderBytes + sizeof(Id) * tokens.size(), 0);
  const std::int32_t header[4] = {magic, version, count, header3};
  std::memcpy(bytes.data(), header, sizeof header);
  std::memcpy(bytes.data() + kShardHeaderBytes, tokens.data(), sizeof(Id) * tokens.size());
  return bytes;
}

// A version 2 shard's bytes: uint32 ids, header[3] = 4 unless told otherwise.
std::vector<char> wide_shard_bytes(std::int32_t count, const std::vector<std::uint32_t>& tokens,
                                   std::int32_t bytes_per_token = kShardBytesPerTokenU32) {
  return shard_bytes(kShardMagic, kShardVersionU32, count, tokens, bytes_per_token);
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint16_t> small_tokens(int count) {
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) tokens[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i % 50);
  return tokens;
}

// The same ids, as a version 2 shard holds them.
std::vector<std::uint32_t> small_wide_tokens(int count) {
  const std::vector<std::uint16_t> narrow = small_tokens(count);
  return {narrow.begin(), narrow.end()};
}

// Writes each case and opens and reads it through the loader (vocabulary
// 256): every one is either refused with one line naming the file, or (when
// it is in fact the valid shard `good`) read without a crash; all in bounded
// time.
void expect_refused_unless_good(const TempDir& dir, const std::vector<std::pair<std::string, std::vector<char>>>& cases,
                                const std::vector<char>& good) {
  for (const auto& [name, bytes] : cases) {
    const std::string path = dir.file(name + ".bin");
    write_bytes(path, bytes);
    const Outcome out = run_forked(
        [&] {
          const DataLoader loader(path, 8, 256, true, 1);
          loader.verify_all();
          std::vector<std::int32_t> inputs(8 * 4), targets(8 * 4);
          loader.read_sequences(0, 4, inputs.data(), targets.data());
        },
        10);
    SCOPED_TRACE(name);
    EXPECT_FALSE(out.timed_out);
    EXPECT_EQ(out.signal, 0);
    EXPECT_LT(out.seconds, 5);
    if (out.threw) {
      EXPECT_THAT(out.message, HasSubstr(path));
      EXPECT_EQ(out.message.find('\n'), std::string::npos) << out.message;
    } else {
      EXPECT_EQ(out.message, "") << "a non-engine exception";
      // Only a well-formed shard with in-vocabulary ids may pass.
      EXPECT_TRUE(bytes == good) << "accepted a broken shard";
    }
  }
}

TEST(TokenShardHostile, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.file("fifo.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Outcome out = run_forked([&] { TokenShard shard(fifo); }, 5);
  expect_one_line_error(out, fifo, "FIFO");
  EXPECT_THAT(out.message, HasSubstr("not a regular file"));
  // Through the loader as well (a glob that matches the FIFO).
  const Outcome loader = run_forked([&] { DataLoader l(dir.file("fifo*.bin"), 4, 256, false, 0); }, 5);
  expect_one_line_error(loader, fifo, "FIFO through the loader");
}

TEST(TokenShardHostile, DirectoryIsRefused) {
  TempDir dir;
  fs::create_directories(dir.file("d.bin"));
  const Outcome out = run_forked([&] { TokenShard shard(dir.file("d.bin")); }, 5);
  expect_one_line_error(out, dir.file("d.bin"), "directory");
  EXPECT_THAT(out.message, HasSubstr("not a regular file"));
}

// `cp other.bin shard.bin` over a shard the run is reading truncates it in
// place: the loader must report the shard, not die of SIGBUS.
TEST(TokenShardHostile, ShardShrinkingUnderTheLoaderIsAnErrorNotACrash) {
  TempDir dir;
  const std::string path = dir.file("s.bin");
  write_token_shard(path, small_tokens(64 * 1024));  // 128 KiB of tokens: many pages
  const Outcome out = run_forked([&] {
    const DataLoader loader(path, 16, 256, false, 0);
    loader.verify_all();
    ASSERT_EQ(::truncate(path.c_str(), kShardHeaderBytes), 0);
    std::vector<std::int32_t> inputs(16 * 8), targets(16 * 8);
    // Sequences far past the new end of the file.
    loader.read_sequences(2000, 8, inputs.data(), targets.data());
  });
  expect_one_line_error(out, path, "shrunk shard");
  EXPECT_THAT(out.message, HasSubstr("shrank"));
}

TEST(TokenShardHostile, ShardShrinkingBeforeItsFirstScanIsAnError) {
  TempDir dir;
  const std::string path = dir.file("s.bin");
  write_token_shard(path, small_tokens(64 * 1024));
  const Outcome out = run_forked([&] {
    const DataLoader loader(path, 16, 256, false, 0);
    ASSERT_EQ(::truncate(path.c_str(), kShardHeaderBytes + 4096), 0);
    loader.verify_sequences(0, 1);  // scans the whole shard
  });
  expect_one_line_error(out, path, "shrunk shard, first scan");
}

// Generated hostile shards, each opened and read through the loader: every
// one is either refused with one line naming the file, or (when it is in
// fact a valid shard) read without a crash; all in bounded time.
TEST(TokenShardHostile, GeneratedBrokenShardsGiveOneLineErrors) {
  TempDir dir;
  const std::vector<std::uint16_t> tokens = small_tokens(300);
  const std::vector<char> good = shard_bytes(kShardMagic, kShardVersionU16, 300, tokens);
  std::vector<std::pair<std::string, std::vector<char>>> cases;
  // Truncated at many offsets: inside the header, at its end, inside the body.
  for (std::size_t cut : {0ul, 1ul, 3ul, 4ul, 8ul, 11ul, 12ul, 100ul, 1023ul, 1024ul, 1025ul, 1026ul, 1300ul,
                          good.size() - 2, good.size() - 1})
    cases.emplace_back("cut" + std::to_string(cut), std::vector<char>(good.begin(), good.begin() + cut));
  std::vector<char> longer = good;
  longer.push_back(0);
  cases.emplace_back("trailing", longer);
  cases.emplace_back("magic0", shard_bytes(0, kShardVersionU16, 300, tokens));
  cases.emplace_back("magicneg", shard_bytes(-1, kShardVersionU16, 300, tokens));
  cases.emplace_back("magicswapped", shard_bytes(__builtin_bswap32(kShardMagic), kShardVersionU16, 300, tokens));
  cases.emplace_back("version0", shard_bytes(kShardMagic, 0, 300, tokens));
  cases.emplace_back("version2", shard_bytes(kShardMagic, 2, 300, tokens));  // no bytes per token, uint16 body
  cases.emplace_back("version2width4", shard_bytes(kShardMagic, 2, 300, tokens, 4));  // uint16 body: truncated
  cases.emplace_back("version3", shard_bytes(kShardMagic, 3, 300, tokens));
  for (std::int32_t count : {-2147483647 - 1, -1, 0, 1, 299, 301, 2147483647, 1 << 30})
    cases.emplace_back("count" + std::to_string(count), shard_bytes(kShardMagic, kShardVersionU16, count, tokens));
  std::vector<std::uint16_t> bad_ids = tokens;
  bad_ids[123] = 65535;
  cases.emplace_back("oov", shard_bytes(kShardMagic, kShardVersionU16, 300, bad_ids));
  std::vector<std::uint16_t> bad_last = tokens;
  bad_last.back() = 256;
  cases.emplace_back("oovlast", shard_bytes(kShardMagic, kShardVersionU16, 300, bad_last));
  // Random garbage, seeded.
  std::mt19937 rng(7);
  for (int k = 0; k < 20; ++k) {
    std::vector<char> bytes = good;
    for (int flips = 0; flips < 8; ++flips)
      bytes[rng() % 12] = static_cast<char>(rng());  // magic, version, count
    bytes.resize(rng() % (good.size() + 64));
    cases.emplace_back("random" + std::to_string(k), bytes);
  }

  expect_refused_unless_good(dir, cases, good);
}

// The same for version 2 (uint32 ids): a bytes-per-token field that is not 4,
// sizes that would fit 2 bytes per token, ids past 16 bits and past 2^31.
TEST(TokenShardHostile, GeneratedBrokenVersion2ShardsGiveOneLineErrors) {
  TempDir dir;
  const std::vector<std::uint32_t> tokens = small_wide_tokens(300);
  const std::vector<char> good = wide_shard_bytes(300, tokens);
  {  // the writer makes exactly these bytes, and the loader takes them
    write_token_shard(dir.file("written.bin"), std::span<const std::uint32_t>(tokens));
    std::ifstream in(dir.file("written.bin"), std::ios::binary);
    ASSERT_TRUE(std::vector<char>(std::istreambuf_iterator<char>(in), {}) == good);
  }
  std::vector<std::pair<std::string, std::vector<char>>> cases;
  cases.emplace_back("good", good);
  for (std::size_t cut : {0ul, 12ul, 15ul, 16ul, 1023ul, 1024ul, 1025ul, 1027ul, 1028ul, 1024ul + 2 * 300,
                          1024ul + 2 * 300 + 1, good.size() - 4, good.size() - 1})
    cases.emplace_back("cut" + std::to_string(cut), std::vector<char>(good.begin(), good.begin() + cut));
  for (std::size_t extra : {1ul, 2ul, 3ul, 4ul, 1200ul}) {
    std::vector<char> longer = good;
    longer.resize(good.size() + extra, 0);
    cases.emplace_back("trailing" + std::to_string(extra), longer);
  }
  for (std::int32_t width : {0, 1, 2, 3, 5, 8, -4, 1 << 30})
    cases.emplace_back("width" + std::to_string(width), wide_shard_bytes(300, tokens, width));
  // A version 2 header over a uint16 body (a writer that got the version
  // wrong): 300 tokens' worth of bytes at 2 bytes each, 600 at 4.
  cases.emplace_back("narrowbody", shard_bytes(kShardMagic, kShardVersionU32, 300, small_tokens(300), 4));
  cases.emplace_back("narrowbody600", shard_bytes(kShardMagic, kShardVersionU32, 600, small_tokens(300), 4));
  // And the reverse: a version 1 header over a uint32 body.
  cases.emplace_back("widebody", shard_bytes(kShardMagic, kShardVersionU16, 300, tokens, 4));
  for (std::int32_t count : {-2147483647 - 1, -1, 0, 1, 150, 299, 301, 600, 2147483647, 1 << 29, 1 << 30})
    cases.emplace_back("count" + std::to_string(count), wide_shard_bytes(count, tokens));
  for (std::uint32_t id : {256u, 65535u, 65536u, 128255u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu}) {
    std::vector<std::uint32_t> bad = tokens;
    bad[123] = id;
    cases.emplace_back("oov" + std::to_string(id), wide_shard_bytes(300, bad));
  }
  std::mt19937 rng(11);
  for (int k = 0; k < 20; ++k) {
    std::vector<char> bytes = good;
    for (int flips = 0; flips < 8; ++flips)
      bytes[rng() % 16] = static_cast<char>(rng());  // magic, version, count, bytes per token
    bytes.resize(rng() % (good.size() + 64));
    cases.emplace_back("random" + std::to_string(k), bytes);
  }
  expect_refused_unless_good(dir, cases, good);
}

// The messages say what is wrong with a version 2 shard, in words.
TEST(TokenShardHostile, Version2ErrorsNameTheField) {
  TempDir dir;
  const std::vector<std::uint32_t> tokens = small_wide_tokens(10);
  auto message_for = [&](const std::string& name, const std::vector<char>& bytes) {
    const std::string path = dir.file(name);
    write_bytes(path, bytes);
    const Outcome out = run_forked([&] { DataLoader(path, 4, 256, false, 0).verify_all(); }, 5);
    expect_one_line_error(out, path, name);
    return out.message;
  };
  EXPECT_THAT(message_for("w.bin", wide_shard_bytes(10, tokens, 2)),
              HasSubstr("version 2 header says 2 bytes per token, expected 4"));
  std::vector<char> shorter = wide_shard_bytes(10, tokens);
  shorter.resize(shorter.size() - 20);
  EXPECT_THAT(message_for("t.bin", shorter), HasSubstr("truncated: header says 10 tokens of 4 bytes, so the file "
                                                     "should be 1064 bytes, but it is 1044"));
  std::vector<char> longer = wide_shard_bytes(10, tokens);
  longer.resize(longer.size() + 3);
  EXPECT_THAT(message_for("l.bin", longer), HasSubstr("3 trailing bytes"));
  std::vector<std::uint32_t> bad = tokens;
  bad[7] = 0xFFFFFFFFu;  // negative as an int32: must read as out of range, not as -1
  EXPECT_THAT(message_for("o.bin", wide_shard_bytes(10, bad)),
              HasSubstr("token 7 is 4294967295, outside the vocabulary of size 256"));
  EXPECT_THAT(message_for("v.bin", shard_bytes(kShardMagic, 3, 10, tokens, 4)),
              HasSubstr("unsupported version 3, expected 1 (uint16 ids) or 2 (uint32 ids)"));
}

}  // namespace
}  // namespace launch
