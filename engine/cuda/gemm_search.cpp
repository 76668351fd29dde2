#include "engine/cuda/gemm_search.h"

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
  ENGINE_CHECK(*end == '\0' && n >= 1 && n <= 32, "ENGINE_GEMM_SEARCH='", env,
               "' is not a count of candidates from 1 to 32");
  return static_cast<int>(n);
}

namespace {

// Two events, destroyed however the search ends.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(stop);
    cudaEventDestroy(start);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

}  // namespace

int fastest_candidate(int count, cudaStream_t stream, const std::function<bool(int)>& launch, int repeats) {
  EventPair events;
  int best = -1;
  float best_ms = std::numeric_limits<float>::infinity();
  for (int i = 0; i < count; ++i) {
    if (!launch(i)) continue;  // warm-up; a candidate that cannot launch is skipped
    CUDA_CHECK(cudaEventRecord(events.start, stream));
    bool ran = true;
    for (int r = 0; r < repeats && ran; ++r) ran = launch(i);
    CUDA_CHECK(cudaEventRecord(events.stop, stream));
    CUDA_CHECK(cudaEventSynchronize(events.stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
    if (ran && ms < best_ms) best_ms = ms, best = i;
  }
  return best;
}

}  // namespace engine::cuda
