#include "model/flops.h"

namespace model {

double training_flops_per_step(const GptConfig& config, std::int64_t sequences, std::int64_t seq_len) {
  const double B = static_cast<double>(sequences), s = static_cast<double>(seq_len);
  const double l = static_cast<double>(config.n_layer), h = static_cast<double>(config.n_embd);
  const double V = static_cast<double>(config.padded_vocab());
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

const char* flops_convention() {
  return "model FLOPs/step = 72*B*s*l*h^2*(1 + s/(6h) + V/(12lh)) (Megatron-LM, Narayanan et al. 2021; "
         "fwd+bwd matmuls, full s x s attention, padded V, recomputation not counted)";
}

}  // namespace model
