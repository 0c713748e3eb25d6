// Loop kernels on the OpenMP pool: parallel_for's ranges; every kernel kind
// giving the same bits on 1, 2 and 3 threads, below and above the parallel
// thresholds, and the same bits as the interpreter; the sum order being a
// function of the summed sequence alone (checked against a direct
// transcription of its definition); sum accuracy against a long-double
// oracle, with the bound the order guarantees; maxima's normalized zeros
// and NaNs.
#include <omp.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "exec/fused_loop.hpp"
#include "exec/interpreter.hpp"
#include "exec/kernels.hpp"
#include "exec/loops.hpp"
#include "exec/nn_kernels.hpp"
#include "exec/parallel.hpp"
#include "exec/program.hpp"
#include "exec/reduce.hpp"
#include "exec/reference.hpp"
#include "ir/builder.hpp"
#include "lower/lower.hpp"
#include "tensor/tensor_impl.hpp"

#include "test_util.hpp"

namespace ws {
namespace {

using testing::bytes_of;

using Bytes = std::vector<std::byte>;
using ir::Op;
using ir::ValueId;

// Sets the pool's size for one scope.
struct Threads {
  int saved = exec::num_threads();
  explicit Threads(int n) { exec::set_num_threads(n); }
  ~Threads() { exec::set_num_threads(saved); }
};

std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(size_t(n), 0.0f);
  for (float& x : v) x = u(gen);
  return v;
}

// Runs g lowered to a Program on `threads` threads; one byte buffer per output.
std::vector<Bytes> run_compiled(const ir::Graph& g, const std::vector<Bytes>& inputs, int threads) {
  Threads t(threads);
  exec::Executable e(lower::lower(g));
  std::vector<Bytes> in = inputs, out;
  for (size_t i = 0; i < in.size(); ++i) e.bind_input(i, in[i].data());
  for (const ir::Output& o : g.outputs) out.emplace_back(g.type(o.value).bytes());
  for (size_t i = 0; i < out.size(); ++i) e.bind_output(i, out[i].data());
  e.run();
  return out;
}

// Runs g through the interpreter (reference kernels) on `threads` threads.
std::vector<Bytes> run_interpreted(const ir::Graph& g, const std::vector<Bytes>& inputs,
                                   int threads) {
  Threads t(threads);
  std::vector<Tensor> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Type& type = g.type(g.inputs[i]);
    in.push_back(Tensor::empty(type.shape, type.dtype));
    std::memcpy(in.back().impl()->storage->data, inputs[i].data(), inputs[i].size());
  }
  std::vector<Bytes> out;
  for (const Tensor& r : exec::interpret(g, in)) {
    out.emplace_back(r.nbytes());
    std::memcpy(out.back().data(), r.impl()->storage->data, r.nbytes());
  }
  return out;
}

// Every output of g has the same bits compiled on 1, 2 and 3 threads and
// interpreted on 1 and 2.
void expect_same_bits_everywhere(const ir::Graph& g, const std::vector<Bytes>& inputs,
                                 const std::string& what) {
  const std::vector<Bytes> one = run_compiled(g, inputs, 1);
  const std::vector<std::pair<const char*, std::vector<Bytes>>> others = {
      {"compiled, 2 threads", run_compiled(g, inputs, 2)},
      {"compiled, 3 threads", run_compiled(g, inputs, 3)},
      {"interpreted, 1 thread", run_interpreted(g, inputs, 1)},
      {"interpreted, 2 threads", run_interpreted(g, inputs, 2)},
  };
  for (const auto& [name, r] : others) {
    ASSERT_EQ(r.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_TRUE(r[i] == one[i]) << what << ": output '" << g.outputs[i].name << "', " << name
                                  << " differs from compiled on 1 thread";
  }
}

void output(ir::Graph& g, ValueId v, const std::string& name) {
  g.outputs.push_back({ir::OutputRole::user, v, ir::kNoValue, name});
}

// ---------------------------------------------------------------------------
// parallel_for.

TEST(ParallelFor, CoversTheRangeOnceInAlignedChunksOnEveryThread) {
  Threads t(2);
  const int64_t n = 4 * exec::kCheapGrain + 7;
  std::vector<int> hits(size_t(n), 0);
  std::atomic<int> calls{0}, threads_seen{0};
  exec::parallel_for(n, exec::kCheapGrain, [&](int64_t b, int64_t e) {
    ++calls;
    threads_seen |= 1 << omp_get_thread_num();
    EXPECT_EQ(b % exec::kChunkAlign, 0) << b;
    for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
  });
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(threads_seen.load(), 3) << "both threads of the pool take a range";
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)], 1) << i;
}

