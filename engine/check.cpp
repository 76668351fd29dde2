#include "engine/check.h"

#include <cstring>

namespace engine::detail {

void throw_error(const char* file, int line, const std::string& message) {
  // Keep only the path below the source root: "engine/cpu/matmul.cpp:42".
  const char* shown = file;
  for (const char* root : {"/engine/", "/model/", "/parallel/", "/optim/", "/launch/", "/tests/", "/examples/"}) {
    if (const char* at = std::strstr(file, root)) {
      shown = at + 1;
      break;
    }
  }
  throw Error(message + " [" + shown + ":" + std::to_string(line) + "]");
}

}  // namespace engine::detail
