#include "parallel/nccl_memory.h"

#include <cstdlib>
#include <string>

#include "engine/check.h"

namespace parallel {

namespace {

// Ring: one peer to receive from per channel; tree: up to two more (a chain
// within a node: the rank above and the rank below).
constexpr int kCollectiveConnectionsPerChannel = 3;

// A positive whole number from `name`, or `fallback` when it is not set.
long long env_positive(const char* name, long long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 0);
  ENGINE_CHECK(end != text && *end == '\0' && value > 0, name, " must be a positive whole number, got '", text, "'");
  return value;
}

}  // namespace

NcclBufferSizes NcclBufferSizes::from_environment() {
  NcclBufferSizes s;
  s.simple = static_cast<std::size_t>(env_positive("NCCL_BUFFSIZE", static_cast<long long>(s.simple)));
  s.ll128 = static_cast<std::size_t>(env_positive("NCCL_LL128_BUFFSIZE", static_cast<long long>(s.ll128)));
  s.ll = static_cast<std::size_t>(env_positive("NCCL_LL_BUFFSIZE", static_cast<long long>(s.ll)));
  s.channels = static_cast<int>(env_positive("NCCL_MAX_NCHANNELS", s.channels));
  s.p2p_channels_per_peer = static_cast<int>(env_positive("NCCL_NCHANNELS_PER_NET_PEER", s.p2p_channels_per_peer));
  return s;
}

std::size_t nccl_collective_bytes(const NcclBufferSizes& sizes) {
  return static_cast<std::size_t>(sizes.channels) * kCollectiveConnectionsPerChannel *
         (sizes.simple + sizes.ll128 + sizes.ll);
}

std::size_t nccl_point_to_point_bytes(int peers, const NcclBufferSizes& sizes) {
  if (peers <= 0) return 0;
  return static_cast<std::size_t>(peers) * static_cast<std::size_t>(sizes.p2p_channels_per_peer) * sizes.simple;
}

}  // namespace parallel
