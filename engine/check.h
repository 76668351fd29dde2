// Error handling for the whole engine.
//
// Every failure is an engine::Error carrying file:line and a message that names
// the bad value and what was expected. `main` catches it, prints it with the
// rank and aborts the job, so no rank is left waiting for the others.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace engine {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace engine

// ENGINE_CHECK(cond, "message parts ", value, ...): throws engine::Error when
// cond is false. The parts are streamed together, so numbers need no to_string.
#define ENGINE_CHECK(cond, ...)                                                        \
  do {                                                                                 \
    if (!(cond)) [[unlikely]]                                                          \
      ::engine::detail::throw_error(__FILE__, __LINE__, ::engine::detail::concat(__VA_ARGS__)); \
  } while (0)

// ENGINE_FAIL("message parts", ...): unconditional error.
#define ENGINE_FAIL(...) \
  ::engine::detail::throw_error(__FILE__, __LINE__, ::engine::detail::concat(__VA_ARGS__))
