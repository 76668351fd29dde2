// Two ways for a stream to wait for the host, for the NCCL test double
// (parallel/nccl_communicator.h, CommBackend::kNcclHostDouble), which moves a
// collective's bytes through host memory on a CPU thread while keeping NCCL's
// stream protocol: the stream stalls until the thread says the bytes are
// there, as NCCL's own kernels stall until their peers' arrive.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace engine::cuda {

// Queues on `stream` a wait until *counter >= value (compared as int64_t of
// the difference, so the counter may only grow, and a "let every waiter go"
// value must stay below 2^63 ahead). `counter` is host memory mapped for the
// device (cudaHostAllocMapped; its host pointer is valid on the device under
// unified addressing), written by a CPU thread with release semantics.
// Where the device offers 64-bit stream memory operations the wait is
// cuStreamWaitValue64 (found through cudaGetDriverEntryPointByVersion, so
// nothing links libcuda): it holds no SM, which matters when several
// processes time-slice one GPU. Elsewhere, or with
// ENGINE_NCCL_DOUBLE_WAIT=kernel, a one-thread kernel polls the counter
// with __nanosleep between reads.
void wait_for_host_counter(const std::uint64_t* counter, std::uint64_t value, cudaStream_t stream);

// Queues on `stream` a one-thread kernel that spins for `nanoseconds` of the
// GPU's global timer: a random delay on a stream, to shake out a missing
// dependency between streams. Zero or less queues nothing.
void delay_stream(std::int64_t nanoseconds, cudaStream_t stream);

}  // namespace engine::cuda
