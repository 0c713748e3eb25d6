// Per-element throughput of the f32 elementwise functions and the Philox
// stream on n = 65536 elements: the f64 scalar definition (the path before
// vec_math), Eigen 3.4's packet math (for comparison), and the vectorized
// functions every kernel now calls (unary_array). Inputs cover each
// function's working range. Compare variants with
//   math_bench --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//              --benchmark_report_aggregates_only=true
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "exec/elementwise.hpp"
#include "exec/nn_kernels.hpp"
#include "exec/vec_math.hpp"

namespace {

using ws::exec::unary_array;
using ws::exec::unary_value_f64;
using ws::ir::Op;

constexpr int64_t kN = 65536;

std::vector<float> inputs(float lo, float hi) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> x(kN);
  for (float& v : x) v = d(rng);
  return x;
}

template <Op op>
std::vector<float> inputs_for() {
  if constexpr (op == Op::log || op == Op::sqrt || op == Op::rsqrt) return inputs(1e-3f, 100.0f);
  if constexpr (op == Op::erf) return inputs(-4.0f, 4.0f);
  if constexpr (op == Op::tanh) return inputs(-6.0f, 6.0f);
  return inputs(-20.0f, 20.0f);
}

template <class F>
void run(benchmark::State& state, const std::vector<float>& x, F f) {
  std::vector<float> y(kN);
  for (auto _ : state) {
    f(x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kN);
}

// Before: each element through the f64 std:: function, rounded once.
template <Op op>
void BM_scalar_f64(benchmark::State& state) {
  run(state, inputs_for<op>(), [](const float* x, float* y) {
    for (int64_t i = 0; i < kN; ++i) y[i] = unary_value_f64<op>(x[i]);
  });
}

// After: the vectorized f32 functions.
template <Op op>
void BM_vec_f32(benchmark::State& state) {
  run(state, inputs_for<op>(), [](const float* x, float* y) { unary_array<op, float>(x, y, kN); });
}

// Eigen's packet math on the same arrays.
template <Op op>
void BM_eigen_f32(benchmark::State& state) {
  run(state, inputs_for<op>(), [](const float* x, float* y) {
    Eigen::Map<const Eigen::ArrayXf> a(x, kN);
    Eigen::Map<Eigen::ArrayXf> b(y, kN);
    if constexpr (op == Op::exp) b = a.exp();
    if constexpr (op == Op::log) b = a.log();
    if constexpr (op == Op::tanh) b = a.tanh();
    if constexpr (op == Op::sigmoid) b = a.logistic();
    if constexpr (op == Op::erf) b = a.erf();
    if constexpr (op == Op::sqrt) b = a.sqrt();
    if constexpr (op == Op::rsqrt) b = a.rsqrt();
  });
}

#define WS_MATH_BENCH(op)                                    \
  BENCHMARK(BM_scalar_f64<Op::op>)->Name("scalar_f64/" #op); \
  BENCHMARK(BM_eigen_f32<Op::op>)->Name("eigen_f32/" #op);   \
  BENCHMARK(BM_vec_f32<Op::op>)->Name("vec_f32/" #op);

WS_MATH_BENCH(exp)
WS_MATH_BENCH(log)
WS_MATH_BENCH(tanh)
WS_MATH_BENCH(sigmoid)
WS_MATH_BENCH(erf)
WS_MATH_BENCH(sqrt)
WS_MATH_BENCH(rsqrt)

// Philox: one scalar block per element (the definition) against the SIMD
// stream behind philox_uniform.
void BM_philox_scalar(benchmark::State& state) {
  std::vector<float> out(kN);
  uint64_t offset = 0;
  for (auto _ : state) {
    const uint32_t key[2] = {1234567u, 89u};
    for (int64_t i = 0; i < kN; ++i) {
      const uint64_t c = offset + uint64_t(i);
      const uint32_t ctr[4] = {uint32_t(c), uint32_t(c >> 32), 0, 0};
      uint32_t r[4];
      ws::exec::philox4x32_10(ctr, key, r);
      out[size_t(i)] = float(r[0] >> 8) * float(1.0 / 16777216.0);
    }
    offset += kN;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kN);
}
BENCHMARK(BM_philox_scalar)->Name("scalar/philox");

void BM_philox_simd(benchmark::State& state) {
  std::vector<float> out(kN);
  uint64_t offset = 0;
  for (auto _ : state) {
    ws::exec::philox_uniform<float>((uint64_t(89) << 32) | 1234567u, offset, out.data(), kN);
    offset += kN;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kN);
  state.SetLabel(ws::exec::vec_math_isa());
}
BENCHMARK(BM_philox_simd)->Name("vec/philox");

}  // namespace

BENCHMARK_MAIN();
