#include "engine/cuda/gemm_search.h"

#include <atomic>
#include <cstdlib>
#include <limits>
#include <string>

#include "engine/check.h"
#include "engine/cuda/context.h"

namespace engine::cuda {

int gemm_search_candidates() {
  const char* env = std::getenv("ENGINE_GEMM_SEARCH");
  if (env == nullptr || *env == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  ENGINE_CHECK(*end == '\0' && n >= 1 && n <= kMaxGemmSearchCandidates, "ENGINE_GEMM_SEARCH='", env,
               "' is not a count of candidates from 1 to ", kMaxGemmSearchCandidates);
  return static_cast<int>(n);
}

namespace {

// Two events, destroyed however the search ends.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start));
    if (const cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
      cudaEventDestroy(start);
      CUDA_CHECK(e);
    }
  }
  ~EventPair() {
    cudaEventDestroy(stop);
    cudaEventDestroy(start);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

std::atomic<long> g_searches{0}, g_candidates_timed{0};

}  // namespace

GemmSearchCounts gemm_search_counts() { return {g_searches.load(), g_candidates_timed.load()}; }

int fastest_candidate(int count, cudaStream_t stream, const std::function<bool(int)>& launch, int repeats,
                      double margin) {
  CUDA_CHECK(cudaGetLastError());  // an earlier error is not a candidate's
  ++g_searches;
  EventPair events;
  int best = -1;
  float best_ms = std::numeric_limits<float>::infinity(), first_ms = best_ms;
  for (int i = 0; i < count; ++i) {
    bool ran = launch(i);  // warm-up
    if (ran) {
      CUDA_CHECK(cudaEventRecord(events.start, stream));
      for (int r = 0; r < repeats && ran; ++r) ran = launch(i);
      CUDA_CHECK(cudaEventRecord(events.stop, stream));
      CUDA_CHECK(cudaEventSynchronize(events.stop));
    }
    if (!ran) {
      (void)cudaGetLastError();  // a candidate that cannot launch leaves no error behind
      continue;
    }
    ++g_candidates_timed;
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
    if (i == 0) first_ms = ms;
    if (ms < best_ms) best_ms = ms, best = i;
  }
  // The heuristic's pick stays unless beaten by more than the margin.
  if (best > 0 && first_ms < std::numeric_limits<float>::infinity() && best_ms > (1 - margin) * first_ms) best = 0;
  return best;
}

}  // namespace engine::cuda
