#include "launch/resilience/rank_agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace launch {

namespace {
engine::Tensor host_i32(std::int32_t* data, std::int64_t count) {
  return engine::Tensor(data, engine::Shape{count}, engine::DType::kI32, engine::DeviceType::kCpu);
}
// The communicators move numbers, not bytes: text travels as i32 words.
std::int64_t words_for(std::int64_t bytes) { return (bytes + 3) / 4; }
}  // namespace

bool all_ranks_ok(parallel::Communicator& world, bool ok) {
  std::int32_t failed = ok ? 0 : 1;
  world.all_reduce(host_i32(&failed, 1), parallel::ReduceOp::kMax);
  return failed == 0;
}

std::string broadcast_string(parallel::Communicator& world, const std::string& text, int root) {
  std::int32_t size = static_cast<std::int32_t>(text.size());
  world.broadcast(host_i32(&size, 1), root);
  std::vector<std::int32_t> words(static_cast<std::size_t>(words_for(size)), 0);
  // An empty text has no words: memcpy from or to a null pointer is undefined
  // even for zero bytes.
  if (world.rank() == root && !text.empty()) std::memcpy(words.data(), text.data(), text.size());
  if (!words.empty()) world.broadcast(host_i32(words.data(), static_cast<std::int64_t>(words.size())), root);
  return std::string(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(size));
}

std::string first_error(parallel::Communicator& world, const std::string& error) {
  // The maximum of (size - rank) over failing ranks picks the lowest one.
  std::int32_t first = error.empty() ? 0 : world.size() - world.rank();
  world.all_reduce(host_i32(&first, 1), parallel::ReduceOp::kMax);
  if (first == 0) return "";
  return broadcast_string(world, error, world.size() - first);
}

std::vector<std::string> all_gather_strings(parallel::Communicator& world, const std::string& text) {
  const int n = world.size();
  std::vector<std::int32_t> sizes(static_cast<std::size_t>(n), 0);
  std::int32_t mine = static_cast<std::int32_t>(text.size());
  world.all_gather(host_i32(&mine, 1), host_i32(sizes.data(), n));
  // Every rank's text padded to the longest, so one all-gather moves them all.
  const std::int64_t width = words_for(*std::max_element(sizes.begin(), sizes.end()));
  std::vector<std::string> out(static_cast<std::size_t>(n));
  if (width == 0) return out;
  std::vector<std::int32_t> padded(static_cast<std::size_t>(width), 0), all(static_cast<std::size_t>(width * n), 0);
  if (!text.empty()) std::memcpy(padded.data(), text.data(), text.size());
  world.all_gather(host_i32(padded.data(), width), host_i32(all.data(), width * n));
  for (int r = 0; r < n; ++r)
    out[static_cast<std::size_t>(r)].assign(reinterpret_cast<const char*>(all.data() + r * width),
                                            static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
  return out;
}

}  // namespace launch
