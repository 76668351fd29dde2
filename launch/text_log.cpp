#include "launch/text_log.h"

#include <cerrno>
#include <cstring>

#include "engine/check.h"

namespace launch {

TextLogCopy::TextLogCopy(std::ostream& console, const std::string& path)
    : file_(path, std::ios::app), buffer_(console.rdbuf(), file_.rdbuf()), stream_(&buffer_) {
  ENGINE_CHECK(file_.good(), "cannot open the text log '", path, "' for appending: ", std::strerror(errno));
}

int TextLogCopy::TeeBuffer::overflow(int c) {
  if (c == traits_type::eof()) return traits_type::not_eof(c);
  const int a = a_->sputc(static_cast<char>(c)), b = b_->sputc(static_cast<char>(c));
  return a == traits_type::eof() || b == traits_type::eof() ? traits_type::eof() : c;
}

std::streamsize TextLogCopy::TeeBuffer::xsputn(const char* s, std::streamsize n) {
  const std::streamsize a = a_->sputn(s, n), b = b_->sputn(s, n);
  return std::min(a, b);
}

int TextLogCopy::TeeBuffer::sync() {
  // The console is flushed even when the copy cannot be (a full disk must
  // not silence the run's own output).
  const int a = a_->pubsync(), b = b_->pubsync();
  return a == 0 && b == 0 ? 0 : -1;
}

}  // namespace launch
