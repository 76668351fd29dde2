// 1-bit Adam (Tang et al. 2021, "1-bit Adam: Communication Efficient
// Large-Scale Training with Adam's Convergence Speed"; DeepSpeed's
// runtime/fp16/onebit/adam.py is the reference design) over flat buffers.
//
// The idea (paper, section 3): Adam's variance v becomes stable early in
// training, while its momentum m is linear in the gradients. So:
//
//   warm-up (steps 0 .. freeze_step-1, 0-based): exactly AdamW. Gradients
//     are reduced over the data-parallel axis as usual (the caller does it);
//     this class runs the same elementwise update as optim::AdamW, so the
//     run is bit-identical to --optimizer adamw up to the freeze step.
//   compression (steps >= freeze_step; Algorithm 1 of the paper):
//     - v is frozen (never updated again);
//     - gradients are NOT reduced over dp: that all-reduce is the saving;
//     - each rank r updates the momentum from its LOCAL gradient,
//         m_r = b1 m + (1 - b1) g_r,
//     - the momenta are averaged over dp with the error-compensated 1-bit
//       all-reduce (parallel::CompressedAllReduce): m := compressed mean of
//       m_r, identical on every dp rank afterwards (every rank decodes the
//       same server messages);
//     - p -= lr * ( m_hat / (sqrt(v_hat) + eps) + wd p ).
//   Because m is linear in g, the mean of the local momenta is the momentum
//   of the mean gradient: the caller must pass a grad_scale that makes each
//   rank's gradient an estimate of the whole batch's gradient (the trainer
//   multiplies its 1/global-tokens-scaled local gradient by dp).
//
// Decisions
// ---------
// - Bias correction. The paper's Algorithm 1 and DeepSpeed's OnebitAdam use
//   none, in either stage. Our warm-up is AdamW, which corrects (Kingma & Ba
//   2015, Algorithm 1), and dropping the correction at the switch would make
//   every step jump by the factor (1 - b1^F) / sqrt(1 - b2^F) at step F
//   (1.10 for F = 20 with betas 0.9, 0.95). So we keep Adam's correction,
//   continuously: m_hat = m / (1 - b1^t) with t the 1-based step
//   number (it keeps decaying to 1), and the frozen variance is corrected
//   with the factor of the step it was frozen at, v_hat = v / (1 - b2^F),
//   F = freeze_step: exactly the v_hat the last warm-up step used.
// - Elements that never had a gradient. An element whose variance is exactly
//   0 at the freeze has had a zero gradient in every warm-up step (alignment
//   padding, rows of wpe beyond --seq-len, unused vocabulary rows). 1-bit
//   compression cannot represent 0, so its averaged momentum becomes
//   +-scale, and m / (sqrt(0) + eps) would be a huge step. DeepSpeed asks the
//   user for an "exp_avg_mask"; we derive it: such elements take no Adam
//   step (only the weight decay AdamW would apply to them). Their momentum is
//   left as the compressor returns it (identical on every rank; the error
//   feedback keeps it bounded) and never used -- except on the alignment
//   padding between tensors, which the caller names: its momentum is reset
//   to 0 after every exchange, because checkpoints store named tensors only,
//   and a resumed run must hold exactly the state the saved one held (the
//   chunk scales of the compression see every element).
// - Compression groups. The momentum of each group of flat ranges is
//   exchanged by its own CompressedAllReduce (its own scales and error
//   buffers). A single process layout has one group, the whole buffer. The
//   trainer separates tensors whose copies must stay bit-identical on other
//   ranks that are NOT in this dp group (see "Composition" below).
// - Gradient clipping is the caller's: it passes the clip factor inside
//   grad_scale. In the compression stage the gradients differ per rank, so
//   the trainer takes the global norm as sqrt(mean over dp ranks of each
//   rank's local squared norm) -- one scalar all-reduce, the same factor on
//   every rank. It over-estimates the norm of the averaged gradient by the
//   gradient noise, so clipping engages somewhat earlier than under AdamW.
// - Devices. The warm-up uses the AdamW op on the parameters' device. The
//   compression-stage arithmetic is CPU code; a CUDA run stages its buffers
//   through host memory (correct, not fast: a fused kernel is future work),
//   and CompressedAllReduce stages likewise.
//
// Composition with tensor, pipeline and ZeRO-1 parallelism (DeepSpeed's
// OnebitAdam supports none of these; this is how the engine does it)
// ---------------------------------------------------------------------
// Tensor and pipeline parallel: every (tp, pp) grid position holds its own
// flat slice of the model and has its own dp communicator (the ranks at the
// same position in the other data-parallel replicas). Each rank compresses
// its own flat momentum over that dp group, so the 1-bit exchange needs no
// tp or pp traffic at all. Two kinds of tensor have copies OUTSIDE the dp
// group, and their copies must stay bit-identical: tensors replicated over
// tp (layer norms, row-parallel biases, wpe, ln_f), whose gradients are the
// same on every tp rank, and the tied token embedding wte, whose first- and
// last-stage copies see the same gradient after the embedding group's sum
// (which still runs, on the local gradients). The compressed result of an
// element depends on the scale of the chunk it travels in, so such tensors
// get compression groups of their own (one for tp-replicated tensors, one
// for wte, one for the rest): identical inputs then give identical outputs on
// every copy, exactly as in the uncompressed path.
//
// ZeRO stage 1: the compressed all-reduce needs each rank's WHOLE local
// momentum (every element's sign travels), so under ZeRO-1 the momentum and
// the compressor's error buffers are full-size on every rank, while the
// frozen variance and the fp32 master weights stay sharded: each rank applies
// the update to the chunks it owns only, and GradBuckets::gather rebuilds the
// working parameters, as in the AdamW path. The memory trade, per parameter
// with dp ranks: AdamW ZeRO-1 holds 4/dp (m) + 4/dp (v) bytes of state; 1-bit
// Adam ZeRO-1 holds 4 (m) + 4/dp (v) + 4 (worker error) + 4/dp (server
// error) bytes, plus a packing buffer of 4 bytes when the momentum has more
// than one compression group (tp or pp > 1). The working copy's all-gather
// over dp remains (fp32 on the CPU, bf16 on CUDA); the gradient
// reduce-scatter is gone. During warm-up only the owned chunks of the full
// momentum are current; the trainer all-gathers them once, at the freeze.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/buffer.h"
#include "optim/adamw.h"
#include "parallel/compressed_allreduce.h"

