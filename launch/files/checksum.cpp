#include "launch/files/checksum.h"

// Header-only xxHash: its functions compile into this file, so only the
// header is needed (no library to find or carry to a GPU machine).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

#include "engine/check.h"

namespace launch {

namespace {
std::string to_hex(XXH64_hash_t h) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}
}  // namespace

std::string checksum_of(const void* data, std::size_t bytes) { return to_hex(XXH3_64bits(data, bytes)); }

struct StreamingChecksum::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

StreamingChecksum::StreamingChecksum() : state_(std::make_unique<State>()) {
  ENGINE_CHECK(state_->xxh != nullptr && XXH3_64bits_reset(state_->xxh) == XXH_OK, "cannot start an XXH3 checksum");
}

StreamingChecksum::~StreamingChecksum() = default;

void StreamingChecksum::update(const void* data, std::size_t bytes) {
  if (bytes > 0) XXH3_64bits_update(state_->xxh, data, bytes);
}

std::string StreamingChecksum::hex() const { return to_hex(XXH3_64bits_digest(state_->xxh)); }

}  // namespace launch