// Items too few for aligned ranges on every thread (8 images, each worth a
// thread) still split between the threads: aligned to 16, the first range
// was empty and one thread took all 8.
TEST(ParallelFor, FewCostlyItemsSplitBetweenTheThreads) {
  Threads t(2);
  for (int64_t n : {2, 8, 40, 100}) {
    std::vector<int> hits(size_t(n), 0);
    std::atomic<int> calls{0};
    std::atomic<int64_t> longest{0};
    exec::parallel_for(n, 1, [&](int64_t b, int64_t e) {
      ++calls;
      for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
      int64_t seen = longest.load();
      while (e - b > seen && !longest.compare_exchange_weak(seen, e - b)) {
      }
    });
    EXPECT_EQ(calls.load(), 2) << n << " items";
    EXPECT_LE(longest.load(), (n + 1) / 2) << n << " items: one thread took more than half";
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)], 1) << i;
  }
}

TEST(ParallelFor, SmallWorkOrOneThreadRunsInlineWithoutARegion) {
  for (auto [threads, n] :
       {std::pair{2, 2 * exec::kCheapGrain - 1}, {1, 100 * exec::kCheapGrain}}) {
    Threads t(threads);
    int calls = 0;
    exec::parallel_for(n, exec::kCheapGrain, [&](int64_t b, int64_t e) {
      ++calls;
      EXPECT_EQ(b, 0);
      EXPECT_EQ(e, n);
      EXPECT_FALSE(omp_in_parallel());
    });
    EXPECT_EQ(calls, 1) << threads << " threads, n = " << n;
  }
}

TEST(ParallelFor, InsideAParallelRegionRunsInline) {
  Threads t(2);
  std::atomic<int> calls{0};
#pragma omp parallel num_threads(2)
  exec::parallel_for(10 * exec::kCheapGrain, exec::kCheapGrain, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(e - b, 10 * exec::kCheapGrain);
  });
  EXPECT_EQ(calls.load(), omp_get_max_threads() >= 2 ? 2 : 1);
}

// ---------------------------------------------------------------------------
// Elementwise, fill, copy, broadcast, transpose, select, random, gather and
// scatter: one graph holding every kernel kind over [a, b] operands.

ir::Graph every_kernel_graph(int64_t a, int64_t b, int64_t vocab, int64_t tokens, int64_t width) {
  ir::Graph g;
  ir::Builder bl(g);
  const Shape s{a, b};
  const ir::Type f32{DType::f32, s};
  ValueId x = bl.input(ir::InputRole::data, "x", f32);
  ValueId y = bl.input(ir::InputRole::data, "y", f32);
  ValueId h = bl.input(ir::InputRole::hyper, "h", {DType::f32, {}});
  ValueId seed = bl.input(ir::InputRole::data, "seed", {DType::i64, {}});
  ValueId offset = bl.input(ir::InputRole::data, "offset", {DType::i64, {}});
  ValueId table = bl.input(ir::InputRole::param, "table", {DType::f32, {vocab, width}});
  ValueId idx = bl.input(ir::InputRole::data, "idx", {DType::i64, {tokens}});
  ValueId src = bl.input(ir::InputRole::data, "src", {DType::f32, {tokens, width}});

  ValueId hb = bl.broadcast_to(h, s), half = bl.full(0.5, f32);
  output(g, bl.binary(Op::add, x, y), "add");
  output(g, bl.binary(Op::sub, x, hb), "sub_scalar_rhs");
  output(g, bl.binary(Op::mul, half, y), "mul_scalar_lhs");
  output(g, bl.binary(Op::div, x, y), "div");
  ValueId ex = bl.unary(Op::exp, x);
  output(g, bl.binary(Op::pow, ex, y), "pow");
  output(g, bl.binary(Op::maximum, x, y), "maximum");
  ValueId gt = bl.binary(Op::gt, x, y);
  output(g, gt, "gt");
  output(g, bl.binary(Op::le, x, hb), "le_scalar");
  output(g, bl.add(Op::select, {gt, x, y}), "select");
  output(g, bl.add(Op::select, {gt, x, hb}), "select_scalar");
  for (Op op : {Op::neg, Op::tanh, Op::sigmoid, Op::erf})
    output(g, bl.unary(op, x), std::string(ir::op_name(op)));
  output(g, ex, "exp");
  for (Op op : {Op::log, Op::sqrt, Op::rsqrt})
    output(g, bl.unary(op, ex), std::string(ir::op_name(op)));
  output(g, bl.full(1.25, f32), "fill");
  output(g, bl.reshape(x, {a * b}), "copy");
  output(g, bl.broadcast_to(h, s), "broadcast_scalar");
  output(g,
         bl.add(Op::broadcast, {bl.reshape(x, {a, 1, b})},
                ir::Attrs{{"dims", std::vector<int64_t>{0, 1, 2}},
                          {"shape", std::vector<int64_t>{a, 3, b}}}),
         "broadcast_middle");
  output(g, bl.add(Op::transpose, {x}, ir::Attrs{{"perm", std::vector<int64_t>{1, 0}}}),
         "transpose");
  output(g,
         bl.add(Op::random_uniform, {seed, offset},
                ir::Attrs{{"dtype", std::string("f32")}, {"shape", std::vector<int64_t>{a, b}}}),
         "random_uniform");
  output(g, bl.add(Op::gather, {table, idx}), "gather");
  output(g, bl.add(Op::scatter_add, {idx, src}, ir::Attrs{{"rows", vocab}}), "scatter_add");
  return g;
}

