#include "launch/data/token_shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
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

// The format is little-endian on disk and we read it in place from the
// mapping; a big-endian host would need byte swaps that nobody would test.
static_assert(std::endian::native == std::endian::little, "token shards are read in place as little-endian");

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
  // Closes now and reports failure (close can report a delayed write error).
  bool close_now() {
    const int fd = std::exchange(fd_, -1);
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

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

TokenShard::TokenShard(const std::string& path) : path_(path) {
  FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ENGINE_CHECK(fd.get() >= 0, "token shard ", path, ": cannot open for reading: ", errno_text());

  struct stat info {};
  ENGINE_CHECK(::fstat(fd.get(), &info) == 0, "token shard ", path, ": cannot stat: ", errno_text());
  ENGINE_CHECK(S_ISREG(info.st_mode), "token shard ", path, ": not a regular file");
  const std::int64_t file_bytes = info.st_size;
  ENGINE_CHECK(file_bytes >= kShardHeaderBytes, "token shard ", path, ": file is ", file_bytes,
               " bytes, smaller than the ", kShardHeaderBytes, "-byte header (truncated or not a shard)");

  mapping_bytes_ = static_cast<std::size_t>(file_bytes);
  mapping_ = ::mmap(nullptr, mapping_bytes_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapping_ == MAP_FAILED) {
    mapping_ = nullptr;
    ENGINE_FAIL("token shard ", path, ": mmap of ", file_bytes, " bytes failed: ", errno_text());
  }
  // The mapping stays valid after the descriptor is closed (by FdGuard).

  // From here on a failed check must unmap: the destructor does not run for
  // an object whose constructor throws.
  try {
    const auto* header = static_cast<const std::int32_t*>(mapping_);
    ENGINE_CHECK(header[0] == kShardMagic, "token shard ", path, ": bad magic number ", header[0], ", expected ",
                 kShardMagic, " (not an llm.c token shard)");
    ENGINE_CHECK(header[1] == kShardVersion, "token shard ", path, ": unsupported version ", header[1],
                 ", expected ", kShardVersion);
    const std::int64_t count = header[2];
    ENGINE_CHECK(count >= kShardMinTokens, "token shard ", path, ": header says ", count,
                 " tokens, expected at least ", kShardMinTokens);
    const std::int64_t expected_bytes = kShardHeaderBytes + 2 * count;
    ENGINE_CHECK(file_bytes >= expected_bytes, "token shard ", path, ": truncated: header says ", count,
                 " tokens, so the file should be ", expected_bytes, " bytes, but it is ", file_bytes, " bytes");
    ENGINE_CHECK(file_bytes == expected_bytes, "token shard ", path, ": ", file_bytes - expected_bytes,
                 " trailing bytes: header says ", count, " tokens, so the file should be ", expected_bytes,
                 " bytes, but it is ", file_bytes, " bytes");
    num_tokens_ = count;
    tokens_ = reinterpret_cast<const std::uint16_t*>(static_cast<const char*>(mapping_) + kShardHeaderBytes);
  } catch (...) {
    release();
    throw;
  }
}

TokenShard::~TokenShard() { release(); }

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      num_tokens_(std::exchange(other.num_tokens_, 0)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
  }
  return *this;
}

void TokenShard::release() noexcept {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  tokens_ = nullptr;
  num_tokens_ = 0;
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

void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  const auto count = static_cast<std::int64_t>(tokens.size());
  ENGINE_CHECK(count >= kShardMinTokens, "token shard ", path, ": refusing to write ", count,
               " tokens, expected at least ", kShardMinTokens);
  ENGINE_CHECK(count <= std::numeric_limits<std::int32_t>::max(), "token shard ", path, ": ", count,
               " tokens do not fit the int32 header, expected at most ", std::numeric_limits<std::int32_t>::max());

  std::int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<std::int32_t>(count);

  const std::string tmp_path = path + ".tmp";
  {
    FdGuard fd(::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ENGINE_CHECK(fd.get() >= 0, "token shard ", tmp_path, ": cannot create: ", errno_text());
    try {
      write_all(fd.get(), header, sizeof(header), tmp_path);
      write_all(fd.get(), tokens.data(), tokens.size_bytes(), tmp_path);
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

}  // namespace launch
