#include "optim/adamw.h"

#include <utility>

namespace optim {

void AdamWConfig::validate() const {
  ENGINE_CHECK(beta1 >= 0 && beta1 < 1, "AdamW beta1 must be in [0, 1), got ", beta1);
  ENGINE_CHECK(beta2 >= 0 && beta2 < 1, "AdamW beta2 must be in [0, 1), got ", beta2);
  ENGINE_CHECK(eps > 0, "AdamW eps must be > 0, got ", eps);
  ENGINE_CHECK(weight_decay >= 0, "weight decay must be >= 0, got ", weight_decay);
}

AdamW::AdamW(FlatParams params, std::vector<ParamSegment> segments, AdamWConfig config, std::int64_t state_elements)
    : params_(params), config_(config), segments_(std::move(segments)) {
  config_.validate();
  const engine::Tensor& master = params_.master;
  if (state_elements < 0) state_elements = master.numel();
  auto inside = [](std::int64_t offset, std::int64_t count, std::int64_t size) {
    return offset >= 0 && count >= 0 && offset + count <= size;
  };
  for (ParamSegment& s : segments_) {
    if (s.master_offset < 0) s.master_offset = s.offset;
    if (s.state_offset < 0) s.state_offset = s.offset;
    if (s.grad_offset < 0) s.grad_offset = s.offset;
    const std::int64_t working_elements = params_.working.empty() ? master.numel() : params_.working.numel();
    ENGINE_CHECK(inside(s.grad_offset, s.count, params_.grads.numel()) && inside(s.master_offset, s.count, master.numel()) &&
                     inside(s.state_offset, s.count, state_elements) && inside(s.offset, s.count, working_elements),
                 "AdamW: segment of ", s.count, " elements at ", s.offset, " (master ", s.master_offset, ", state ",
                 s.state_offset, ", gradients ", s.grad_offset, ") is outside the buffers (", params_.grads.numel(),
                 " gradients, ", master.numel(), " master, ", state_elements, " state, ", working_elements, " working)");
  }
  if (params_.working.data() == master.data()) params_.working = engine::Tensor{};
  const engine::Shape state_shape{state_elements};
  m_buffer_ = engine::Buffer(master.device(), state_elements * engine::dtype_size(master.dtype()));
  v_buffer_ = engine::Buffer(master.device(), state_elements * engine::dtype_size(master.dtype()));
  m_ = m_buffer_.as_tensor(state_shape, master.dtype());
  v_ = v_buffer_.as_tensor(state_shape, master.dtype());
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
    engine::ops::adamw_update(params_.master.flat_slice(s.master_offset, s.count),
                              params_.grads.flat_slice(s.grad_offset, s.count), m_.flat_slice(s.state_offset, s.count),
                              v_.flat_slice(s.state_offset, s.count), h, working);
  }
}

}  // namespace optim
