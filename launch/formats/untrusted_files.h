// Files named by untrusted input. A checkpoint folder or a model folder may
// come from anywhere, and the file names its own files give (a checkpoint's
// state.json and rank indexes, a sharded model's weight_map) are as
// untrusted as the rest: a name must not lead out of its folder, whether by
// a '..', an absolute path or a symbolic link, or a resume could read
// /etc/passwd or another run's files. And a model or checkpoint file must be
// a regular file: a FIFO blocks its reader forever, a directory or a device
// fails confusingly or reads garbage.
//
// The checks return why a name or path is refused ("" when it is not), so
// that each reader throws its own error type with its own context.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace launch {

// Why `name`, a file name read from a file of `folder`, does not name a file
// inside `folder` ("" when it does): empty, absolute, with a '..'
// component, or resolving (through a symbolic link on the way) outside the
// folder. A link that stays inside the folder is fine. `name` need not exist.
std::string outside_folder_problem(const std::filesystem::path& folder, const std::string& name);

// Why `path` cannot be read as a regular file ("" when it can): "does not
// exist", or "is a directory, not a regular file" (a FIFO, a socket, a
// character or block device, likewise). Follows a symbolic link to its
// target (outside_folder_problem() decides whether a link may be followed).
std::string regular_file_problem(const std::filesystem::path& path);

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using ReadFile = std::unique_ptr<std::FILE, FileCloser>;

// `path` opened for reading if it is a regular file; else null, with `why`
// saying why ("does not exist", "is a FIFO, not a regular file", or the
// system's error). The open never blocks: it is non-blocking, and the file
// checked again once open, so a file swapped for a FIFO after a check
// cannot block the reader either.
ReadFile open_regular_file(const std::filesystem::path& path, std::string& why);

}  // namespace launch