std::vector<Bytes> every_kernel_inputs(int64_t a, int64_t b, int64_t vocab, int64_t tokens,
                                       int64_t width) {
  std::vector<float> x = random_floats(a * b, 1), y = random_floats(a * b, 2);
  for (size_t i = 0; i < x.size(); i += 7) y[i] = x[i];  // ties for the comparisons
  std::vector<int64_t> idx(static_cast<size_t>(tokens));
  std::mt19937 gen(3);
  for (int64_t& i : idx) i = int64_t(gen() % uint32_t(vocab));  // repeats: scatter adds up
  return {bytes_of(x),
          bytes_of(y),
          bytes_of(std::vector<float>{0.375f}),
          bytes_of(std::vector<int64_t>{1234}),
          bytes_of(std::vector<int64_t>{99}),
          bytes_of(random_floats(vocab * width, 4)),
          bytes_of(idx),
          bytes_of(random_floats(tokens * width, 5))};
}

// Sizes below every threshold, between the transcendental and the cheap ones,
// and above all; odd so chunks end mid-vector and mid-row. The last two
// gather and scatter in parallel, with wide and narrow rows.
TEST(ParallelKernels, EveryKernelKindGivesTheSameBitsOnAnyThreadCountAndInTheInterpreter) {
  struct Case {
    int64_t a, b, vocab, tokens, width;
  };
  for (Case c : {Case{7, 13, 5, 9, 3}, Case{131, 151, 37, 611, 8}, Case{257, 263, 1001, 3001, 129},
                 Case{263, 257, 4001, 60001, 5}}) {
    const ir::Graph g = every_kernel_graph(c.a, c.b, c.vocab, c.tokens, c.width);
    expect_same_bits_everywhere(g, every_kernel_inputs(c.a, c.b, c.vocab, c.tokens, c.width),
                                "[" + std::to_string(c.a) + ", " + std::to_string(c.b) + "]");
  }
}

TEST(ParallelKernels, RandomChunksContinueOneStream) {
  const int64_t n = 100003;
  std::vector<float> whole(static_cast<size_t>(n));
  exec::philox_uniform<float>(7, 11, whole.data(), n);
  Threads t(2);
  ir::Graph g;
  ir::Builder bl(g);
  ValueId seed = bl.input(ir::InputRole::data, "seed", {DType::i64, {}});
  ValueId offset = bl.input(ir::InputRole::data, "offset", {DType::i64, {}});
  output(g,
         bl.add(Op::random_uniform, {seed, offset},
                ir::Attrs{{"dtype", std::string("f32")}, {"shape", std::vector<int64_t>{n}}}),
         "r");
  const std::vector<Bytes> r =
      run_compiled(g, {bytes_of(std::vector<int64_t>{7}), bytes_of(std::vector<int64_t>{11})}, 2);
  EXPECT_TRUE(r[0] == bytes_of(whole));
}

// ---------------------------------------------------------------------------
// Reductions.

// Graphs reducing x [shape] over each axis set, sums and maxima.
ir::Graph reduction_graph(const Shape& shape, const std::vector<std::vector<int64_t>>& axes,
                          DType dt) {
  ir::Graph g;
  ir::Builder bl(g);
  ValueId x = bl.input(ir::InputRole::data, "x", {dt, shape});
  for (const std::vector<int64_t>& a : axes) {
    std::string name;
    for (int64_t i : a) name += std::to_string(i);
    output(g, bl.reduce(Op::reduce_sum, x, a), "sum" + name);
    output(g, bl.reduce(Op::reduce_max, x, a), "max" + name);
  }
  return g;
}

Bytes mixed_values(int64_t n, DType dt, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> m(0, 1);
  std::uniform_int_distribution<int> e(-3, 3);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = (gen() % 2 ? 1 : -1) * m(gen) * std::pow(10.0, e(gen));
  if (dt == DType::f64) return bytes_of(v);
  return bytes_of(std::vector<float>(v.begin(), v.end()));
}

