// `prepare`'s input texts: the files that --input names or holds, and their
// text, skipping what is not text (launch/prepare_main.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace launch::prepare {

struct InputFile {
  std::filesystem::path path;
  std::int64_t bytes;
  bool named_on_command_line;  // errors on these are fatal; files found in a directory are skipped
};

struct InputFiles {
  std::vector<InputFile> files;
  // Paths left out because they are a file already listed (a symlink or a
  // hard link to it, or a path given twice): fortune's "art.u8 -> art".
  std::int64_t duplicates = 0;
  std::string first_duplicate;  // "'art.u8' (the same file as 'art')", for the note
};

// Expands --input arguments: files as given, directories to every regular
// file below them (symlinks to files followed), sorted by path so the output
// does not depend on the order the file system lists them in. Each file
// (device and inode, after symlinks) is taken once, at its first path.
InputFiles collect_inputs(const std::vector<std::string>& inputs);

// The text of an input file, or nullopt and why it is skipped: a file found
// in a directory that cannot be read, or any file with NUL bytes (not text).
// A file named on the command line that cannot be read is an error.
std::optional<std::string> read_text_file(const InputFile& file, std::string& why_skipped);

}  // namespace launch::prepare
