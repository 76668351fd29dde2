// AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization")
// over flat parameter buffers.
//
// The optimizer knows nothing of models: it gets the flat master weights, the
// gradients laid out the same way, optionally the working (bf16) copy to
// refresh, and the segments of that layout that take weight decay. The moments
// m and v are flat buffers of the same layout, in the master dtype; the update
// runs over a few contiguous segments rather than tensor by tensor.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/buffer.h"
#include "engine/ops.h"
#include "optim/optimizer.h"

namespace optim {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  void validate() const;
};

// The flat buffers an optimizer updates. `working` may alias `master` (then
// it is not written separately) or be empty.
struct FlatParams {
  engine::Tensor master;
  engine::Tensor grads;
  engine::Tensor working;
};

class AdamW : public Optimizer {
 public:
  // state_elements: size of m and v (-1: the master buffer's size).
  AdamW(FlatParams params, std::vector<ParamSegment> segments, AdamWConfig config, std::int64_t state_elements = -1);

  // One update with learning rate `lr`; gradients are multiplied by
  // grad_scale first (clipping). Increments the step count.
  void step(double lr, double grad_scale) override;

  std::int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(std::int64_t steps) override { steps_ = steps; }  // resume
  const engine::Tensor& m() const override { return m_; }
  const engine::Tensor& v() const override { return v_; }
  std::size_t state_bytes() const override { return m_.bytes() + v_.bytes(); }
  const AdamWConfig& config() const { return config_; }

 private:
  FlatParams params_;
  AdamWConfig config_;
  std::vector<ParamSegment> segments_;
  engine::Buffer m_buffer_, v_buffer_;
  engine::Tensor m_, v_;
  std::int64_t steps_ = 0;
};

}  // namespace optim