TEST(ParallelKernels, ReductionsGiveTheSameBitsOnAnyThreadCountAndInTheInterpreter) {
  struct Case {
    Shape shape;
    std::vector<std::vector<int64_t>> axes;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {{0}, {1}, {0, 1}}},                   // tiny
      {{513, 131}, {{0}, {1}, {0, 1}}},               // bias gradient, rows of C
      {{4099, 67}, {{0}, {1}}},                       // tall: several blocks per column
      {{3, 100003}, {{0}, {1}, {0, 1}}},              // few long rows: split sequences
      {{200003}, {{0}}},                              // one long sequence
      {{100003, 3}, {{0}}},                           // one narrow tile of long columns
      {{9, 6, 49}, {{0, 2}, {1}, {0, 1}, {2}}},       // BatchNorm-like: runs of 49
      {{33, 17, 130}, {{0, 2}, {1, 2}, {0}, {1}}},    // runs crossing blocks
      {{2, 3, 5, 7}, {{1, 3}, {0, 2}, {0, 1, 2, 3}}}  // kept and reduced interleaved
  };
  for (DType dt : {DType::f32, DType::f64})
    for (const Case& c : cases) {
      const ir::Graph g = reduction_graph(c.shape, c.axes, dt);
      std::string what = std::string(dtype_name(dt)) + "[";
      for (int64_t d : c.shape) what += std::to_string(d) + ",";
      expect_same_bits_everywhere(g, {mixed_values(numel(c.shape), dt, 9)}, what + "]");
    }
}

// Over [N, C, R] inputs x and y (each shape, f32 and f64): the outputs
// `reductions` adds over axes 0 and 2, beside a sum of x + y in f64; the
// same bits on every thread count, compiled and interpreted.
template <class F>
void expect_channel_sums_same_bits_everywhere(std::initializer_list<Shape> shapes, F reductions) {
  for (const Shape& shape : shapes)
    for (DType dt : {DType::f32, DType::f64}) {
      ir::Graph g;
      ir::Builder bl(g);
      ValueId x = bl.input(ir::InputRole::data, "x", {dt, shape});
      ValueId y = bl.input(ir::InputRole::data, "y", {dt, shape});
      reductions(g, bl, x, y);
      ValueId wide =
          bl.add(Op::convert, {bl.binary(Op::add, x, y)}, ir::Attrs{{"dtype", std::string("f64")}});
      output(g, bl.reduce(Op::reduce_sum, wide, {0, 2}), "sum_f64");
      std::string what = std::string(dtype_name(dt)) + "[";
      for (int64_t d : shape) what += std::to_string(d) + ",";
      expect_same_bits_everywhere(
          g, {mixed_values(numel(shape), dt, 11), mixed_values(numel(shape), dt, 12)}, what + "]");
    }
}

// Reduce fusions over a channel's runs (BatchNorm's statistics and their
// gradients: a product summed over [N, ., S] but the channel, and its
// maximum), on sequences that fit the gathering accumulator whole (small
// maps; f64 up to 256 elements, f32 up to 512) and on longer ones streamed a
// run at a time, mixed in one kernel where one dtype fits and one does not.
TEST(ParallelKernels, ReduceFusionsOverShortRunsGiveTheSameBitsOnAnyThreadCount) {
  expect_channel_sums_same_bits_everywhere(
      {Shape{4, 96, 16}, Shape{4, 37, 4}, Shape{4, 16, 64}, Shape{3, 7, 130}, Shape{5, 9, 1},
       Shape{2, 300, 3}},
      [](ir::Graph& g, ir::Builder& bl, ValueId x, ValueId y) {
        ValueId xy = bl.binary(Op::mul, x, y);
        output(g, bl.reduce(Op::reduce_sum, xy, {0, 2}), "sum");
        output(g, bl.reduce(Op::reduce_max, xy, {0, 2}), "max");
      });
}

// Sums alone over short runs of many results (BatchNorm's statistics and
// their gradients over small maps) gather a task's sequences side by side,
// up to a chunk of runs at a time; with an epilogue over the whole block.
TEST(ParallelKernels,
     ReduceFusionsOfSumsOverShortRunsOfManyResultsGiveTheSameBitsOnAnyThreadCount) {
  expect_channel_sums_same_bits_everywhere(
      {Shape{4, 896, 16}, Shape{4, 300, 4}, Shape{3, 130, 7}, Shape{2, 1000, 1}, Shape{4, 9, 16},
       Shape{5, 260, 12}},
      [](ir::Graph& g, ir::Builder& bl, ValueId x, ValueId y) {
        ValueId xy = bl.reduce(Op::reduce_sum, bl.binary(Op::mul, x, y), {0, 2});
        ValueId sx = bl.reduce(Op::reduce_sum, bl.binary(Op::sub, x, y), {0, 2});
        output(g, bl.binary(Op::mul, xy, sx), "product");
        output(g, sx, "sum");
      });
}

