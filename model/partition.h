// How a GPT is cut across ranks: which layers a pipeline stage runs, and
// which slice of each tensor a tensor-parallel rank holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "parallel/pipeline_schedule.h"

namespace model {

struct StageRange {
  std::int64_t first_layer = 0;
  std::int64_t last_layer = 0;  // exclusive
  bool has_embedding = true;    // first stage
  bool has_head = true;         // last stage
};
StageRange whole_model(const GptConfig& config);

// Balanced split of the layers over `stages` stages (layer counts differ by at
// most one); the embedding goes to the first stage, the head and loss to the
// last (Narayanan et al. 2021).
StageRange pipeline_stage_range(const GptConfig& config, int stage, int stages);

// The chunks of layers rank `pp_rank` of a pipeline of `pp` ranks holds when
// each holds `virtual_stages` of them (parallel/pipeline_schedule.h): chunk
// c is stage parallel::virtual_stage(placement, pp, pp_rank, c) of a
// pipeline of virtual_stages pp stages -- c pp + pp_rank for the interleaved
// schedule, pp_rank and 2 pp - 1 - pp_rank for ZB-V's V (rank 0 then holds
// the embedding and the head). One chunk, the plain stage range, when
// virtual_stages is 1.
std::vector<StageRange> pipeline_chunk_ranges(const GptConfig& config, int pp_rank, int pp, int virtual_stages,
                                              parallel::StagePlacement placement = parallel::StagePlacement::kLooped);

// What a rank's chunks hold together: the embedding if any chunk does, the
// head if any does, from the lowest layer to the highest (the layers between
// may belong to other ranks).
StageRange rank_range(const std::vector<StageRange>& chunks);

// The tensor-parallel group this process belongs to (size 1: no split).
// With sequence parallelism (Korthikanti et al. 2023, section 4.2.2) the
// position-wise parts of each block (layer norms, residual adds) work on
// 1/size of the tokens: rank r holds tokens [r N/size, (r+1) N/size) of the
// micro-batch's N = B*T positions, flattened (any split of the tokens works
// for position-wise ops; a contiguous one needs no reordering around the
// all-gather and reduce-scatter that replace the all-reduces).
struct TensorParallel {
  int rank = 0;
  int size = 1;
  bool sequence_parallel = false;
  bool splits_tokens() const { return sequence_parallel && size > 1; }
  std::int64_t local_tokens(std::int64_t tokens) const { return splits_tokens() ? tokens / size : tokens; }
};

// Checks that the model can be cut this way: heads, MLP width and padded
// vocabulary divisible by tp, at least one layer per pipeline stage. Returns
// "" or one message naming every problem.
std::string check_partition(const GptConfig& config, int tp, int pp);

// Under --precision fp8: every dimension of the blocks' FP8 GEMMs a multiple
// of 16, as cuBLASLt takes them on sm_89/sm_90 (engine/cuda/fp8_gemm.h): the
// tokens of a micro-batch and each linear layer's widths on one tensor-
// parallel rank. Returns "" or the first problem ("the MLP width / tp is 40").
std::string check_fp8_shapes(const GptConfig& config, int tp, std::int64_t micro_batch_tokens);

}  // namespace model
