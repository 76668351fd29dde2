#include "launch/run/text_log.h"

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
  // The console's result only: a copy that cannot be written (disk full)
  // must not silence the run's own output.
  const int a = a_->sputc(static_cast<char>(c));
  b_->sputc(static_cast<char>(c));
  return a;
}

std::streamsize TextLogCopy::TeeBuffer::xsputn(const char* s, std::streamsize n) {
  const std::streamsize a = a_->sputn(s, n);
  b_->sputn(s, n);
  return a;
}

int TextLogCopy::TeeBuffer::sync() {
  b_->pubsync();
  return a_->pubsync();
}

}  // namespace launch