// Reduce fusions over columns (BatchNorm's statistics of an NHWC image, a
// bias's gradient: sums over every dim but the innermost), streamed a chunk
// of rows (or a range of columns) at a time: rows within a block, exactly
// one, several, and more than 64 blocks (the rows in aligned groups);
// columns from one to more than a chunk holds (ranges of columns); the
// loop's own value written out too, and an epilogue on the sums.
TEST(ParallelKernels, ReduceFusionsOverColumnsGiveTheSameBitsOnAnyThreadCount) {
  for (const Shape& shape : {Shape{1, 1, 3, 5}, Shape{1, 7, 9, 64}, Shape{2, 4, 8, 130},
                             Shape{2, 1, 512, 3}, Shape{5, 1, 1025, 17}, Shape{1, 67, 1024, 3},
                             Shape{1, 2, 3, 2100}, Shape{1, 1, 1030, 2100}})
    for (DType dt : {DType::f32, DType::f64}) {
      ir::Graph g;
      ir::Builder bl(g);
      ValueId x = bl.input(ir::InputRole::data, "x", {dt, shape});
      ValueId y = bl.input(ir::InputRole::data, "y", {dt, shape});
      ValueId xy = bl.binary(Op::mul, x, bl.unary(Op::neg, y));
      ValueId sum = bl.reduce(Op::reduce_sum, xy, {0, 1, 2});
      output(g, xy, "product");
      output(g, bl.binary(Op::mul, sum, sum), "squared_sum");
      std::string what = std::string(dtype_name(dt)) + "[";
      for (int64_t d : shape) what += std::to_string(d) + ",";
      expect_same_bits_everywhere(
          g, {mixed_values(numel(shape), dt, 13), mixed_values(numel(shape), dt, 14)}, what + "]");
    }
}

// Reduce fusions keeping dims between reduced ones (BatchNorm's statistics
// and gradient sums of blocked images [N, C/8, H, W, 8], summed over N, H
// and W): a computed operand written out too (f64; f32, summed as the code
// computes it; f32 with a per-channel operand), and operands read through
// their op (the mean widened to f64, a square, a product of two), each with
// an epilogue; one fused kernel each, the same bits on every thread count
// as interpreted. Blocks of rows of a block of channels cross images (7x7,
// 2x2 maps) and span several aligned groups (30x40).
TEST(ParallelKernels, ReduceFusionsOverBlockedChannelsGiveTheSameBitsOnAnyThreadCount) {
  for (const Shape& shape : {Shape{2, 4, 3, 3, 8}, Shape{8, 2, 7, 7, 8}, Shape{3, 5, 30, 40, 8},
                             Shape{64, 1, 2, 2, 16}, Shape{1, 3, 130, 9, 8}, Shape{40, 2, 5, 5, 8}})
    for (int form = 0; form < 6; ++form) {
      const DType dt = form == 0 ? DType::f64 : DType::f32;
      ir::Graph g;
      ir::Builder bl(g);
      ValueId x = bl.input(ir::InputRole::data, "x", {dt, shape});
      ValueId y = bl.input(ir::InputRole::data, "y", {dt, shape});
      ValueId operand;
      if (form == 0 || form == 4) {
        operand = bl.binary(Op::mul, x, bl.unary(Op::neg, y));
        output(g, operand, "product");
      } else if (form == 5) {
        const Shape per_channel = {1, shape[1], 1, 1, shape[4]};
        ValueId m = bl.input(ir::InputRole::data, "m", {dt, per_channel});
        operand = bl.binary(Op::mul, bl.binary(Op::sub, x, bl.broadcast_to(m, shape)), y);
        output(g, operand, "centered");
      } else if (form == 1) {
        operand = bl.add(Op::convert, {x}, ir::Attrs{{"dtype", std::string("f64")}});
      } else if (form == 2) {
        operand = bl.binary(Op::mul, x, x);
      } else {
        operand = bl.binary(Op::mul, x, y);
      }
      ValueId sum = bl.reduce(Op::reduce_sum, operand, {0, 2, 3});
      output(g, bl.binary(Op::mul, sum, sum), "squared_sum");
      std::string what = std::string(dtype_name(dt)) + " form " + std::to_string(form) + " [";
      for (int64_t d : shape) what += std::to_string(d) + ",";
      exec::Executable e(lower::lower(g));
      EXPECT_EQ(e.program().kernels.size(), 1u) << what << "]\n" << e.program().str();
      if (form == 4 && exec::compiled_loops())  // summed as the code computes it
        EXPECT_TRUE(e.program().kernels[0].loop && e.program().kernels[0].loop->sums_compiled())
            << what << "]";
      std::vector<Bytes> in = {mixed_values(numel(shape), dt, 15),
                               mixed_values(numel(shape), dt, 16)};
      if (form == 5) in.push_back(mixed_values(shape[1] * shape[4], dt, 17));
      expect_same_bits_everywhere(g, in, what + "]");
    }
}

