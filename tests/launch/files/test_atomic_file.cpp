// launch/files: a file appears whole or not at all, with the checksum of what
// was written; a directory is replaced whole. The checksums are XXH3-64 as
// `xxhsum -H3` prints them (the known values below are xxHash's own, for the
// empty input and for "abc" with seed 0).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <algorithm>
#include <unistd.h>

#include "launch/files/atomic_file.h"
#include "launch/files/checksum.h"

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("engine_files_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(Checksum, KnownXxh3Values) {
  EXPECT_EQ(launch::checksum_of(std::string()), "2d06800538d394c2");
  EXPECT_EQ(launch::checksum_of(std::string("abc")), "78af5f94892f3950");
}

TEST(Checksum, StreamingEqualsWhole) {
  std::string text;
  for (int i = 0; i < 10000; ++i) text += static_cast<char>('a' + i % 26);
  launch::StreamingChecksum streaming;
  for (std::size_t at = 0; at < text.size(); at += 777) streaming.update(text.data() + at, std::min<std::size_t>(777, text.size() - at));
  EXPECT_EQ(streaming.hex(), launch::checksum_of(text));
  EXPECT_NE(launch::checksum_of(text), launch::checksum_of(text.substr(1)));
}

TEST_F(FilesTest, CommitWritesTheWholeFileWithItsChecksum) {
  const fs::path path = dir_ / "out.txt";
  launch::AtomicFile file(path.string());
  file.write("hello ");
  file.write(std::string("world"));
  EXPECT_FALSE(fs::exists(path)) << "nothing at the final path before commit";
  const launch::WrittenFile written = file.commit();
  EXPECT_EQ(read_text(path), "hello world");
  EXPECT_EQ(written.bytes, 11u);
  EXPECT_EQ(written.xxh3, launch::checksum_of(std::string("hello world")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1) << "no temporary left";
}

TEST_F(FilesTest, AFileNotCommittedLeavesTheOldOneUntouched) {
  const fs::path path = dir_ / "kept.txt";
  std::ofstream(path) << "old";
  {
    launch::AtomicFile file(path.string());
    file.write("new, but abandoned");
  }
  EXPECT_EQ(read_text(path), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1) << "the temporary is removed";
}

TEST_F(FilesTest, CommitDirectoryReplacesTheOldDirectoryWhole) {
  const fs::path final_dir = dir_ / "ckpt";
  const fs::path temp_dir = dir_ / "ckpt.tmp";
  fs::create_directories(final_dir);
  std::ofstream(final_dir / "old_only.txt") << "old";
  fs::create_directories(temp_dir);
  std::ofstream(temp_dir / "new.txt") << "new";
  launch::commit_directory(temp_dir.string(), final_dir.string());
  EXPECT_FALSE(fs::exists(temp_dir));
  EXPECT_EQ(read_text(final_dir / "new.txt"), "new");
  EXPECT_FALSE(fs::exists(final_dir / "old_only.txt")) << "nothing of the old directory is mixed in";
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1) << "no aside copy left";
}

}  // namespace
