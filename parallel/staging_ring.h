// StagingRing: byte ranges of a fixed buffer handed out in order and handed
// back in the same order, the staging of the NCCL test double
// (parallel/nccl_host_double.h): one pinned block per communicator, allocated
// once (a pinned allocation during a step would synchronise the device
// implicitly), each operation taking its bytes when queued and a CUDA host
// function giving them back after its last copy, in stream order.
//
// A range never wraps around the end: when it does not fit before the end,
// the tail is skipped (and handed back with the range). Taking more than fits
// beside what is in flight throws engine::Error naming the owner and the
// sizes: the caller's buffer is too small for the traffic in flight.
//
// Threads: take() from one thread; give_back() from any one thread at a time,
// in the order of the takes (a stream's host functions run in order).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace parallel {

class StagingRing {
 public:
  struct Range {
    std::uint64_t offset = 0;    // where the bytes start in the buffer
    std::uint64_t consumed = 0;  // what give_back() must return: the bytes and any skipped tail
  };

  // `capacity`: the buffer's bytes; `what`: names the buffer and its remedy in errors.
  StagingRing(std::uint64_t capacity, std::string what);

  Range take(std::uint64_t bytes);
  void give_back(std::uint64_t consumed);
  std::uint64_t in_flight() const { return taken_ - released_.load(std::memory_order_acquire); }
  std::uint64_t capacity() const { return capacity_; }

 private:
  std::uint64_t capacity_;
  std::string what_;
  std::uint64_t taken_ = 0;                  // bytes handed out so far, skipped tails included
  std::atomic<std::uint64_t> released_{0};  // bytes handed back
};

}  // namespace parallel