// The documented order, transcribed directly: blocks of kSumBlock, lanes
// j mod kSumLanes summed left to right from +0, the lane tree, the carry
// tree, the fold from the top.
template <class T>
T canonical_sum(const std::vector<T>& x) {
  const size_t lanes = size_t(exec::kSumLanes), block = size_t(exec::kSumBlock);
  std::vector<std::pair<T, int64_t>> stack;
  for (size_t b0 = 0; b0 < x.size(); b0 += block) {
    std::vector<T> lane(lanes, T(0));
    for (size_t i = b0; i < std::min(x.size(), b0 + block); ++i) lane[(i - b0) % lanes] += x[i];
    for (size_t w = lanes / 2; w >= 1; w /= 2)
      for (size_t j = 0; j < w; ++j) lane[j] += lane[j + w];
    T v = lane[0];
    int64_t size = 1;
    while (!stack.empty() && stack.back().second == size) {
      v = stack.back().first + v;
      size *= 2;
      stack.pop_back();
    }
    stack.push_back({v, size});
  }
  if (stack.empty()) return T(0);
  T t = stack.back().first;
  for (size_t k = stack.size() - 1; k-- > 0;) t = stack[k].first + t;
  return t;
}

TEST(ReduceSum, ContiguousSumsFollowTheDocumentedOrderExactly) {
  for (int threads : {1, 2}) {
    Threads t(threads);
    for (int64_t n : {0, 1, 63, 64, 65, 1023, 1024, 1025, 3000, 66 * 1024 + 7, (1 << 20) + 3}) {
      const std::vector<float> x = random_floats(n, uint32_t(n + 1));
      const float got = exec::sum(x.data(), n), want = canonical_sum(x);
      EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0)
          << "n = " << n << ", " << threads << " threads: " << got << " vs " << want;
    }
  }
}

// Each result equals the documented order applied to its sequence (its
// elements in row-major order of the operand), whatever walk the shape gets.
TEST(ReduceSum, EveryWalkSumsEachResultsSequenceInTheDocumentedOrder) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  for (const Case& c : std::vector<Case>{{{1500, 70}, {0}},
                                         {{70, 1500}, {1}},
                                         {{3, 2500, 65}, {1}},
                                         {{40, 5, 49}, {0, 2}},
                                         {{7, 3, 11, 130}, {0, 2, 3}},
                                         {{6, 1, 1000, 1}, {1, 2, 3}},
                                         {{2100, 2}, {0}},
                                         // Column tiles of 64, 32 and 16
                                         // (NHWC channels), and the split
                                         // of long columns between threads.
                                         {{2100, 96}, {0}},
                                         {{1100, 144}, {0}},
                                         {{4, 2, 1030, 16}, {0, 1, 2}},
                                         {{8200, 16}, {0}}}) {
    const std::vector<float> x = random_floats(numel(c.shape), 21);
    Shape walk = c.shape;
    std::vector<int64_t> strides = exec::reduce_result_strides(walk, c.axes);
    const std::vector<int64_t> unmerged = strides;
    // Each result's sequence, from the row-major walk of the operand.
    int64_t results = 1;
    for (size_t d = 0; d < walk.size(); ++d)
      if (strides[d] != 0) results *= walk[d];
    std::vector<std::vector<float>> seq(static_cast<size_t>(results));
    exec::strided_walk(c.shape, strides,
                       [&](int64_t i, int64_t o) { seq[size_t(o)].push_back(x[size_t(i)]); });
    exec::merge_dims(walk, strides);
    for (int threads : {1, 2}) {
      Threads t(threads);
      std::vector<float> merged(static_cast<size_t>(results)), raw(static_cast<size_t>(results));
      exec::reduce_sum(walk, strides, x.data(), merged.data());
      exec::reduce_sum(c.shape, unmerged, x.data(), raw.data());
      for (int64_t o = 0; o < results; ++o) {
        const float want = canonical_sum(seq[size_t(o)]);
        ASSERT_EQ(std::memcmp(&merged[size_t(o)], &want, sizeof want), 0)
            << exec::reduce_walk_name(walk, strides) << " walk, result " << o << ", " << threads
            << " threads";
        ASSERT_EQ(std::memcmp(&raw[size_t(o)], &want, sizeof want), 0)
            << "unmerged walk, result " << o;
      }
    }
  }
}

