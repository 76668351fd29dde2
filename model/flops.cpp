#include "model/flops.h"

#include "engine/check.h"

namespace model {

AttentionFlops parse_attention_flops(const std::string& text) {
  if (text == "causal") return AttentionFlops::kCausal;
  if (text == "full") return AttentionFlops::kFull;
  ENGINE_FAIL("unknown attention FLOP convention '", text, "'; expected causal or full");
}

const char* attention_flops_name(AttentionFlops mode) {
  return mode == AttentionFlops::kCausal ? "causal" : "full";
}

namespace {

// The fraction of the s x s square the attention convention counts.
double attention_fraction(AttentionFlops attention) { return attention == AttentionFlops::kCausal ? 0.5 : 1.0; }

// Forward FLOPs of one layer's attention core (q k^T and probabilities times
// v) for B sequences: 2 matmuls of 2*s*s*h each over all heads.
double attention_core_forward(double B, double s, double h, AttentionFlops attention) {
  return 2.0 * 2.0 * B * s * s * h * attention_fraction(attention);
}

// Forward multiply-adds of one token through one block's weight matrices:
// qkv, the attention projection, the MLP's first matrix (fc, or gate and up
// fused) and its projection.
double block_weight_macs(const GptConfig& c) {
  const double C = static_cast<double>(c.n_embd);
  return C * static_cast<double>(c.qkv_width()) + C * C + C * static_cast<double>(c.fc_width()) +
         static_cast<double>(c.mlp_width()) * C;
}

}  // namespace

double training_flops_per_step(const GptConfig& config, std::int64_t sequences, std::int64_t seq_len,
                               AttentionFlops attention) {
  const double B = static_cast<double>(sequences), s = static_cast<double>(seq_len);
  const double l = static_cast<double>(config.n_layer), h = static_cast<double>(config.n_embd);
  const double V = static_cast<double>(config.padded_vocab());
  if (config.is_llama()) {
    // The same count with the Llama family's matrices (grouped-query qkv,
    // SwiGLU's three matrices): 3 x forward, 2 FLOPs per multiply-add, per
    // token l * (weights + attention core) + the head.
    const double core = 2.0 * s * h * attention_fraction(attention);  // q k^T and P v per token, all heads
    return 3.0 * 2.0 * B * s * (l * (block_weight_macs(config) + core) + h * V);
  }
  const double attention_term = s / (6.0 * h) * attention_fraction(attention);  // s/(6h) full, s/(12h) causal
  return 72.0 * B * s * l * h * h * (1.0 + attention_term + V / (12.0 * l * h));
}

double recompute_flops_per_step(const GptConfig& config, std::int64_t sequences, std::int64_t seq_len,
                                Recompute recompute, AttentionFlops attention) {
  const double B = static_cast<double>(sequences), s = static_cast<double>(seq_len);
  const double l = static_cast<double>(config.n_layer), h = static_cast<double>(config.n_embd);
  switch (recompute) {
    case Recompute::kNone:
      return 0.0;
    case Recompute::kSelective:
      return l * attention_core_forward(B, s, h, attention);
    case Recompute::kFull: {
      // qkv, attention projection and fc (GPT-2: 3h^2 + h^2 + 4h^2) per
      // token, 2 FLOPs per multiply-add: every block matrix but the MLP's
      // output projection.
      const double macs = block_weight_macs(config) - static_cast<double>(config.mlp_width()) * h;
      return l * (2.0 * B * s * macs + attention_core_forward(B, s, h, attention));
    }
  }
  return 0.0;
}

std::string flops_convention(AttentionFlops attention, const GptConfig& config) {
  const bool causal = attention == AttentionFlops::kCausal;
  if (config.is_llama())
    return std::string("model FLOPs/step = 6*B*s*(l*(h*(H+2KV)d + h^2 + 3*h*F + ") + (causal ? "s*h" : "2*s*h") +
           ") + h*V) (every matmul of forward and backward, as Narayanan et al. 2021 count GPT's, with grouped-query "
           "qkv and SwiGLU's three matrices, padded V; attention counts " +
           (causal ? "the causal half of s x s, --attention-flops full for the whole square"
                   : "the full s x s square, --attention-flops causal for the causal half") +
           "); recomputation counted in HFU only, not in MFU";
  return std::string("model FLOPs/step = 72*B*s*l*h^2*(1 + ") + (causal ? "s/(12h)" : "s/(6h)") +
         " + V/(12lh)) (Megatron-LM, Narayanan et al. 2021: fwd+bwd matmuls, padded V; attention counts " +
         (causal ? "the causal half of s x s, as llm.c and Megatron-LM since 2025 do, --attention-flops full for the "
                   "whole square"
                 : "the full s x s square, as the paper does, --attention-flops causal for the causal half") +
         "); recomputation counted in HFU only, not in MFU";
}

}  // namespace model
