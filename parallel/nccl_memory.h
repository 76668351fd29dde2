// NCCL's own device memory: the buffers each communicator allocates on every
// GPU beside the engine's tensors, for the memory plan (model/memory_plan.h)
// and so for the trainer's start-up refusal and the planner's fit test.
//
// An estimate from NCCL's documented buffer sizes, not a measurement (NCCL
// does not report its usage, and the lent machines have had one GPU, where
// NCCL does not run between ranks). What NCCL allocates (its maintainers in
// NVIDIA/nccl#986, #1450, #559; the defaults in its src/include/device.h):
//   - A communicator used for collectives gives each of its channels one
//     buffer per connected peer and protocol, on the receiving side: Simple
//     (NCCL_BUFFSIZE, 4 MiB), LL128 (NCCL_LL128_BUFFSIZE, 120 x 640 x 8
//     steps x 8 B = 4.6875 MiB) and LL (NCCL_LL_BUFFSIZE, 8 x 512 x 8 steps
//     x 16 B = 512 KiB). A ring connects one peer to receive from per
//     channel, a tree (all-reduce) up to two more within a node (a chain).
//     Memory grows linearly with the channels, which NCCL picks by topology
//     (up to 32; 32 seen for point-to-point on 8 x H100 in NVIDIA/nccl#1685).
//     Counted here at NCCL_MAX_NCHANNELS if set, else 16: 441 MiB per
//     collective communicator. Why 16: Narayanan et al. 2021's Table 1 runs
//     fit on 80 GB A100s with NCCL (tests/launch/plan/
//     test_planner_published.cpp), and at 529.6B parameters (tp 8, pp 35,
//     dp 9) this plan holds 83.0 GB a GPU before NCCL's share, which bounds
//     that share below 2 GB: 16 channels (1.3 GB over tp, dp, pp and the
//     embedding pair) fits the bound, 32 (2.8 GB) does not. NVLS and CollNet
//     buffers (NVSwitch and SHARP fabrics) are not counted.
//   - Point-to-point (pipeline stages) uses a few channels per peer
//     (NCCL_NCHANNELS_PER_NET_PEER, default 2) with Simple buffers only.
// NCCL's environment variables for these sizes are honoured, so a user who
// shrinks them sees the plan shrink too.
#pragma once

#include <cstddef>

namespace parallel {

struct NcclBufferSizes {
  std::size_t simple = std::size_t{4} << 20;   // NCCL_BUFFSIZE
  std::size_t ll128 = 120 * 640 * 8 * 8;       // NCCL_LL128_BUFFSIZE
  std::size_t ll = 8 * 512 * 8 * 16;           // NCCL_LL_BUFFSIZE
  int channels = 16;                           // NCCL_MAX_NCHANNELS (see above)
  int p2p_channels_per_peer = 2;               // NCCL_NCHANNELS_PER_NET_PEER
  // NCCL's defaults, replaced by those of its variables that are set (a
  // malformed one is refused in one line, as NCCL would refuse it).
  static NcclBufferSizes from_environment();
};

// One communicator of more than one rank that runs collectives (ring and tree).
std::size_t nccl_collective_bytes(const NcclBufferSizes& sizes);
// One communicator that only sends to and receives from `peers` other ranks.
std::size_t nccl_point_to_point_bytes(int peers, const NcclBufferSizes& sizes);

}  // namespace parallel
