// Element-type dispatch and dtype checks shared by the CPU kernels.
//
// Every CPU op is a template over its element type (float for training, double
// for the reference checks). ops.cpp has already checked shapes; what is left
// to check here is that the tensors of one op agree on a dtype the CPU backend
// computes in, because a mismatch would otherwise reinterpret memory silently.
#pragma once

#include <initializer_list>

#include "engine/check.h"
#include "engine/tensor.h"

namespace engine::cpu {

// Calls fn(float{}) or fn(double{}) according to `dtype`; the lambda recovers
// the type with `using T = decltype(tag);`.
template <typename Fn>
decltype(auto) dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    default: break;
  }
  ENGINE_FAIL(op, ": the CPU backend computes in f32 or f64, got ", dtype_name(dtype));
}

// Every non-empty tensor of `tensors` has dtype `expected`.
inline void expect_dtypes(const char* op, DType expected, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->empty()) continue;
    ENGINE_CHECK(t->dtype() == expected, op, ": tensor ", t->describe(), " has dtype ",
                 dtype_name(t->dtype()), ", expected ", dtype_name(expected),
                 " like the op's other operands");
  }
}

// Below this many elements an OpenMP fork costs more than it saves.
inline constexpr long kParallelMinElements = 1 << 14;

}  // namespace engine::cpu
