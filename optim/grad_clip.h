// Global-norm gradient clipping (Pascanu et al. 2013): scale all gradients by
// min(1, max_norm / ||g||) where ||g|| is the L2 norm over every parameter.
#pragma once

#include "engine/tensor.h"

namespace optim {

// Sum of squares of a flat gradient buffer, in fp64. With parallelism, each
// rank passes only the ranges it owns and the caller all-reduces the sums.
double grad_sum_of_squares(const engine::Tensor& grads);

// The factor the gradients are multiplied by: 1 when clipping is off
// (max_norm <= 0) or the norm is within bounds.
double clip_factor(double global_norm, double max_norm);

}  // namespace optim
