// The elementwise functions, one definition shared by the reference and the
// optimized kernels, so every mode computes each element identically.
// f64 transcendentals are the std:: functions (the gradient-check oracle);
// f32 ones are the vectorized functions of vec_math.hpp, compiled once in the
// library, so every caller gets the same bits whatever its own flags.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "exec/special_math.hpp"
#include "exec/vec_math.hpp"
#include "ir/op.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {

// False for every op: a static_assert on it fires only in the branch of an
// `if constexpr` chain that is instantiated, so an op that reaches the end of
// a chain below (an op of ops.def without its definition there) is a
// compile error naming the function that lacks it.
template <ir::Op op>
inline constexpr bool kNoDefinition = false;

// The definition in f64: evaluate in double, round once to T.
template <ir::Op op, class T>
inline T unary_value_f64(T x) {
  using ir::Op;
  const double d = double(x);
  if constexpr (op == Op::neg)
    return T(-x);
  else if constexpr (op == Op::stop_gradient || op == Op::identity)
    return x;
  else if constexpr (op == Op::exp)
    return T(std::exp(d));
  else if constexpr (op == Op::log)
    return T(std::log(d));
  else if constexpr (op == Op::tanh)
    return T(std::tanh(d));
  else if constexpr (op == Op::sigmoid)
    return T(1.0 / (1.0 + std::exp(-d)));
  else if constexpr (op == Op::sqrt)
    return T(std::sqrt(d));
  else if constexpr (op == Op::rsqrt)
    return T(1.0 / std::sqrt(d));
  else if constexpr (op == Op::erf)
    return T(std::erf(d));
  else if constexpr (op == Op::expm1)
    return T(std::expm1(d));
  else if constexpr (op == Op::erfinv)
    return T(erfinv_f64(d));
  else if constexpr (op == Op::lgamma)
    return T(lgamma_f64(d));
  else if constexpr (op == Op::digamma)
    return T(digamma_f64(d));
  else if constexpr (op == Op::trigamma)
    return T(trigamma_f64(d));
  else if constexpr (op == Op::log1p)
    return T(std::log1p(d));
  else if constexpr (op == Op::sin)
    return T(std::sin(d));
  else if constexpr (op == Op::cos)
    return T(std::cos(d));
  else if constexpr (op == Op::tan)
    return T(std::tan(d));
  else if constexpr (op == Op::asin)
    return T(std::asin(d));
  else if constexpr (op == Op::acos)
    return T(std::acos(d));
  else if constexpr (op == Op::atan)
    return T(std::atan(d));
  else if constexpr (op == Op::sinh)
    return T(std::sinh(d));
  else if constexpr (op == Op::cosh)
    return T(std::cosh(d));
  else if constexpr (op == Op::asinh)
    return T(std::asinh(d));
  else if constexpr (op == Op::acosh)
    return T(std::acosh(d));
  else if constexpr (op == Op::atanh)
    return T(std::atanh(d));
  else
    static_assert(kNoDefinition<op>, "unary_value_f64: a unary op without its f64 definition");
}

// y[i] = op(x[i]) for i < n: the array form every kernel calls, so the
// reference and the compiled kernels compute each element the same way.
// Element i depends on x[i] alone, never on where a chunk of work starts.
// f32 runs vec_math's function for the op (neg excepted: exact either way);
// an op without one does not compile.
template <ir::Op op, class T>
inline void unary_array(const T* x, T* y, int64_t n) {
  using ir::Op;
  if constexpr (std::is_same_v<T, float> && op != Op::neg && op != Op::stop_gradient &&
                op != Op::identity) {
    if constexpr (op == Op::exp)
      exp_f32(x, y, n);
    else if constexpr (op == Op::log)
      log_f32(x, y, n);
    else if constexpr (op == Op::tanh)
      tanh_f32(x, y, n);
    else if constexpr (op == Op::sigmoid)
      sigmoid_f32(x, y, n);
    else if constexpr (op == Op::sqrt)
      sqrt_f32(x, y, n);
    else if constexpr (op == Op::rsqrt)
      rsqrt_f32(x, y, n);
    else if constexpr (op == Op::erf)
      erf_f32(x, y, n);
    else if constexpr (op == Op::expm1)
      expm1_f32(x, y, n);
    else if constexpr (op == Op::erfinv)
      erfinv_f32(x, y, n);
    else if constexpr (op == Op::lgamma)
      lgamma_f32(x, y, n);
    else if constexpr (op == Op::digamma)
      digamma_f32(x, y, n);
    else if constexpr (op == Op::trigamma)
      trigamma_f32(x, y, n);
    else if constexpr (op == Op::log1p)
      log1p_f32(x, y, n);
    else if constexpr (op == Op::sin)
      sin_f32(x, y, n);
    else if constexpr (op == Op::cos)
      cos_f32(x, y, n);
    else if constexpr (op == Op::tan)
      tan_f32(x, y, n);
    else if constexpr (op == Op::asin)
      asin_f32(x, y, n);
    else if constexpr (op == Op::acos)
      acos_f32(x, y, n);
    else if constexpr (op == Op::atan)
      atan_f32(x, y, n);
    else if constexpr (op == Op::sinh)
      sinh_f32(x, y, n);
    else if constexpr (op == Op::cosh)
      cosh_f32(x, y, n);
    else if constexpr (op == Op::asinh)
      asinh_f32(x, y, n);
    else if constexpr (op == Op::acosh)
      acosh_f32(x, y, n);
    else if constexpr (op == Op::atanh)
      atanh_f32(x, y, n);
    else
      static_assert(kNoDefinition<op>, "unary_array: a unary op without its f32 function");
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = unary_value_f64<op>(x[i]);
  }
}

