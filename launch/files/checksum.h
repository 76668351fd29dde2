// Checksums of checkpoint data: XXH3-64 from xxHash (Y. Collet,
// https://xxhash.com; Debian's libxxhash-dev). It runs at memory speed (tens
// of GB/s per core), so checking every tensor of a checkpoint on load costs
// little next to reading it, and its 64 bits make an undetected flip of
// damaged data vanishingly unlikely. It is not a cryptographic hash: it
// guards against damage (bit rot, truncation, a half-copied file), not
// against tampering.
//
// Written as 16 lower-case hex digits, the form `xxhsum -H3` prints.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace launch {

// The checksum of one block of memory.
std::string checksum_of(const void* data, std::size_t bytes);
inline std::string checksum_of(const std::string& text) { return checksum_of(text.data(), text.size()); }

// The checksum of data that arrives in pieces (a file as it is written); equal
// to checksum_of() over the concatenation.
class StreamingChecksum {
 public:
  StreamingChecksum();
  ~StreamingChecksum();
  StreamingChecksum(const StreamingChecksum&) = delete;
  StreamingChecksum& operator=(const StreamingChecksum&) = delete;
  void update(const void* data, std::size_t bytes);
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace launch
