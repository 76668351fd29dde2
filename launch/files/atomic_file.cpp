#include "launch/files/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28, _GNU_SOURCE)
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/check.h"

namespace launch {

namespace fs = std::filesystem;

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  ENGINE_CHECK(file_ != nullptr, "cannot create '", temp_path_, "': ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  ENGINE_CHECK(file_ != nullptr, "write to '", path_, "' after commit");
  if (bytes == 0) return;
  ENGINE_CHECK(std::fwrite(data, 1, bytes, file_) == bytes, "writing '", temp_path_, "' failed: ",
               std::strerror(errno));
  written_ += bytes;
  checksum_.update(data, bytes);
}

WrittenFile AtomicFile::commit() {
  ENGINE_CHECK(file_ != nullptr, "'", path_, "' committed twice");
  const bool flushed = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const int saved_errno = errno;
  std::fclose(file_);
  file_ = nullptr;
  if (!flushed) {
    std::remove(temp_path_.c_str());
    ENGINE_FAIL("flushing '", temp_path_, "' failed: ", std::strerror(saved_errno));
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    std::remove(temp_path_.c_str());
    ENGINE_FAIL("renaming '", temp_path_, "' to '", path_, "' failed: ", std::strerror(e));
  }
  sync_directory(fs::path(path_).parent_path().empty() ? "." : fs::path(path_).parent_path().string());
  return {written_, checksum_.hex()};
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some file systems refuse directory fds
  ::fsync(fd);
  ::close(fd);
}

void commit_directory(const std::string& temp_dir, const std::string& final_dir) {
  std::error_code ec;
  if (fs::exists(final_dir)) {
    // Swap the two directories in one atomic step (Linux renameat2), so
    // final_dir never stops existing, then drop the old one now at temp_dir.
    if (::renameat2(AT_FDCWD, temp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      sync_directory(fs::path(final_dir).parent_path().string());
      fs::remove_all(temp_dir, ec);
      return;
    }
    // File systems without RENAME_EXCHANGE: move the old one aside first
    // (a crash between the two renames leaves it under the ".old" name).
    const std::string aside = final_dir + ".old." + std::to_string(::getpid());
    fs::rename(final_dir, aside, ec);
    ENGINE_CHECK(!ec, "moving the old '", final_dir, "' aside failed: ", ec.message());
    fs::rename(temp_dir, final_dir, ec);
    if (ec) {
      fs::rename(aside, final_dir);  // put the old one back
      ENGINE_FAIL("renaming '", temp_dir, "' to '", final_dir, "' failed: ", ec.message());
    }
    sync_directory(fs::path(final_dir).parent_path().string());
    fs::remove_all(aside, ec);
    return;
  }
  fs::rename(temp_dir, final_dir, ec);
  ENGINE_CHECK(!ec, "renaming '", temp_dir, "' to '", final_dir, "' failed: ", ec.message());
  sync_directory(fs::path(final_dir).parent_path().string());
}

}  // namespace launch
