// Text generation from a trained model: temperature and top-k sampling over
// the last position's logits, one token at a time (no KV cache: each token
// reruns the forward over a window of the last T tokens, which is plenty for
// the short samples printed at the end of a run).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "model/gpt_stage.h"

namespace launch {

struct SamplingOptions {
  std::int64_t tokens = 0;
  double temperature = 1.0;
  std::int64_t top_k = 0;  // 0 = all
};

// `stage` holds the whole model with a micro-batch of one sequence. Returns
// the generated token ids (without the prompt).
std::vector<std::int32_t> generate(model::GptStage& stage, std::int64_t vocab_size,
                                   const std::vector<std::int32_t>& prompt, const SamplingOptions& options,
                                   std::mt19937_64& rng);

}  // namespace launch
