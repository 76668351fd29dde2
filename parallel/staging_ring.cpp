#include "parallel/staging_ring.h"

#include <utility>

#include "engine/check.h"

namespace parallel {

StagingRing::StagingRing(std::uint64_t capacity, std::string what) : capacity_(capacity), what_(std::move(what)) {
  ENGINE_CHECK(capacity_ > 0, what_, ": a staging ring needs a positive capacity");
}

StagingRing::Range StagingRing::take(std::uint64_t bytes) {
  const std::uint64_t at = taken_ % capacity_;
  const std::uint64_t skip = at + bytes > capacity_ ? capacity_ - at : 0;  // never split a range
  const std::uint64_t consumed = skip + bytes;
  const std::uint64_t busy = in_flight();
  ENGINE_CHECK(bytes <= capacity_ && busy + consumed <= capacity_, what_, ": needs ", bytes, " bytes with ", busy,
               " of its ", capacity_, " in flight");
  taken_ += consumed;
  return {skip > 0 ? 0 : at, consumed};
}

void StagingRing::give_back(std::uint64_t consumed) { released_.fetch_add(consumed, std::memory_order_release); }

}  // namespace parallel
