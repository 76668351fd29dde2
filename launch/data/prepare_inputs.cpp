#include "launch/data/prepare_inputs.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sys/stat.h>
#include <utility>

#include "engine/check.h"

namespace fs = std::filesystem;

namespace launch::prepare {

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ENGINE_CHECK(in, "cannot open '", path.string(), "' for reading: ", std::strerror(errno));
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ENGINE_CHECK(!in.bad(), "error reading '", path.string(), "'");
  return content;
}

}  // namespace

InputFiles collect_inputs(const std::vector<std::string>& inputs) {
  InputFiles out;
  std::map<std::pair<dev_t, ino_t>, fs::path> seen;  // each file taken, by identity after symlinks -> its path
  auto add = [&](const fs::path& file, bool named) {
    struct stat st {};
    ENGINE_CHECK(::stat(file.c_str(), &st) == 0, "cannot stat input '", file.string(), "': ", std::strerror(errno));
    const auto [it, added] = seen.emplace(std::pair<dev_t, ino_t>{st.st_dev, st.st_ino}, file);
    if (!added) {
      if (out.duplicates++ == 0) {
        // Appended piece by piece: GCC 12's -Wrestrict misfires on "'" + a temporary.
        out.first_duplicate.append("'").append(file.string()).append("' (the same file as '");
        out.first_duplicate.append(it->second.string()).append("')");
      }
      return;
    }
    out.files.push_back({file, static_cast<std::int64_t>(st.st_size), named});
  };
  for (const std::string& input : inputs) {
    const fs::path path(input);
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    ENGINE_CHECK(fs::exists(status), "input '", input, "' does not exist");
    if (fs::is_directory(status)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied)) {
        if (entry.is_regular_file(error)) found.push_back(entry.path());
      }
      std::sort(found.begin(), found.end());
      for (const fs::path& file : found) add(file, false);
    } else {
      ENGINE_CHECK(fs::is_regular_file(status), "input '", input, "' is neither a regular file nor a directory");
      add(path, true);
    }
  }
  return out;
}

std::optional<std::string> read_text_file(const InputFile& file, std::string& why_skipped) {
  std::string text;
  try {
    text = read_file(file.path);
  } catch (const engine::Error& error) {
    if (file.named_on_command_line) throw;
    why_skipped = error.what();
    return std::nullopt;
  }
  if (std::memchr(text.data(), '\0', text.size()) != nullptr) {
    const std::string name = file.path.string();  // not a temporary: GCC 12's -Wrestrict misfires on "'" + one
    why_skipped = "'" + name + "': contains NUL bytes, so not text";
    return std::nullopt;
  }
  return text;
}

}  // namespace launch::prepare
