// Which GPU a rank uses: its index among its node's ranks, and the check that
// NCCL gets one GPU per rank. The trainer calls both as it starts.
#pragma once

#include <mpi.h>

#include <string>

namespace launch {

// This rank's index among the ranks of `world` on its node, which picks its
// GPU: from the launcher's variable (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
// SLURM_LOCALID under srun, LOCAL_RANK), else, for a launcher that sets none
// of them, by splitting `world` into shared-memory (node-local) communicators
// (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED). Collective over `world` in the
// second case: every rank of `world` calls it alike.
int node_local_rank(MPI_Comm world);

// NCCL runs one rank per GPU: two ranks on one GPU make ncclCommInitRank fail
// with "invalid usage" (seen on an H100, 2026-11-23). Called by every rank of
// `world` before NCCL is set up, with the PCI bus id of the GPU this rank will
// use: the ids are compared among the ranks of each node (a shared-memory
// split), the verdict is agreed over `world`, and every rank throws the same
// one-line refusal when any two ranks of a node share a GPU. (Counting ranks
// against cuda_device_count() would refuse launchers that give each rank one
// GPU through CUDA_VISIBLE_DEVICES, where every rank sees a single device.)
void check_one_gpu_per_rank(MPI_Comm world, const std::string& gpu_id);

}  // namespace launch
