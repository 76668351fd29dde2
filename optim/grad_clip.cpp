#include "optim/grad_clip.h"

#include "engine/ops.h"

namespace optim {

double grad_sum_of_squares(const engine::Tensor& grads) { return engine::ops::sum_of_squares(grads); }

double clip_factor(double global_norm, double max_norm) {
  if (max_norm <= 0.0 || global_norm <= max_norm) return 1.0;
  return max_norm / (global_norm + 1e-6);
}

}  // namespace optim
