#include "launch/formats/untrusted_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace launch {

namespace fs = std::filesystem;

std::string outside_folder_problem(const fs::path& folder, const std::string& name) {
  if (name.empty()) return "is an empty file name";
  const fs::path relative(name);
  if (relative.has_root_name() || relative.has_root_directory())
    return "is an absolute path (a folder's files are named relative to it)";
  for (const fs::path& part : relative)
    if (part == "..") return "has a '..' component (it would lead out of the folder)";
  // No '..' and not absolute, so only a symbolic link on the way can lead
  // out: compare where the name resolves with where the folder does.
  const fs::path dir = folder.empty() ? fs::path(".") : folder;
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(dir, ec);
  if (ec) return "cannot be resolved in the folder (" + ec.message() + ")";
  const fs::path target = fs::weakly_canonical(dir / relative, ec);
  if (ec) return "cannot be resolved in the folder (" + ec.message() + ")";
  const auto [in_base, in_target] = std::mismatch(base.begin(), base.end(), target.begin(), target.end());
  if (in_base != base.end())
    return "leads out of the folder through a symbolic link (to '" + target.string() + "')";
  if (in_target == target.end()) return "names the folder itself, not a file in it";
  return "";
}

std::string regular_file_problem(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  switch (status.type()) {
    case fs::file_type::regular: return "";
    case fs::file_type::not_found: return "does not exist";
    case fs::file_type::directory: return "is a directory, not a regular file";
    case fs::file_type::fifo: return "is a FIFO, not a regular file";
    case fs::file_type::socket: return "is a socket, not a regular file";
    case fs::file_type::character: return "is a character device, not a regular file";
    case fs::file_type::block: return "is a block device, not a regular file";
    default: break;
  }
  if (ec) return "cannot be examined (" + ec.message() + ")";
  return "is not a regular file";
}

ReadFile open_regular_file(const fs::path& path, std::string& why) {
  why = regular_file_problem(path);
  if (!why.empty()) return nullptr;
  // O_NONBLOCK: opening a FIFO swapped in since the check returns at once
  // instead of waiting for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot be opened (") + std::strerror(errno) + ")";
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    why = "is not a regular file";
    return nullptr;
  }
  // Reads of a regular file never block anyway; cleared so that the stream
  // sees an ordinary descriptor.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  ReadFile file(::fdopen(fd, "rb"));
  if (!file) {
    why = std::string("cannot be opened (") + std::strerror(errno) + ")";
    ::close(fd);
  }
  return file;
}

}  // namespace launch
