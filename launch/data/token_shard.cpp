#include "launch/data/token_shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "engine/check.h"

namespace launch {

// The format is little-endian on disk and we read its bytes straight into
// integers; a big-endian host would need byte swaps that nobody would test.
static_assert(std::endian::native == std::endian::little, "token shards are read as little-endian");

namespace {

std::string errno_text() { return std::strerror(errno); }

// Closes a file descriptor on every path out of a function.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  // Gives up ownership: the caller closes it.
  int release() { return std::exchange(fd_, -1); }
  // Closes now and reports failure (close can report a delayed write error).
  bool close_now() {
    const int fd = std::exchange(fd_, -1);
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

// pread until `bytes` are in: a short read means the file ended early, that
// is, it has shrunk since it was opened and validated.
void read_exactly(int fd, void* out, std::size_t bytes, std::int64_t offset, const std::string& path) {
  char* at = static_cast<char*>(out);
  const std::int64_t end = offset + static_cast<std::int64_t>(bytes);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, at, bytes, static_cast<off_t>(offset));
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    ENGINE_CHECK(got >= 0, "token shard ", path, ": read failed at byte ", offset, ": ", errno_text());
    if (got == 0) {
      struct stat info {};
      const std::int64_t now = ::fstat(fd, &info) == 0 ? static_cast<std::int64_t>(info.st_size) : -1;
      ENGINE_FAIL("token shard ", path, ": shrank while in use: it is now ", now, " bytes, but bytes up to ", end,
                  " were there when it was opened (was it overwritten during the run?)");
    }
    at += got;
    offset += got;
    bytes -= static_cast<std::size_t>(got);
  }
}

void write_all(int fd, const void* data, std::size_t bytes, const std::string& path) {
  const char* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd, at, bytes);
    if (written < 0 && errno == EINTR) continue;
    ENGINE_CHECK(written > 0, "token shard ", path, ": write failed: ", errno_text());
    at += written;
    bytes -= static_cast<std::size_t>(written);
  }
}

}  // namespace

std::int32_t shard_version_for_vocab(std::int64_t vocab_size) {
  ENGINE_CHECK(vocab_size >= 1 && vocab_size <= std::int64_t{std::numeric_limits<std::uint32_t>::max()} + 1,
               "token shard: vocabulary of ", vocab_size, " ids, expected 1 to 2^32");
  return vocab_size <= 65536 ? kShardVersionU16 : kShardVersionU32;
}

TokenShard::TokenShard(const std::string& path) : path_(path) {
  // stat before open: opening a FIFO for reading blocks until a writer comes,
  // which for a mistyped shard path is forever.
  struct stat info {};
  ENGINE_CHECK(::stat(path.c_str(), &info) == 0, "token shard ", path, ": cannot open for reading: ", errno_text());
  ENGINE_CHECK(S_ISREG(info.st_mode), "token shard ", path, ": not a regular file");
  // O_NONBLOCK: should the path be swapped for a FIFO between the stat and
  // the open, the open returns at once and the fstat below refuses it. It
  // changes nothing for a regular file.
  FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  ENGINE_CHECK(fd.get() >= 0, "token shard ", path, ": cannot open for reading: ", errno_text(),
               errno == EMFILE ? " (raise the open-file limit, ulimit -n: each shard holds one descriptor)" : "");
  ENGINE_CHECK(::fstat(fd.get(), &info) == 0, "token shard ", path, ": cannot stat: ", errno_text());
  ENGINE_CHECK(S_ISREG(info.st_mode), "token shard ", path, ": not a regular file");
  const std::int64_t file_bytes = info.st_size;
  ENGINE_CHECK(file_bytes >= kShardHeaderBytes, "token shard ", path, ": file is ", file_bytes,
               " bytes, smaller than the ", kShardHeaderBytes, "-byte header (truncated or not a shard)");

  std::int32_t header[kShardHeaderInts] = {};
  read_exactly(fd.get(), header, sizeof header, 0, path);
  ENGINE_CHECK(header[0] == kShardMagic, "token shard ", path, ": bad magic number ", header[0], ", expected ",
               kShardMagic, " (not an llm.c token shard)");
  ENGINE_CHECK(header[1] == kShardVersionU16 || header[1] == kShardVersionU32, "token shard ", path,
               ": unsupported version ", header[1], ", expected ", kShardVersionU16, " (uint16 ids) or ",
               kShardVersionU32, " (uint32 ids)");
  const std::int32_t version = header[1];
  const int bytes_per_token = version == kShardVersionU16 ? 2 : kShardBytesPerTokenU32;
  ENGINE_CHECK(version == kShardVersionU16 || header[3] == kShardBytesPerTokenU32, "token shard ", path,
               ": version ", version, " header says ", header[3], " bytes per token, expected ",
               kShardBytesPerTokenU32);
  const std::int64_t count = header[2];
  ENGINE_CHECK(count >= kShardMinTokens, "token shard ", path, ": header says ", count, " tokens, expected at least ",
               kShardMinTokens);
  const std::int64_t expected_bytes = kShardHeaderBytes + bytes_per_token * count;
  ENGINE_CHECK(file_bytes >= expected_bytes, "token shard ", path, ": truncated: header says ", count, " tokens of ",
               bytes_per_token, " bytes, so the file should be ", expected_bytes, " bytes, but it is ", file_bytes,
               " bytes");
  ENGINE_CHECK(file_bytes == expected_bytes, "token shard ", path, ": ", file_bytes - expected_bytes,
               " trailing bytes: header says ", count, " tokens of ", bytes_per_token, " bytes, so the file should be ",
               expected_bytes, " bytes, but it is ", file_bytes, " bytes");
  num_tokens_ = count;
  version_ = version;
  bytes_per_token_ = bytes_per_token;
  fd_ = fd.release();
}