// Two graphs summing the same sequences through different walks (a
// transpose first, a reshape first) give the same bits, compiled or not.
TEST(ReduceSum, TheOrderDependsOnTheSequenceNotOnTheShape) {
  const int64_t n = 24, c = 5, hw = 49;
  ir::Graph g;
  ir::Builder bl(g);
  ValueId x = bl.input(ir::InputRole::data, "x", {DType::f32, {n, c, hw}});
  output(g, bl.reduce(Op::reduce_sum, x, {0, 2}), "runs");
  ValueId t = bl.add(Op::transpose, {x}, ir::Attrs{{"perm", std::vector<int64_t>{1, 0, 2}}});
  output(g, bl.reduce(Op::reduce_sum, bl.reshape(t, {c, n * hw}), {1}), "rows");
  ValueId t2 = bl.add(Op::transpose, {x}, ir::Attrs{{"perm", std::vector<int64_t>{0, 2, 1}}});
  output(g, bl.reduce(Op::reduce_sum, bl.reshape(t2, {n * hw, c}), {0}), "columns");
  const std::vector<Bytes> in = {mixed_values(n * c * hw, DType::f32, 5)};
  for (const std::vector<Bytes>& r :
       {run_compiled(g, in, 1), run_compiled(g, in, 2), run_interpreted(g, in, 1)}) {
    EXPECT_TRUE(r[0] == r[1]) << "runs vs rows";
    EXPECT_TRUE(r[0] == r[2]) << "runs vs columns";
  }
}

// The worst-case bound of the order: an element goes through at most
// kSumBlock/kSumLanes - 1 lane additions, log2(kSumLanes) lane-tree levels,
// and ceil(log2(blocks)) merges plus as many fold steps, each rounding by at
// most u = 2^-24 relative: |sum - exact| <= h*u/(1 - h*u) * sum |x|.
double sum_error_bound(int64_t n, double u) {
  const int64_t blocks = (n + exec::kSumBlock - 1) / exec::kSumBlock;
  const double h = double(exec::kSumBlock / exec::kSumLanes - 1) +
                   std::log2(double(exec::kSumLanes)) +
                   2 * std::ceil(std::log2(double(std::max<int64_t>(blocks, 1))));
  return h * u / (1 - h * u);
}

