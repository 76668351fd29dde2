// Hostile token shards: a FIFO or a directory given as a shard, a shard that
// shrinks while the loader reads it, and generated broken shards (truncated
// at many offsets, bad magic/version/counts, out-of-vocabulary ids). Each
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

std::vector<char> shard_bytes(std::int32_t magic, std::int32_t version, std::int32_t count,
                              const std::vector<std::uint16_t>& tokens) {
  std::vector<char> bytes(kShardHeaderBytes + 2 * tokens.size(), 0);
  const std::int32_t header[3] = {magic, version, count};
  std::memcpy(bytes.data(), header, sizeof header);
  std::memcpy(bytes.data() + kShardHeaderBytes, tokens.data(), 2 * tokens.size());
  return bytes;
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
  const std::vector<char> good = shard_bytes(kShardMagic, kShardVersion, 300, tokens);
  std::vector<std::pair<std::string, std::vector<char>>> cases;
  // Truncated at many offsets: inside the header, at its end, inside the body.
  for (std::size_t cut : {0ul, 1ul, 3ul, 4ul, 8ul, 11ul, 12ul, 100ul, 1023ul, 1024ul, 1025ul, 1026ul, 1300ul,
                          good.size() - 2, good.size() - 1})
    cases.emplace_back("cut" + std::to_string(cut), std::vector<char>(good.begin(), good.begin() + cut));
  std::vector<char> longer = good;
  longer.push_back(0);
  cases.emplace_back("trailing", longer);
  cases.emplace_back("magic0", shard_bytes(0, kShardVersion, 300, tokens));
  cases.emplace_back("magicneg", shard_bytes(-1, kShardVersion, 300, tokens));
  cases.emplace_back("magicswapped", shard_bytes(__builtin_bswap32(kShardMagic), kShardVersion, 300, tokens));
  cases.emplace_back("version0", shard_bytes(kShardMagic, 0, 300, tokens));
  cases.emplace_back("version2", shard_bytes(kShardMagic, 2, 300, tokens));
  for (std::int32_t count : {-2147483647 - 1, -1, 0, 1, 299, 301, 2147483647, 1 << 30})
    cases.emplace_back("count" + std::to_string(count), shard_bytes(kShardMagic, kShardVersion, count, tokens));
  std::vector<std::uint16_t> bad_ids = tokens;
  bad_ids[123] = 65535;
  cases.emplace_back("oov", shard_bytes(kShardMagic, kShardVersion, 300, bad_ids));
  std::vector<std::uint16_t> bad_last = tokens;
  bad_last.back() = 256;
  cases.emplace_back("oovlast", shard_bytes(kShardMagic, kShardVersion, 300, bad_last));
  // Random garbage, seeded.
  std::mt19937 rng(7);
  for (int k = 0; k < 20; ++k) {
    std::vector<char> bytes = good;
    for (int flips = 0; flips < 8; ++flips)
      bytes[rng() % 12] = static_cast<char>(rng());  // magic, version, count
    bytes.resize(rng() % (good.size() + 64));
    cases.emplace_back("random" + std::to_string(k), bytes);
  }

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

}  // namespace
}  // namespace launch
