// GELU, tanh approximation (Hendrycks & Gimpel 2016, section 2), as GPT-2 uses:
//   gelu(x) = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3).
// Since 0.5 (1 + tanh(u)) = sigmoid(2u), this is x / (1 + exp(-2u)): one exp
// instead of a tanh (4x cheaper, and it vectorises through fast_exp), and no
// cancellation in 1 + tanh(u) for negative x.
//   gelu'(x) = s + x s (1 - s) 2 u'(x),   s = sigmoid(2u),
//   u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (0.5 sech^2(u) = 2 s (1 - s), so this is llm.c's gelu_backward rewritten.)
#pragma once

#include "engine/cpu/vector_math.h"

namespace engine::cpu {

inline constexpr double kGeluSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
inline constexpr double kGeluCubic = 0.044715;

template <typename T>
inline T gelu_sigmoid_2u(T x) {
  const T u = static_cast<T>(kGeluSqrt2OverPi) * (x + static_cast<T>(kGeluCubic) * x * x * x);
  return T(1) / (T(1) + fast_exp(T(-2) * u));
}

template <typename T>
inline T gelu(T x) {
  return x * gelu_sigmoid_2u(x);
}

template <typename T>
inline T gelu_grad(T x) {
  const T s = gelu_sigmoid_2u(x);
  const T du_dx = static_cast<T>(kGeluSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
  return s + x * s * (T(1) - s) * T(2) * du_dx;
}

}  // namespace engine::cpu
