// Two kernels that let a stream wait for the host, for the NCCL test double
// (parallel/nccl_communicator.h, NcclTransport::kHostDouble), which moves a
// collective's bytes through host memory on a CPU thread while keeping NCCL's
// stream protocol: the stream stalls in a kernel until the thread says the
// bytes are there, as NCCL's own kernels stall until their peers' arrive.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace engine::cuda {

// Queues on `stream` a one-thread kernel that returns once *counter >= value.
// `counter` is host memory mapped for the device (cudaHostAllocMapped; on
// 64-bit platforms with unified addressing its host pointer is valid on the
// device) and written by a CPU thread with release semantics. The kernel
// polls with __nanosleep between reads, so it costs one SM slot, not a core.
void wait_for_host_counter(const std::uint64_t* counter, std::uint64_t value, cudaStream_t stream);

// Queues on `stream` a one-thread kernel that spins for `nanoseconds` of the
// GPU's global timer: a random delay on a stream, to shake out a missing
// dependency between streams. Zero or less queues nothing.
void delay_stream(std::int64_t nanoseconds, cudaStream_t stream);

}  // namespace engine::cuda
