// Activation recomputation policy (Korthikanti et al. 2023, "Reducing
// Activation Recomputation in Large Transformer Models"): which of a block's
// activations a micro-batch keeps from its forward until its backward, and
// which the backward recomputes instead.
//
//   none       keep everything backward reads (BlockActivations, per slot).
//   selective  (section 5) keep everything except the attention core's
//              softmax state, whose size grows with T^2 while recomputing it
//              costs only the attention's own score and value products. On
//              the CPU that state is the (B,H,T,T) probabilities: H*T values
//              per token against about 15C for all the block's other
//              activations together, so it dominates once T > 15C/H (960
//              for gpt2-124m). On CUDA it is only a (B,H,T) log-sum-exp,
//              because FlashAttention already recomputes the scores in its
//              backward (Dao 2023): there selective saves almost nothing and
//              costs an extra attention forward. Both run the same code.
//   full       (the paper's "full activation recomputation", the baseline of
//              section 5) keep only each block's input (the residual stream)
//              and rerun the block's forward just before its backward, into
//              one scratch set of activations shared by every block and
//              micro-batch.
//
// Recomputation reruns the same ops on the same inputs, so losses and
// gradients are bit-identical to `none` wherever the forward ops are
// run-to-run deterministic: the CPU backend's are (tests/model/
// test_recompute.cpp checks it in fp64, tests/launch/run/test_parity_recompute.cpp
// under tp x pp x dp in fp32); on CUDA the attention forward uses no atomics
// and cuBLASLt repeats a fixed algorithm for a fixed shape, so the same is
// expected there. Only memory and time change. Model FLOPs (model/flops.h)
// do not count the recomputed work, so MFU falls by its cost; HFU counts it
// (recompute_flops_per_step).
#pragma once

#include <cstdint>
#include <string>

namespace model {

enum class Recompute : std::uint8_t { kNone, kSelective, kFull };

Recompute parse_recompute(const std::string& text);  // "none" | "selective" | "full"
const char* recompute_name(Recompute mode);

}  // namespace model
