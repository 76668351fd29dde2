// The text log rank 0 prints, copied to a file (the run folder's train.log):
// an ostream that writes every character to the console stream and appends
// it to the file, so the copy holds exactly what was printed.
#pragma once

#include <fstream>
#include <ostream>
#include <streambuf>
#include <string>

namespace launch {

class TextLogCopy {
 public:
  // Appends to `path` (a resumed run adds to its earlier log).
  TextLogCopy(std::ostream& console, const std::string& path);
  std::ostream& stream() { return stream_; }

 private:
  class TeeBuffer : public std::streambuf {
   public:
    TeeBuffer(std::streambuf* a, std::streambuf* b) : a_(a), b_(b) {}

   protected:
    int overflow(int c) override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;
    int sync() override;

   private:
    std::streambuf* a_;
    std::streambuf* b_;
  };
  std::ofstream file_;
  TeeBuffer buffer_;
  std::ostream stream_;
};

}  // namespace launch
