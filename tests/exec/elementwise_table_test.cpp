// Every elementwise unary and binary op of the op table (ops.def), on every
// dtype its shape inference accepts, through every path that computes it:
// the reference kernel (the interpreter's), the single-op kernel the
// executor chooses (with array operands and, where it takes them, one-value
// operands), and compiled programs with and without loop fusion. All paths
// must give the same bits, and those bits must match the op's f64
// definition within the tolerance stated below. The ops are read from the
// table, not listed here: a new op without a definition fails to compile
// (elementwise.hpp) or fails here.
//
// Tolerance against the f64 definition (the op evaluated in double, rounded
// once to the dtype):
//   f64, i64, bool: bit for bit (the definition is what they compute);
//   f32 binary ops: bit for bit (+ - * / of floats are correctly rounded,
//     so computing them in double and rounding once gives the same bits;
//     pow and the comparisons go through double as the definition does);
//   f32 unary ops: at most kF32UnaryUlps ulps (vec_math.hpp's measured worst
//     cases reach 2.37 ulps, erf without FMA; an ulp of a result below the
//     smallest normal is the smallest denormal); NaN and infinities as the
//     definition gives them, an exact zero as a zero.
//
// Then the behaviours where the reference once had a definition of its own
// (reference.cpp's binary_one): integer division by zero throws ws::Error,
// maximum of a NaN is NaN, and maximum of equal operands (+0 and -0) is the
// second operand, in every path.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "exec/elementwise.hpp"
#include "exec/kernels.hpp"
#include "exec/program.hpp"
#include "exec/reference.hpp"
#include "ir/builder.hpp"
#include "lower/lower.hpp"

#include "test_util.hpp"

