#include "optim/adamw.h"

#include <utility>

namespace optim {

void AdamWConfig::validate() const {
  ENGINE_CHECK(beta1 >= 0 && beta1 < 1, "AdamW beta1 must be in [0, 1), got ", beta1);
  ENGINE_CHECK(beta2 >= 0 && beta2 < 1, "AdamW beta2 must be in [0, 1), got ", beta2);
  ENGINE_CHECK(eps > 0, "AdamW eps must be > 0, got ", eps);
  ENGINE_CHECK(weight_decay >= 0, "weight decay must be >= 0, got ", weight_decay);
}

AdamW::AdamW(FlatParams params, std::vector<ParamSegment> segments, AdamWConfig config)
    : params_(params), config_(config), segments_(std::move(segments)) {
  config_.validate();
  const engine::Tensor& master = params_.master;
  ENGINE_CHECK(params_.grads.numel() == master.numel(), "AdamW: gradients have ", params_.grads.numel(),
               " elements, parameters ", master.numel());
  for (const ParamSegment& s : segments_)
    ENGINE_CHECK(s.offset >= 0 && s.count >= 0 && s.offset + s.count <= master.numel(), "AdamW: segment [",
                 s.offset, ", ", s.offset + s.count, ") is outside the ", master.numel(), " parameters");
  if (params_.working.data() == master.data()) params_.working = engine::Tensor{};
  m_buffer_ = engine::Buffer(master.device(), master.bytes());
  v_buffer_ = engine::Buffer(master.device(), master.bytes());
  m_ = m_buffer_.as_tensor(master.shape(), master.dtype());
  v_ = v_buffer_.as_tensor(master.shape(), master.dtype());
  engine::ops::fill(m_, 0.0);
  engine::ops::fill(v_, 0.0);
}

void AdamW::step(double lr, double grad_scale) {
  ++steps_;
  for (const ParamSegment& s : segments_) {
    engine::ops::AdamWHyper h;
    h.lr = lr;
    h.beta1 = config_.beta1;
    h.beta2 = config_.beta2;
    h.eps = config_.eps;
    h.weight_decay = s.decay ? config_.weight_decay : 0.0;
    h.grad_scale = grad_scale;
    h.step = steps_;
    const engine::Tensor working =
        params_.working.empty() ? engine::Tensor{} : params_.working.flat_slice(s.offset, s.count);
    engine::ops::adamw_update(params_.master.flat_slice(s.offset, s.count),
                              params_.grads.flat_slice(s.offset, s.count), m_.flat_slice(s.offset, s.count),
                              v_.flat_slice(s.offset, s.count), h, working);
  }
}

}  // namespace optim
