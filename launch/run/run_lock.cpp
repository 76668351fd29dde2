#include "launch/run/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "engine/check.h"

namespace launch {

namespace {

// What the holder wrote: "host NAME pid N", on one line (a hand-edited file
// could hold anything: at most one short line of it is shown).
std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  std::string holder(text, n > 0 ? static_cast<std::size_t>(n) : 0);
  holder = holder.substr(0, holder.find('\n'));
  return holder.empty() ? "a job that has not yet written its pid" : holder;
}

std::string this_holder() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  return "host " + std::string(host) + " pid " + std::to_string(getpid()) + "\n";
}

}  // namespace

RunFolderLock::RunFolderLock(const std::string& run_dir, const std::string& flag) {
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  ENGINE_CHECK(!error, flag, " '", run_dir, "': cannot create the folder: ", error.message());
  lock((std::filesystem::path(run_dir) / kFileName).string(), run_dir, flag);
}

RunFolderLock RunFolderLock::for_file(const std::string& file, const std::string& flag) {
  RunFolderLock held;
  held.lock(file + kFileSuffix, file, flag);
  return held;
}

void RunFolderLock::lock(const std::string& path, const std::string& what, const std::string& flag) {
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ENGINE_CHECK(fd_ >= 0, flag, " '", what, "': cannot open its lock file '", path, "': ", std::strerror(errno));
  // Not blocking: a second job is refused at once rather than left waiting
  // for the first to end.
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    const std::string holder = why == EWOULDBLOCK ? holder_of(fd_) : "";
    close(fd_);
    fd_ = -1;
    ENGINE_CHECK(why != EWOULDBLOCK, flag, " '", what, "' is in use by another job (", holder,
                 ", lock file '", path, "'): wait for it to end, or give another ", flag);
    ENGINE_FAIL(flag, " '", what, "': cannot lock '", path, "': ", std::strerror(why));
  }
  // Ours now: replace whatever an earlier holder wrote.
  const std::string holder = this_holder();
  // Best effort: should the note not be written, the lock holds all the
  // same; only a refusal's word on who holds it is missing.
  const bool noted =
      ftruncate(fd_, 0) == 0 && pwrite(fd_, holder.data(), holder.size(), 0) == static_cast<ssize_t>(holder.size());
  (void)noted;
}

RunFolderLock::~RunFolderLock() {
  // Closing drops the lock. The file stays: removing it would let a job that
  // opened it just before lock a file no longer in the folder.
  if (fd_ >= 0) close(fd_);
}

}  // namespace launch