namespace ws {
namespace {

using testing::bytes_of;

using Bytes = std::vector<std::byte>;
using ir::Op;

constexpr double kF32UnaryUlps = 2.5;

// The elementwise ops of `arity` operands, read from the table (convert,
// which changes the dtype, is not a unary op: elementwise.hpp).
std::vector<Op> table_ops(int arity) {
  std::vector<Op> ops;
  for (const ir::OpInfo& info : ir::kOpTable)
    if (info.category == ir::OpCategory::elementwise && info.arity == arity &&
        info.op != Op::convert)
      ops.push_back(info.op);
  return ops;
}

// The dtypes shape inference accepts for `op` on `arity` operands of one dtype.
std::vector<DType> dtypes_of(Op op, int arity) {
  std::vector<DType> out;
  for (DType dt : {DType::f32, DType::f64, DType::i64, DType::b8}) {
    try {
      ir::infer_type(op, std::vector<ir::Type>(size_t(arity), ir::Type{dt, {4}}), {}, {});
      out.push_back(dt);
    } catch (const Error&) {
    }
  }
  return out;
}

template <class T>
std::vector<T> values_of(const Bytes& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// Values spread over each op's domain and its edges: zeros of both signs,
// denormals, the smallest normal, around 1, where exp overflows and
// underflows, the largest finite values, infinities, NaN, and random values
// over several magnitudes.
template <class T>
std::vector<T> float_specials() {
  using L = std::numeric_limits<T>;
  std::vector<T> v = {T(0),          -T(0),          L::denorm_min(), -L::denorm_min(),
                      L::min(),      -L::min(),      T(1e-30),        T(1e-8),
                      T(-1e-8),      T(0.5),         T(-0.5),         T(1),
                      T(-1),         T(2),           T(-2),           T(3),
                      T(10),         T(-10),         T(20),           T(88.72),
                      T(89),         T(-87.3),       T(-104),         T(-110),
                      T(710),        T(-745),        L::max(),        L::lowest(),
                      L::infinity(), -L::infinity(), L::quiet_NaN()};
  return v;
}

template <class T>
std::vector<T> float_spread(uint32_t seed) {
  std::vector<T> v = float_specials<T>();
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-10, 10), e(-40, 40);
  for (int i = 0; i < 500; ++i) v.push_back(T(u(gen)));
  for (int i = 0; i < 500; ++i)
    v.push_back(T((i % 2 ? -1 : 1) * std::exp2(e(gen))));  // many magnitudes
  return v;
}

template <class T>
std::vector<T> int_specials() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return {0, 1};
  else
    return {0, 1, -1, 2, -2, 3, -3, 7, -7, 10, -10, 100, -100, 12345, -54321, 1 << 20, -(1 << 20)};
}

// Operands for a unary op, and pairs (a[i], b[i]) for a binary one: every
// pair of special values, then random pairs.
template <class T>
std::vector<T> unary_inputs() {
  if constexpr (std::is_floating_point_v<T>) return float_spread<T>(1);
  return int_specials<T>();
}

template <class T>
std::pair<std::vector<T>, std::vector<T>> binary_inputs(Op op) {
  std::vector<T> s;
  if constexpr (std::is_floating_point_v<T>)
    s = float_specials<T>();
  else
    s = int_specials<T>();
  std::vector<T> a, b;
  for (T x : s)
    for (T y : s) {
      if constexpr (std::is_integral_v<T>)  // pinned below: it throws
        if ((op == Op::div || op == Op::fmod) && y == 0) continue;
      a.push_back(x), b.push_back(y);
    }
  if constexpr (std::is_floating_point_v<T>) {
    const std::vector<T> x = float_spread<T>(2), y = float_spread<T>(3);
    a.insert(a.end(), x.begin(), x.end());
    b.insert(b.end(), y.begin(), y.end());
  }
  return {a, b};
}

// The f64 definition, rounded once to the result's type.
template <class T>
T unary_definition(Op op, T x) {
  double y = NAN;
  const bool known = exec::with_unary_op(
      op, [&](auto o) { y = exec::unary_value_f64<decltype(o)::value>(double(x)); });
  EXPECT_TRUE(known) << ir::op_name(op) << " has no unary definition";
  return T(y);
}

template <class R, class T>
R binary_definition(Op op, T a, T b) {
  R y{};
  const bool known = exec::with_binary_op(
      op, [&](auto o) { y = R(exec::binary_value<decltype(o)::value>(double(a), double(b))); });
  EXPECT_TRUE(known) << ir::op_name(op) << " has no binary definition";
  return y;
}

double ulps_apart(float y, double ref) {
  int e = 0;
  std::frexp(ref, &e);
  const double ulp = std::ldexp(1.0, std::max(e - 1, -126) - 23);
  return std::fabs(double(y) - ref) / ulp;
}

template <class T>
bool same_bits(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// `got` against the definition `want`, for a unary op.
template <class T>
bool within_tolerance(T got, T want, double want_f64) {
  if constexpr (std::is_same_v<T, float>) {
    if (std::isnan(want) || std::isinf(want)) return same_bits(got, want);
    if (want_f64 == 0) return got == 0;
    return std::isfinite(got) && ulps_apart(got, want_f64) <= kF32UnaryUlps;
  } else {
    (void)want_f64;
    return same_bits(got, want);
  }
}

// The reference kernel over whole arrays.
Bytes run_reference(Op op, const std::vector<ir::Type>& in_types, const std::vector<Bytes>& in,
                    const ir::Type& out_type) {
  Bytes out(out_type.bytes());
  std::vector<const void*> ptrs;
  for (const Bytes& b : in) ptrs.push_back(b.data());
  exec::run_reference(op, {}, in_types, ptrs.data(), out_type, out.data());
  return out;
}

// The single-op kernel choose_kernel picks; scalar[i]: operand i is one
// value (in[i] holds one element).
Bytes run_kernel(Op op, const std::vector<ir::Type>& in_types, const std::vector<Bytes>& in,
                 const ir::Type& out_type, const std::vector<bool>& scalar) {
  exec::Kernel k;
  k.op = op;
  k.in_types = in_types;
  k.out_type = out_type;
  std::vector<void*> slots;
  std::vector<Bytes> owned = in;
  for (size_t i = 0; i < in.size(); ++i) {
    k.in.push_back(int32_t(i));
    slots.push_back(owned[i].data());
  }
  Bytes out(out_type.bytes());
  k.out = int32_t(slots.size());
  slots.push_back(out.data());
  exec::choose_kernel(k, scalar);
  EXPECT_NE(k.fn, nullptr) << ir::op_name(op);
  if (k.fn) k.fn(k, slots.data());
  return out;
}

// A compiled program computing y = op(operands) as its output 0; output 1
// reads y with another elementwise op, so that with fusion y is computed in
// a loop fusion.
Bytes run_compiled(Op op, const std::vector<ir::Type>& in_types, const std::vector<Bytes>& in,
                   bool fuse, bool* fused = nullptr) {
  ir::Graph g;
  ir::Builder bl(g);
  std::vector<ir::ValueId> args;
  for (size_t i = 0; i < in_types.size(); ++i)
    args.push_back(bl.input(ir::InputRole::data, "x" + std::to_string(i), in_types[i]));
  const ir::ValueId y = bl.add(op, args);
  const ir::Type yt = g.type(y);
  ir::ValueId z = y;
  if (yt.dtype == DType::b8 && in_types[0].dtype != DType::b8)
    z = bl.add(Op::select, {y, args[0], args.back()});
  else if (yt.dtype != DType::b8)
    z = bl.unary(Op::neg, y);
  g.outputs.push_back({ir::OutputRole::user, y, ir::kNoValue, "y"});
  if (z != y) g.outputs.push_back({ir::OutputRole::user, z, ir::kNoValue, "z"});
  lower::LowerOptions opts;
  opts.fuse = fuse;
  ir::Graph lowered;
  exec::Executable e(lower::lower(g, opts, &lowered));
  if (fused) {
    *fused = false;
    for (const ir::Node& n : lowered.nodes) *fused |= n.op == Op::fusion;
  }
  std::vector<Bytes> inputs = in;
  for (size_t i = 0; i < inputs.size(); ++i) e.bind_input(i, inputs[i].data());
  Bytes out(yt.bytes()), other(g.type(z).bytes());
  e.bind_output(0, out.data());
  if (z != y) e.bind_output(1, other.data());
  e.run();
  return out;
}

// Every path gives the bits of the reference kernel.
void expect_paths_agree(Op op, const std::vector<ir::Type>& in_types, const std::vector<Bytes>& in,
                        const ir::Type& out_type, const Bytes& reference, const std::string& what) {
  EXPECT_TRUE(run_kernel(op, in_types, in, out_type, std::vector<bool>(in.size(), false)) ==
              reference)
      << what << ": the single-op kernel differs from the reference";
  EXPECT_TRUE(run_compiled(op, in_types, in, false) == reference)
      << what << ": the compiled program (unfused) differs from the reference";
  bool fused = false;
  EXPECT_TRUE(run_compiled(op, in_types, in, true, &fused) == reference)
      << what << ": the compiled program (fused) differs from the reference";
  // The fused loop kernel computes floats: there op joins a loop fusion
  // (a stop_gradient, an identity or a straight_through is its operand once
  // autograd is over: simplify removes it, and no kernel is left).
  if (is_floating(in_types[0].dtype) && op != Op::stop_gradient && op != Op::identity &&
      op != Op::straight_through)
    EXPECT_TRUE(fused) << what << ": the fused program has no loop fusion";
}

template <class T>
void check_unary(Op op, DType dt) {
  const std::string what = std::string(ir::op_name(op)) + " on " + std::string(dtype_name(dt));
  const std::vector<T> x = unary_inputs<T>();
  const ir::Type t{dt, {int64_t(x.size())}};
  const std::vector<Bytes> in = {bytes_of(x)};
  const Bytes ref = run_reference(op, {t}, in, t);
  const std::vector<T> y = values_of<T>(ref);
  int bad = 0;
  for (size_t i = 0; i < x.size() && bad < 10; ++i) {
    const T want = unary_definition(op, x[i]);
    const double want_f64 = unary_definition(op, double(x[i]));
    if (!within_tolerance(y[i], want, want_f64)) {
      ++bad;
      ADD_FAILURE() << what << " at x = " << std::hexfloat << double(x[i]) << ": got "
                    << double(y[i]) << ", the definition gives " << double(want);
    }
  }
  expect_paths_agree(op, {t}, in, t, ref, what);
}

template <class T>
void check_binary(Op op, DType dt) {
  const std::string what = std::string(ir::op_name(op)) + " on " + std::string(dtype_name(dt));
  const auto [a, b] = binary_inputs<T>(op);
  const int64_t n = int64_t(a.size());
  const ir::Type t{dt, {n}};
  const ir::Type out_type = ir::infer_type(op, {t, t}, {}, {});
  const std::vector<Bytes> in = {bytes_of(a), bytes_of(b)};
  const Bytes ref = run_reference(op, {t, t}, in, out_type);
  int bad = 0;
  auto check = [&]<class R>(R) {
    const std::vector<R> y = values_of<R>(ref);
    for (int64_t i = 0; i < n && bad < 10; ++i) {
      const R want = binary_definition<R>(op, a[size_t(i)], b[size_t(i)]);
      if (!same_bits(y[size_t(i)], want)) {
        ++bad;
        ADD_FAILURE() << what << " at (" << std::hexfloat << double(a[size_t(i)]) << ", "
                      << double(b[size_t(i)]) << "): got " << double(y[size_t(i)])
                      << ", the definition gives " << double(want);
      }
    }
  };
  if (out_type.dtype == DType::b8)
    check(uint8_t{});
  else
    check(T{});
  expect_paths_agree(op, {t, t}, in, out_type, ref, what);

  // One operand a single value, where the kernels take one: each special
  // value against the whole other array.
  if (!exec::takes_scalar_operands(op, dt)) return;
  std::vector<T> s;
  if constexpr (std::is_floating_point_v<T>) s = float_specials<T>();
  for (T v : s)
    for (int side = 0; side < 2; ++side) {
      const std::vector<T> full(size_t(n), v);
      const std::vector<Bytes> whole =
          side == 0 ? std::vector{bytes_of(full), in[1]} : std::vector{in[0], bytes_of(full)};
      std::vector<Bytes> one = whole;
      one[size_t(side)] = bytes_of(std::vector<T>{v});
      const Bytes want = run_reference(op, {t, t}, whole, out_type);
      EXPECT_TRUE(run_kernel(op, {t, t}, one, out_type, {side == 0, side == 1}) == want)
          << what << " with operand " << side << " the one value " << double(v)
          << ": the kernel differs from the reference";
    }
}

void check(Op op, int arity, DType dt) {
  SCOPED_TRACE(std::string(ir::op_name(op)) + " on " + std::string(dtype_name(dt)));
  exec::dispatch(dt, [&](auto t) {
    using T = decltype(t);
    if (arity == 1)
      check_unary<T>(op, dt);
    else
      check_binary<T>(op, dt);
  });
}

TEST(ElementwiseTable, TheTableHasUnaryAndBinaryOpsAndTheKernelsKnowEach) {
  const std::vector<Op> unary = table_ops(1), binary = table_ops(2);
  EXPECT_GE(unary.size(), 8u);
  EXPECT_GE(binary.size(), 12u);
  for (Op op : unary)
    EXPECT_TRUE(exec::with_unary_op(op, [](auto) {})) << ir::op_name(op) << " is not unary math";
  for (Op op : binary)
    EXPECT_TRUE(exec::with_binary_op(op, [](auto) {})) << ir::op_name(op) << " is not binary math";
  // Every elementwise op is one of these, or select or convert (tested with
  // the kernels elsewhere): a new form of elementwise op needs a test here.
  for (const ir::OpInfo& info : ir::kOpTable)
    if (info.category == ir::OpCategory::elementwise && info.op != Op::select &&
        info.op != Op::convert)
      EXPECT_TRUE(info.arity == 1 || info.arity == 2) << info.name;
}

TEST(ElementwiseTable, EveryUnaryOpMatchesItsDefinitionInEveryPathAndDtype) {
  for (Op op : table_ops(1)) {
    const std::vector<DType> dts = dtypes_of(op, 1);
    EXPECT_TRUE(std::count(dts.begin(), dts.end(), DType::f32) &&
                std::count(dts.begin(), dts.end(), DType::f64))
        << ir::op_name(op) << " takes f32 and f64";
    for (DType dt : dts) check(op, 1, dt);
  }
}

TEST(ElementwiseTable, EveryBinaryOpMatchesItsDefinitionInEveryPathAndDtype) {
  for (Op op : table_ops(2)) {
    const std::vector<DType> dts = dtypes_of(op, 2);
    EXPECT_TRUE(std::count(dts.begin(), dts.end(), DType::f32) &&
                std::count(dts.begin(), dts.end(), DType::f64))
        << ir::op_name(op) << " takes f32 and f64";
    for (DType dt : dts) check(op, 2, dt);
  }
}

// ---------------------------------------------------------------------------
// Behaviours the reference once defined apart from the kernels.

TEST(ElementwiseTable, IntegerDivisionByZeroThrowsInEveryPath) {
  const ir::Type t{DType::i64, {3}};
  const std::vector<Bytes> in = {bytes_of(std::vector<int64_t>{6, 0, -6}),
                                 bytes_of(std::vector<int64_t>{3, 0, 0})};
  EXPECT_THROW(exec::binary_value<Op::div>(int64_t(1), int64_t(0)), Error);
  EXPECT_EQ(exec::binary_value<Op::div>(int64_t(-7), int64_t(2)), -3);  // truncates
  EXPECT_EQ(exec::binary_value<Op::fmod>(int64_t(-7), int64_t(2)), -1);  // a's sign
  EXPECT_EQ(exec::binary_value<Op::fmod>(INT64_MIN, int64_t(-1)), 0);
  for (Op op : {Op::div, Op::fmod}) {
    SCOPED_TRACE(ir::op_name(op));
    try {
      run_reference(op, {t, t}, in, t);
      ADD_FAILURE() << "the reference divided by zero";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("integer division by zero"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(run_kernel(op, {t, t}, in, t, {false, false}), Error);
    EXPECT_THROW(run_compiled(op, {t, t}, in, true), Error);
    EXPECT_THROW(run_compiled(op, {t, t}, in, false), Error);
  }
}

template <class T>
void expect_maximum_pinned(DType dt) {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  const std::vector<T> a = {nan, T(1), nan, -inf, nan, T(0), -T(0), T(2), T(-3)};
  const std::vector<T> b = {T(1), nan, nan, nan, inf, -T(0), T(0), T(-1), T(-3)};
  // NaN wherever an operand is NaN; +0 and -0 compare equal and give the
  // second operand (a > b ? a : b), as the compiled kernels always did.
  const std::vector<T> want = {nan, nan, nan, nan, nan, -T(0), T(0), T(2), T(-3)};
  const ir::Type t{dt, {int64_t(a.size())}};
  const std::vector<Bytes> in = {bytes_of(a), bytes_of(b)};
  const std::string what = "maximum on " + std::string(dtype_name(dt));
  for (const auto& [path, got] : {
           std::pair{"reference", run_reference(Op::maximum, {t, t}, in, t)},
           {"kernel", run_kernel(Op::maximum, {t, t}, in, t, {false, false})},
           {"compiled", run_compiled(Op::maximum, {t, t}, in, false)},
           {"compiled, fused", run_compiled(Op::maximum, {t, t}, in, true)},
       }) {
    const std::vector<T> y = values_of<T>(got);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(same_bits(y[i], want[i]))
          << what << ", " << path << ": maximum(" << a[i] << ", " << b[i] << ") = " << y[i]
          << ", want " << want[i] << (std::signbit(want[i]) ? " (negative)" : "");
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(same_bits(exec::binary_value<Op::maximum>(a[i], b[i]), want[i])) << i;
}

TEST(ElementwiseTable, MaximumOfNaNIsNaNAndOfEqualZerosIsTheSecondInEveryPath) {
  expect_maximum_pinned<float>(DType::f32);
  expect_maximum_pinned<double>(DType::f64);
}

}  // namespace
}  // namespace ws