// op(x) for one element: the same value as unary_array's (prefer the array
// form in loops; for f32 this is a call per element).
template <ir::Op op, class T>
inline T unary_value(T x) {
  T y;
  unary_array<op>(&x, &y, 1);
  return y;
}

// The elementwise ops by form, read from the op table (ops.def): a unary
// op is an elementwise op of one operand other than `convert` (which
// changes the dtype), a binary op one of two operands (arithmetic or a
// comparison). A new line in ops.def joins these lists by itself, and the
// definitions above and below fail to compile until they cover it.
template <ir::Op op>
inline constexpr bool is_unary_math = (ir::op_info(op).category == ir::OpCategory::elementwise) &&
                                      (ir::op_info(op).arity == 1) && (op != ir::Op::convert);
template <ir::Op op>
inline constexpr bool is_binary_math = (ir::op_info(op).category == ir::OpCategory::elementwise) &&
                                       (ir::op_info(op).arity == 2);

namespace detail {
template <template <ir::Op> class Pred, class F, size_t... I>
bool with_op(ir::Op op, F& f, std::index_sequence<I...>) {
  bool found = false;
  auto one = [&]<size_t i>() {
    constexpr ir::Op o = ir::Op(i);
    if constexpr (Pred<o>::value)
      if (op == o) {
        f(std::integral_constant<ir::Op, o>{});
        found = true;
      }
  };
  (one.template operator()<I>(), ...);
  return found;
}
template <ir::Op op>
struct UnaryPred : std::bool_constant<is_unary_math<op>> {};
template <ir::Op op>
struct BinaryPred : std::bool_constant<is_binary_math<op>> {};
}  // namespace detail

// Calls f(std::integral_constant<Op, op>) for a unary elementwise op; false
// for any other op.
template <class F>
bool with_unary_op(ir::Op op, F&& f) {
  return detail::with_op<detail::UnaryPred>(op, f, std::make_index_sequence<ir::kNumOps>{});
}

// Calls f(std::integral_constant<Op, op>) for a binary elementwise op
// (arithmetic or comparison); false for any other op.
template <class F>
bool with_binary_op(ir::Op op, F&& f) {
  return detail::with_op<detail::BinaryPred>(op, f, std::make_index_sequence<ir::kNumOps>{});
}

// a op b for a binary elementwise op: the one definition every kernel uses,
// the reference's and the compiled ones' (comparisons give 0 or 1 as
// uint8_t). Evaluated in T, except pow and atan2, through double; for floats this is
// the f64 definition rounded once to T. maximum: NaN if either operand is
// NaN, else the larger, and b when they compare equal (so maximum(+0, -0) is
// -0). Integer division by zero throws ws::Error (the compiled programs run
// integer ops through the reference kernels; only floats are vectorized).
template <ir::Op op, class T>
inline auto binary_value(T a, T b) {
  using ir::Op;
  if constexpr (op == Op::add)
    return T(a + b);
  else if constexpr (op == Op::sub)
    return T(a - b);
  else if constexpr (op == Op::mul)
    return T(a * b);
  else if constexpr (op == Op::div) {
    if constexpr (std::is_integral_v<T>)
      if (b == 0) throw Error("div: integer division by zero");
    return T(a / b);
  } else if constexpr (op == Op::pow)
    return T(std::pow(double(a), double(b)));
  else if constexpr (op == Op::atan2)
    return T(std::atan2(double(a), double(b)));
  else if constexpr (op == Op::straight_through)
    return a;
  else if constexpr (op == Op::fmod) {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) throw Error("fmod: integer division by zero");
      return b == T(-1) ? T(0) : T(a % b);  // -1: the one quotient that overflows
    } else {
      return T(std::fmod(double(a), double(b)));  // exact: a float's remainder is one
    }
  } else if constexpr (op == Op::maximum) {
    if constexpr (std::is_floating_point_v<T>)
      return (std::isnan(a) || std::isnan(b)) ? T(NAN) : (a > b ? a : b);
    else
      return a > b ? a : b;
  } else if constexpr (op == Op::eq)
    return uint8_t(a == b);
  else if constexpr (op == Op::ne)
    return uint8_t(a != b);
  else if constexpr (op == Op::lt)
    return uint8_t(a < b);
  else if constexpr (op == Op::le)
    return uint8_t(a <= b);
  else if constexpr (op == Op::gt)
    return uint8_t(a > b);
  else if constexpr (op == Op::ge)
    return uint8_t(a >= b);
  else
    static_assert(kNoDefinition<op>, "binary_value: a binary op without its definition");
}

}  // namespace ws::exec
