// Files and directories that appear whole or not at all: write under a
// temporary name, flush to disk, then rename into place (rename is atomic on
// POSIX file systems). An AtomicFile destroyed before commit() removes its
// temporary, leaving whatever was at the final path untouched.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

#include "launch/files/checksum.h"

namespace launch {

// What a committed file holds: its size and XXH3 checksum (launch/files/checksum.h),
// which a checkpoint's state.json records for every file.
struct WrittenFile {
  std::size_t bytes = 0;
  std::string xxh3;
};

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(const std::string& text) { write(text.data(), text.size()); }
  std::size_t bytes_written() const { return written_; }
  // XXH3 of every byte written so far (launch/files/checksum.h): a checkpoint
  // records it for each file, at no extra pass over the data.
  std::string checksum() const { return checksum_.hex(); }
  // Flushes, fsyncs and renames the temporary onto the final path.
  WrittenFile commit();

 private:
  std::string path_, temp_path_;
  std::FILE* file_ = nullptr;
  std::size_t written_ = 0;
  StreamingChecksum checksum_;
};

// Replaces directory `final_dir` by `temp_dir` (fully written): an existing
// final_dir is swapped with it atomically (renameat2 RENAME_EXCHANGE) and then
// removed, or, where the file system cannot swap, moved aside first and
// removed only after the new one is in place.
void commit_directory(const std::string& temp_dir, const std::string& final_dir);

// fsync of a directory, so a rename inside it survives a crash.
void sync_directory(const std::string& dir);

}  // namespace launch
