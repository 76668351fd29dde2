#include "model/rope.h"

#include <cmath>
#include <numbers>

#include "engine/ops.h"

namespace model {

std::vector<float> rope_inv_freq(const GptConfig& config) {
  const std::int64_t D = config.head_size();
  std::vector<float> out(static_cast<std::size_t>(D / 2));
  const RopeScaling& r = config.rope_scaling;
  for (std::int64_t i = 0; i < D / 2; ++i) {
    double f = 1.0 / std::pow(config.rope_theta, static_cast<double>(2 * i) / static_cast<double>(D));
    if (r.enabled()) {
      const double L0 = static_cast<double>(r.original_max_position);
      const double wavelength = 2.0 * std::numbers::pi / f;
      if (wavelength > L0 / r.low_freq_factor) {
        f /= r.factor;
      } else if (wavelength >= L0 / r.high_freq_factor) {  // the band between: interpolated
        const double s = (L0 / wavelength - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = (1.0 - s) * f / r.factor + s * f;
      }
    }
    out[static_cast<std::size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

void fill_rope_frequencies(const BlockScratch& scratch, const GptConfig& config) {
  if (!config.is_llama() || scratch.rope_inv_freq.data() == nullptr) return;
  std::vector<float> host = rope_inv_freq(config);
  engine::ops::copy(scratch.rope_inv_freq,
                    engine::Tensor(host.data(), engine::Shape{static_cast<std::int64_t>(host.size())},
                                   engine::DType::kF32, engine::DeviceType::kCpu));
}

}  // namespace model
