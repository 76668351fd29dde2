// Per-thread scratch memory for kernels that run inside OpenMP regions
// (attention's dS matrix, the cross-entropy's row of exponentials).
#pragma once

#include <cstdint>
#include <vector>

namespace engine::cpu {

// At least `count` elements of T owned by the calling thread, grown on first
// use and then reused, so the step loop does not allocate. The pointer stays
// valid until this thread asks for more of the same T.
template <typename T>
T* thread_scratch(std::int64_t count) {
  thread_local std::vector<T> buffer;
  if (static_cast<std::int64_t>(buffer.size()) < count) buffer.resize(static_cast<std::size_t>(count));
  return buffer.data();
}

}  // namespace engine::cpu
