#include "launch/run/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/ops.h"

namespace launch {

std::vector<std::int32_t> generate(model::GptStage& stage, std::int64_t vocab_size,
                                   const std::vector<std::int32_t>& prompt, const SamplingOptions& options,
                                   std::mt19937_64& rng) {
  ENGINE_CHECK(!prompt.empty(), "sampling needs a non-empty prompt");
  const std::int64_t T = stage.shape().seq;
  const std::int64_t Vp = stage.logits().dim(-1);
  std::vector<std::int32_t> context = prompt, generated;
  std::vector<std::int32_t> window(static_cast<std::size_t>(T), 0);
  std::vector<float> logits(static_cast<std::size_t>(Vp));
  std::vector<double> probs(static_cast<std::size_t>(vocab_size));
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab_size));
  for (std::int64_t n = 0; n < options.tokens; ++n) {
    // The last min(T, len) tokens, left-aligned: causality makes the padding after them irrelevant.
    const std::int64_t len = std::min<std::int64_t>(T, static_cast<std::int64_t>(context.size()));
    std::copy(context.end() - len, context.end(), window.begin());
    stage.forward(0, window.data(), nullptr, 0.0);
    engine::ops::copy(engine::Tensor(logits.data(), engine::Shape{Vp}, engine::DType::kF32, engine::DeviceType::kCpu),
                      stage.logits().rows(len - 1, 1).view(engine::Shape{Vp}));
    // Softmax over the top-k logits at the given temperature.
    std::iota(order.begin(), order.end(), 0);
    const std::int64_t k = options.top_k > 0 ? std::min(options.top_k, vocab_size) : vocab_size;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
    const double top = logits[order[0]];
    double total = 0;
    for (std::int64_t i = 0; i < k; ++i) {
      probs[i] = std::exp((logits[order[i]] - top) / options.temperature);
      total += probs[i];
    }
    double u = std::uniform_real_distribution<double>(0.0, total)(rng);
    std::int32_t next = order[k - 1];
    for (std::int64_t i = 0; i < k; ++i) {
      if ((u -= probs[i]) <= 0) {
        next = order[i];
        break;
      }
    }
    context.push_back(next);
    generated.push_back(next);
  }
  return generated;
}

}  // namespace launch
