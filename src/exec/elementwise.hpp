// The elementwise functions, one definition shared by the reference and the
// optimized kernels, so every mode computes each element identically.
// Transcendentals evaluate in double and round once.
#pragma once

#include <cmath>
#include <cstdint>

#include "ir/op.hpp"

namespace ws::exec {

template <ir::Op op, class T>
inline T unary_value(T x) {
  using ir::Op;
  const double d = double(x);
  if constexpr (op == Op::neg) return T(-x);
  if constexpr (op == Op::exp) return T(std::exp(d));
  if constexpr (op == Op::log) return T(std::log(d));
  if constexpr (op == Op::tanh) return T(std::tanh(d));
  if constexpr (op == Op::sigmoid) return T(1.0 / (1.0 + std::exp(-d)));
  if constexpr (op == Op::sqrt) return T(std::sqrt(d));
  if constexpr (op == Op::rsqrt) return T(1.0 / std::sqrt(d));
  if constexpr (op == Op::erf) return T(std::erf(d));
}

// y[i] = op(x[i]) for i < n: the array form every kernel calls, so the
// reference and the compiled kernels compute each element the same way.
// Element i depends on x[i] alone, never on where a chunk of work starts.
template <ir::Op op, class T>
inline void unary_array(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = unary_value<op>(x[i]);
}

// Calls f(std::integral_constant<Op, op>) for a unary elementwise op; false
// for any other op.
template <class F>
bool with_unary_op(ir::Op op, F&& f) {
  using ir::Op;
  switch (op) {
#define WS_UNARY(o) \
  case Op::o: f(std::integral_constant<Op, Op::o>{}); return true;
    WS_UNARY(neg)
    WS_UNARY(exp)
    WS_UNARY(log)
    WS_UNARY(tanh)
    WS_UNARY(sigmoid)
    WS_UNARY(sqrt)
    WS_UNARY(rsqrt)
    WS_UNARY(erf)
#undef WS_UNARY
    default: return false;
  }
}

}  // namespace ws::exec