TokenShard::~TokenShard() { release(); }

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      num_tokens_(std::exchange(other.num_tokens_, 0)),
      version_(other.version_),
      bytes_per_token_(other.bytes_per_token_) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
    version_ = other.version_;
    bytes_per_token_ = other.bytes_per_token_;
  }
  return *this;
}

void TokenShard::release() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  num_tokens_ = 0;
}

void TokenShard::read_tokens(std::int64_t first, std::int64_t count, std::uint32_t* out) const {
  ENGINE_CHECK(first >= 0 && count >= 0 && first <= num_tokens_ - count, "token shard ", path_, ": tokens [",
               first, ", ", first + count, ") are outside its ", num_tokens_, " tokens");
  const std::int64_t offset = kShardHeaderBytes + bytes_per_token_ * first;
  if (bytes_per_token_ == 4) {
    read_exactly(fd_, out, static_cast<std::size_t>(count) * 4, offset, path_);
    return;
  }
  // uint16 ids are read into the second half of `out` and widened in place,
  // front to back, so no buffer is allocated per call: id i is read from
  // bytes [2N + 2i, 2N + 2i + 2) before out[i] overwrites [4i, 4i + 4), and
  // 4i + 4 <= 2N + 2i + 2 for every i < N, so no id is overwritten unread.
  char* raw = reinterpret_cast<char*>(out) + 2 * count;
  read_exactly(fd_, raw, static_cast<std::size_t>(count) * 2, offset, path_);
  for (std::int64_t i = 0; i < count; ++i) {
    std::uint16_t id;
    std::memcpy(&id, raw + 2 * i, 2);
    out[i] = id;
  }
}

std::vector<std::uint32_t> TokenShard::read_all() const {
  std::vector<std::uint32_t> tokens(static_cast<std::size_t>(num_tokens_));
  read_tokens(0, num_tokens_, tokens.data());
  return tokens;
}

std::vector<std::string> expand_shard_pattern(const std::string& pattern) {
  ENGINE_CHECK(!pattern.empty(), "token shard pattern is empty, expected a file name or glob such as "
                                 "'data/corpus_train_*.bin'");
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> files;
  if (rc == 0) {
    for (std::size_t i = 0; i < matches.gl_pathc; ++i) files.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  ENGINE_CHECK(rc != GLOB_NOMATCH, "no file matches the token shard pattern '", pattern, "'");
  ENGINE_CHECK(rc == 0, "token shard pattern '", pattern, "': glob failed (",
               rc == GLOB_NOSPACE ? "out of memory" : "read error", ")");
  // glob() already sorts by the locale's collation; sort bytewise so the
  // order cannot depend on the LANG of whoever launched the job.
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

// Writes a shard of `count` ids of `bytes_per_token` bytes each, at `ids`.
void write_shard(const std::string& path, const void* ids, std::int64_t count, int bytes_per_token) {
  ENGINE_CHECK(count >= kShardMinTokens, "token shard ", path, ": refusing to write ", count,
               " tokens, expected at least ", kShardMinTokens);
  ENGINE_CHECK(count <= std::numeric_limits<std::int32_t>::max(), "token shard ", path, ": ", count,
               " tokens do not fit the int32 header, expected at most ", std::numeric_limits<std::int32_t>::max());

  std::int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = bytes_per_token == 2 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<std::int32_t>(count);
  if (bytes_per_token != 2) header[3] = bytes_per_token;

  const std::string tmp_path = path + ".tmp";
  {
    FdGuard fd(::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ENGINE_CHECK(fd.get() >= 0, "token shard ", tmp_path, ": cannot create: ", errno_text());
    try {
      write_all(fd.get(), header, sizeof(header), tmp_path);
      write_all(fd.get(), ids, static_cast<std::size_t>(count) * bytes_per_token, tmp_path);
      ENGINE_CHECK(::fsync(fd.get()) == 0, "token shard ", tmp_path, ": fsync failed: ", errno_text());
      ENGINE_CHECK(fd.close_now(), "token shard ", tmp_path, ": close failed: ", errno_text());
    } catch (...) {
      ::unlink(tmp_path.c_str());
      throw;
    }
  }
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const std::string reason = errno_text();
    ::unlink(tmp_path.c_str());
    ENGINE_FAIL("token shard ", path, ": cannot rename ", tmp_path, " into place: ", reason);
  }
  // Make the rename itself durable; failure here is harmless for correctness
  // (the data is already fsync'ed), so it is best-effort.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::filesystem::path dir = parent.empty() ? std::filesystem::path(".") : parent;
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace

void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  write_shard(path, tokens.data(), static_cast<std::int64_t>(tokens.size()), 2);
}

void write_token_shard(const std::string& path, std::span<const std::uint32_t> tokens) {
  write_shard(path, tokens.data(), static_cast<std::int64_t>(tokens.size()), kShardBytesPerTokenU32);
}

}  // namespace launch