namespace optim {

struct OneBitAdamConfig {
  AdamWConfig adam;
  std::int64_t freeze_step = 1;  // AdamW steps before the variance freezes and compression starts (>= 1)
  parallel::CompressionScale scale = parallel::CompressionScale::kRms;
  void validate() const;
};

// Flat ranges (offset, count) of the full layout whose momenta one
// CompressedAllReduce exchanges. Groups are disjoint and cover the layout.
struct CompressionGroup {
  std::string name;  // "all", "split", "replicated", "wte"
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
};

// ---- the local arithmetic (no communication; unit-tested against a hand reference)

// m := b1 m + (1 - b1) grad_scale g, in double, stored in f32. All (n).
void onebit_momentum_update(float* m, const float* g, std::int64_t n, double beta1, double grad_scale);

// The compression-stage parameter update over n elements:
//   if v > 0: p -= lr * ( clamp((m / bias1) / (sqrt(v / bias2) + eps), +-max_ratio) + wd p )
//   else      p -= lr * wd p                 (never had a gradient; see above)
// bias1 = 1 - b1^t, bias2 = 1 - b2^freeze_step. `working` (may be null)
// receives the new p as f32.
//
// max_ratio: the largest |m_hat / sqrt(v_hat)| AdamW itself can ever reach
// (adam_ratio_bound). After the freeze the momentum comes out of the 1-bit
// exchange, whose magnitude is its chunk's scale, not the element's own:
// for an element whose gradient is zero in theory and ~1e-11 in practice
// (the attention key bias: softmax ignores a shift shared by all keys) the
// frozen variance is ~1e-22 and m / sqrt(v) was ~1e5, so such biases took
// steps of thousands of times the learning rate (key-bias norm 0.25 -> 1,300
// after a freeze at step 10) and dragged the query and key weights with them.
// Clamped, no element ever steps further than AdamW could.
struct OneBitUpdateHyper {
  double lr = 0, eps = 1e-8, weight_decay = 0, bias1 = 1, bias2 = 1;
  double max_ratio = std::numeric_limits<double>::infinity();
};

// sup over steps of |m_hat_t / sqrt(v_hat_t)| in Adam with betas (b1, b2),
// whatever the gradients: by Cauchy-Schwarz on m_t = (1 - b1) sum_i b1^(t-i)
// g_i against v_t = (1 - b2) sum_i b2^(t-i) g_i^2, |m_t| / sqrt(v_t) <=
// (1 - b1) / sqrt((1 - b2) (1 - b1^2 / b2)); with the bias corrections the
// ratio is exactly 1 at t = 1 and rises towards that value. 1.165 for
// (0.9, 0.95), 7.27 for (0.9, 0.999). Infinite when b1^2 >= b2 (no bound).
double adam_ratio_bound(double beta1, double beta2);
void onebit_param_update(float* p, const float* m, const float* v, std::int64_t n, const OneBitUpdateHyper& h,
                         float* working);

// ---- the optimizer ------------------------------------------------------------

class OneBitAdam : public Optimizer {
 public:
  // params, segments: as for AdamW (segment.offset indexes the full layout of
  // grads and working; master_offset the master buffer; state_offset the
  // variance, which has variance_elements elements, -1 = the master's size).
  // The momentum is full-size in the gradient layout and indexed by
  // segment.offset. `dp`: the data-parallel group the momenta are averaged
  // over (size 1 is fine: the compression then still runs, sending nothing).
  // `padding`: flat ranges that hold no parameter (their momentum is kept 0).
  OneBitAdam(FlatParams params, std::vector<ParamSegment> segments, OneBitAdamConfig config,
             parallel::Communicator& dp, std::vector<CompressionGroup> groups, std::int64_t variance_elements = -1,
             std::vector<std::pair<std::int64_t, std::int64_t>> padding = {});
  ~OneBitAdam() override;