TEST(ReduceSum, F32SumsStayWithinTheirBoundOfALongDoubleOracle) {
  Threads t(2);
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> m(0, 1);
  std::uniform_int_distribution<int> e(-4, 4);
  std::printf("%9s %12s %12s %12s\n", "n", "bound", "blocked f32", "sequential f32");
  for (int64_t n : {1000, 10000, 100000, 1000000, 10000000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = (gen() % 2 ? 1.0f : -1.0f) * m(gen) * std::pow(10.0f, float(e(gen)));
    long double exact = 0, abs_sum = 0;
    float sequential = 0;
    for (float v : x) exact += v, abs_sum += std::fabs(v), sequential += v;
    const double bound = sum_error_bound(n, std::ldexp(1.0, -24));
    const double err = double(std::fabs(exec::sum(x.data(), n) - exact) / abs_sum);
    const double seq_err = double(std::fabs(sequential - exact) / abs_sum);
    std::printf("%9lld %12.3e %12.3e %12.3e\n", (long long)n, bound, err, seq_err);
    EXPECT_LE(err, bound) << "n = " << n;
    // Column and row sums follow the same order: the same bound holds.
    const int64_t cols = 10, rows = n / cols;
    std::vector<float> col(static_cast<size_t>(cols));
    exec::reduce_sum<float>({rows, cols}, {0, 1}, x.data(), col.data());
    for (int64_t c = 0; c < cols; ++c) {
      long double ex = 0, ab = 0;
      for (int64_t r = 0; r < rows; ++r)
        ex += x[size_t(r * cols + c)], ab += std::fabs(x[size_t(r * cols + c)]);
      EXPECT_LE(double(std::fabs(col[size_t(c)] - ex) / ab),
                sum_error_bound(rows, std::ldexp(1.0, -24)))
          << "column " << c << " of " << rows << " rows";
    }
  }
}

TEST(ReduceSum, F64SumsStayWithinTheirBound) {
  std::mt19937 gen(43);
  std::uniform_real_distribution<double> m(-1, 1);
  for (int64_t n : {1000, 1000000}) {
    std::vector<double> x(static_cast<size_t>(n));
    long double exact = 0, abs_sum = 0;
    for (double& v : x)
      v = m(gen) * std::pow(10.0, double(gen() % 9) - 4), exact += v, abs_sum += std::fabs(v);
    EXPECT_LE(double(std::fabs(exec::sum(x.data(), n) - exact) / abs_sum),
              sum_error_bound(n, std::ldexp(1.0, -53)))
        << "n = " << n;
  }
}

TEST(ReduceSum, EmptySumsAreZeroAndOneElementIsItself) {
  float y[3] = {1, 1, 1};
  exec::reduce_sum<float>({0, 3}, {0, 1}, nullptr, y);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  const float x[3] = {-2.5f, 0.0f, 3.0f};
  exec::reduce_sum<float>({3}, {1}, x, y);  // nothing reduced
  EXPECT_EQ(y[0], -2.5f);
  EXPECT_EQ(y[2], 3.0f);
  EXPECT_EQ(exec::sum<float>(x, 0), 0.0f);
}

// ---------------------------------------------------------------------------
// Gathers.

// strided_gather over any range of random walks, repeated runs (a stride-0
// dim before a stride-1 last dim) among them, against the element's offset
// computed from its index.
TEST(StridedGather, EveryRangeOfEveryWalkReadsEachElementsOffset) {
  std::mt19937 rng(7);
  int repeated = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int rank = 1 + int(rng() % 5);
    Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(1 + int64_t(rng() % (d + 1 == rank ? 20 : 6)));
    std::vector<int64_t> walk_strides(static_cast<size_t>(rank), 0);
    int64_t span = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const bool zero = rng() % 2 == 0 && d + 1 < rank;
      walk_strides[size_t(d)] = zero ? 0 : span;
      if (!zero) span *= shape[size_t(d)];
    }
    if (rank >= 2 && trial % 2 == 0) {  // a run repeated over the dim before it
      walk_strides[size_t(rank - 1)] = 1;
      walk_strides[size_t(rank - 2)] = 0;
    }
    repeated +=
        rank >= 2 && walk_strides[size_t(rank - 1)] == 1 && walk_strides[size_t(rank - 2)] == 0;
    std::vector<int64_t> x(size_t(span * 4 + 20));
    std::iota(x.begin(), x.end(), 1000);
    const int64_t n = numel(shape);
    const int64_t begin = int64_t(rng() % uint64_t(n)),
                  end = begin + int64_t(rng() % uint64_t(n - begin + 1));
    std::vector<int64_t> y(size_t(end - begin), -1);
    exec::strided_gather(shape, walk_strides, x.data(), y.data(), begin, end);
    for (int64_t i = begin; i < end; ++i) {
      int64_t off = 0, rest = i;
      for (int d = rank - 1; d >= 0; --d) {
        off += rest % shape[size_t(d)] * walk_strides[size_t(d)];
        rest /= shape[size_t(d)];
      }
      ASSERT_EQ(y[size_t(i - begin)], x[size_t(off)])
          << "element " << i << " of [" << begin << ", " << end << ") over "
          << ::testing::PrintToString(shape) << " walk_strides "
          << ::testing::PrintToString(walk_strides);
    }
  }
  EXPECT_GT(repeated, 150);
}

// ---------------------------------------------------------------------------
// Maxima.

TEST(ReduceMax, ZerosComeOutPositiveAndNaNsAsTheDefaultNaN) {
  const float nz = -0.0f, nan_payload = std::bit_cast<float>(0x7fc00123u);
  for (int64_t n : {2, 100, 70001}) {
    for (int threads : {1, 2}) {
      Threads t(threads);
      std::vector<float> x(size_t(n), nz);
      x[size_t(n / 2)] = 0.0f;
      float y = 1;
      exec::reduce_max<float>({n}, {0}, x.data(), &y);
      EXPECT_FALSE(std::signbit(y)) << "n = " << n;
      x.assign(size_t(n), nz);
      exec::reduce_max<float>({n}, {0}, x.data(), &y);
      EXPECT_FALSE(std::signbit(y)) << "all -0, n = " << n;
      x[1] = nan_payload;
      x[size_t(n - 1)] = -std::numeric_limits<float>::quiet_NaN();
      exec::reduce_max<float>({n}, {0}, x.data(), &y);
      const float qnan = std::numeric_limits<float>::quiet_NaN();
      EXPECT_EQ(std::memcmp(&y, &qnan, sizeof y), 0) << "n = " << n;
    }
  }
  float y[2] = {0, 0};
  exec::reduce_max<float>({0, 2}, {0, 1}, nullptr, y);
  EXPECT_EQ(y[0], -std::numeric_limits<float>::infinity());
  const float x[6] = {1, -3, 2, 5, -1, -7};  // [3, 2] over rows: columns
  exec::reduce_max<float>({3, 2}, {0, 1}, x, y);
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(y[1], 5.0f);
}

}  // namespace
}  // namespace ws
