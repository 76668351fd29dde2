// Choosing among cuBLASLt's candidate algorithms by timing them, for the
// experiment of issue 10 (GPU speed): does the heuristic's first answer leave
// time on the table at GPT-2's shapes?
//
// cublasLtMatmulAlgoGetHeuristic ranks algorithms by an estimate; NVIDIA's
// own sample (CUDALibrarySamples, cuBLASLt/LtSgemmSimpleAutoTuning) asks for
// several and times them. The op_bench table of RESULTS.md is the reason to
// ask: the backward GEMMs ran at 1.5-1.9x their FLOP floor, and 1600 (the
// width of gpt2-1558m) is not a multiple of the 128- and 256-wide tiles, so
// the tile shape the estimate picks may not be the fastest.
//
// Off by default: the pick then depends on timing, so two runs may use
// different kernels and no longer repeat bit for bit. With it on, a rank
// times each new shape once (a few milliseconds) and keeps the winner for the
// life of the process; ranks may pick differently, which changes rounding
// only (every candidate computes the same product in f32).
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace engine::cuda {

inline constexpr int kMaxGemmSearchCandidates = 32;

// ENGINE_GEMM_SEARCH: how many of the heuristic's candidates to time for each
// new GEMM shape, 1 to kMaxGemmSearchCandidates. Unset, empty or 1: the
// heuristic's first, untimed (the default). Read at every new shape, so a test
// can change it. Any other value is an error naming the variable.
int gemm_search_candidates();

// Times candidates 0 .. count-1 on `stream`: each is launched once to warm up
// and then `repeats` times between two events. launch(i) enqueues candidate i
// and returns false when it cannot run (it is then skipped, its error
// cleared). Returns the fastest's index, or -1 when none ran; candidate 0
// (the heuristic's own pick) is kept unless another is faster by more than
// `margin` of its time, so timing noise does not replace it for the life of
// the process. Synchronises the stream.
int fastest_candidate(int count, cudaStream_t stream, const std::function<bool(int)>& launch, int repeats = 10,
                      double margin = 0.03);

// How many searches ran in this process and how many candidates they timed
// (for tests: that a search really happened).
struct GemmSearchCounts {
  long searches = 0;
  long candidates_timed = 0;
};
GemmSearchCounts gemm_search_counts();

}  // namespace engine::cuda