  // Whether the NEXT step() is a compression step. The caller then skips the
  // data-parallel gradient reduction and scales each rank's local gradient
  // into a whole-batch estimate (see the top of this file).
  bool compressing() const { return steps_ >= config_.freeze_step; }

  // One update: AdamW in warm-up; in compression, the local momentum update
  // over the whole layout, the compressed exchange (collective over dp) and
  // the parameter update over the segments. Increments the step count.
  void step(double lr, double grad_scale) override;

  std::int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(std::int64_t steps) override { steps_ = steps; }  // resume
  const engine::Tensor& m() const override { return m_; }  // full layout (grads')
  const engine::Tensor& v() const override { return v_; }  // state layout (sharded under ZeRO)
  std::size_t state_bytes() const override { return m_.bytes() + v_.bytes() + extra_state_bytes(); }
  std::string describe_state(bool sharded) const override {
    return sharded ? "1-bit Adam: whole momentum and error buffers, ZeRO-1 variance shard"
                   : "1-bit Adam: momentum, variance, error buffers";
  }
  const OneBitAdamConfig& config() const { return config_; }

  // The compressors, one per group, for checkpoints (their error buffers)
  // and accounting.
  const std::vector<CompressionGroup>& groups() const { return groups_; }
  parallel::CompressedAllReduce& compressor(std::size_t group) { return *compressors_[group]; }
  const parallel::CompressedAllReduce& compressor(std::size_t group) const { return *compressors_[group]; }
  // Bytes the dp communicator counts for one compression step on this rank.
  std::uint64_t compressed_bytes_per_step() const;
  // Bytes held beyond AdamW's m and v: error buffers and the packing buffer.
  std::uint64_t extra_state_bytes() const;

 private:
  void warmup_step(double lr, double grad_scale);
  void compression_step(double lr, double grad_scale);
  void exchange_momentum(float* m);  // host f32, full layout

  FlatParams params_;
  OneBitAdamConfig config_;
  std::vector<ParamSegment> segments_;
  std::vector<CompressionGroup> groups_;
  std::vector<std::pair<std::int64_t, std::int64_t>> padding_;
  std::vector<std::unique_ptr<parallel::CompressedAllReduce>> compressors_;
  bool single_contiguous_group_ = false;  // one group == [0, n): compress m in place
  engine::Buffer m_buffer_, v_buffer_;
  engine::Tensor m_, v_;
  engine::Buffer pack_;  // host f32 (n), only with several groups
  std::int64_t steps_ = 0;
};

}  // namespace optim
