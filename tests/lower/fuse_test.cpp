// The fuse passes' programs: what the rewritten golden inputs lower to
// (kernel counts, in-place updates; pass_goldens_test.cpp checks each
// pass's text and bits), and fused programs against the interpreter and
// against unfused programs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "exec/fused_loop.hpp"
#include "exec/interpreter.hpp"
#include "exec/program.hpp"
#include "exec/threads.hpp"
#include "ir/text.hpp"
#include "lower/lower.hpp"
#include "lower/pipeline.hpp"
#include "lowered_runs.hpp"
#include "tensor/tensor_impl.hpp"
#include "test_util.hpp"

namespace ws {
namespace {

using testing::expect_same_everywhere;
using testing::inputs_for;

// The input graph of the golden case <pass>/<name> (pass_goldens_test.cpp
// checks the pass's output and its bits).
ir::Graph golden_input(const std::string& pass, const std::string& name) {
  return ir::parse(
      testing::read_file(std::string(WS_TEST_DIR) + "/" + pass + "/" + name + ".in.ir"));
}

// g's programs give the interpreter's bits on 1, 2 and 3 threads, on `in`
// (or inputs_for(g)).
void expect_same_on_every_team(const ir::Graph& g, const std::vector<Tensor>& in) {
  const int before = exec::num_threads();
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    exec::set_num_threads(threads);
    expect_same_everywhere(g, in);
  }
  exec::set_num_threads(before);
}
void expect_same_on_every_team(const ir::Graph& g) { expect_same_on_every_team(g, inputs_for(g)); }

// A parameter read through a reshape and a broadcast by a loop that ends
// after its update: the loop still runs first, and the update is written in
// place (no copy).
TEST(FuseElementwise, UpdateWaitsForReadsThroughAReshape) {
  const ir::Graph in = golden_input("fuse", "update_after_reads_through_reshape");
  exec::Executable e(lower::lower(in, {}));
  for (const exec::Kernel& k : e.program().kernels) EXPECT_STRNE(k.name, "copy");
}

// An Adam moment's decay reads only inputs, of the reduced shape: it joins
// the epilogue of the reduction that gives the gradient it is added to, and
// the moment is updated in place by that one kernel.
TEST(FuseElementwise, EpilogueTakesInTheLoopsOfTheReducedShapeItReads) {
  const ir::Graph in = golden_input("fuse", "epilogue_reads_loops_of_the_reduced_shape");
  exec::Executable e(lower::lower(in, {}));
  EXPECT_EQ(e.program().kernels.size(), 1u);
}

// LayerNorm's statistic: the ops between its reduction and the reshape that
// broadcasts it run before the reshape (so they join the reduction's
// epilogue); an op with a full-size operand that is no reshape, and a graph
// output, stay; a reshape there and back is its operand. A scaling of an
// input read only through a reshape runs after the reshape, on a view of
// the input, and joins the add that reads it.
TEST(MoveReshapes, ElementwiseOpsMoveToTheShapeOfWhatTheyFuseWith) {
  const ir::Graph in = golden_input("move_reshapes", "reshapes_move_after_elementwise_ops");
  // The reduction, its epilogue (scale, epsilon, rsqrt) and the negated sum
  // are one kernel; the normalization with the scaled p and the add another;
  // the scaling by w one; the negated statistic (an output of another
  // shape) one.
  exec::Executable e(lower::lower(in, {}));
  EXPECT_EQ(e.program().kernels.size(), 4u);
}

// A LayerNorm weight's gradient, the column sum of dy * xhat over [B*T, C],
// with its SGD update as the epilogue: one kernel, the parameter written in
// place, sums bit for bit as the column sum kernel's. A sum over a middle
// dim (keeping an outer one too, as BatchNorm's statistics of blocked
// images) takes its producer too.
TEST(FuseElementwise, ColumnSumTakesItsProducerAndItsUpdate) {
  const ir::Graph in = golden_input("fuse", "column_sum_with_producer_and_update");
  exec::Executable e(lower::lower(in, {}));
  EXPECT_EQ(e.program().kernels.size(), 2u) << e.program().str();
  EXPECT_EQ(e.program().copy_bytes, 0);
}

// BatchNorm's normalization, affine map and relu over 7x7 maps, per-channel
// statistics read one value per row piece, and a global pool: one reduce
// fusion. Chunks (2048 elements) and threads start mid-row.
TEST(FuseElementwise, PerChannelStatisticsOverShortRowsFuse) {
  const ir::Graph in = golden_input("fuse", "per_channel_statistics_over_short_rows");
  exec::Executable e(lower::lower(in, {}));
  EXPECT_EQ(e.program().kernels.size(), 1u);
}

// SGD with momentum over arrays larger than the caches: the gradient, the
// buffer and the weight, the last two updated in place, are three streams,
// so the whole update is one loop.
TEST(FuseElementwise, InPlaceUpdatesCountAsOneStreamWithTheirRead) {
  const ir::Graph in = golden_input("fuse", "momentum_update_over_large_arrays");
  exec::Executable e(lower::lower(in, {}));
  EXPECT_EQ(e.program().kernels.size(), 1u) << e.program().str();
}

// Loops with no broadcast operand and no reduction (an update in place; a
// dropout, whose element i is number skip + i of the stream) walk short
// chunks, each asking for the next one's elements first; over sizes that are
// not a multiple of a chunk, on every team, they give the interpreter's
// bits. A loop reading a per-row operand keeps long chunks.
TEST(FuseElementwise, StreamingLoopsWalkShortChunksWithTheInterpretersBits) {
  const ir::Graph g = ir::parse(R"(graph streams {
  %0 = input data "g" : f32[333,77]
  %1 = input param "w" : f32[333,77]
  %2 = input opt_state "buf" : f32[333,77]
  %3 = input hyper "lr" : f32[]
  %4 = input hyper "m" : f32[]
  %5 = input rng "seed" : i64[]
  %6 = input rng "offset" : i64[]
  %7 = input data "x" : f32[1001,13]
  %8 = input data "bias" : f32[13]
  %9 = broadcast %4 {dims=[], shape=[333,77]} : f32[333,77]
  %10 = mul %2, %9 : f32[333,77]
  %11 = add %10, %0 : f32[333,77]
  %12 = broadcast %3 {dims=[], shape=[333,77]} : f32[333,77]
  %13 = mul %11, %12 : f32[333,77]
  %14 = sub %1, %13 : f32[333,77]
  %15 = random_uniform %5, %6 {dtype="f32", shape=[1001,13], skip=77} : f32[1001,13]
  %16 = full {value=0.25} : f32[1001,13]
  %17 = ge %15, %16 : bool[1001,13]
  %18 = full {value=0.0} : f32[1001,13]
  %19 = select %17, %7, %18 : f32[1001,13]
  %20 = broadcast %8 {dims=[1], shape=[1001,13]} : f32[1001,13]
  %21 = add %7, %20 : f32[1001,13]
  %22 = exp %21 : f32[1001,13]
  out update %11 -> %2 "buf"
  out update %14 -> %1 "w"
  out user %19 "dropped"
  out user %22 "biased"
})");
  const exec::Program p = lower::lower(g);
  int streaming = 0, rows = 0;
  for (const exec::Kernel& k : p.kernels)
    if (k.loop) (k.loop->chunk() == exec::kStreamChunk ? streaming : rows) += 1;
  EXPECT_EQ(streaming, 2) << p.str();
  EXPECT_EQ(rows, 1) << p.str();
  expect_same_on_every_team(g);
}

// A random chain of f32 additions, subtractions, products, quotients and
// square roots over `n` elements: arrays (one a parameter updated in place
// and read again after its update), one-element hyperparameters and
// constants as operands, some intermediate values results too.
std::string random_block_program(std::mt19937& gen, int64_t n) {
  auto pick = [&gen](int64_t k) { return int64_t(gen() % uint64_t(k)); };
  const std::string ty = fmt::format("f32[{}]", n);
  std::string text = "graph blocks {\n";
  std::vector<int64_t> arrays, scalars;
  int64_t next = 0;
  const int64_t narrays = 2 + pick(3), nhyper = 1 + pick(3);
  for (int64_t i = 0; i < narrays; ++i) {
    text += fmt::format("  %{} = input {} \"a{}\" : {}\n", next, i == 0 ? "param" : "data", i, ty);
    arrays.push_back(next++);
  }
  for (int64_t i = 0; i < nhyper; ++i) {
    text += fmt::format("  %{} = input hyper \"h{}\" : f32[]\n", next, i);
    text +=
        fmt::format("  %{} = broadcast %{} {{dims=[], shape=[{}]}} : {}\n", next + 1, next, n, ty);
    scalars.push_back(next + 1);
    next += 2;
  }
  text += fmt::format("  %{} = full {{value=0.375}} : {}\n", next, ty);
  scalars.push_back(next++);
  const char* ops[] = {"add", "sub", "mul", "div", "sqrt"};
  std::vector<int64_t> computed;
  std::string outs;
  const int64_t nops = 3 + pick(8);
  int64_t update = -1;
  for (int64_t k = 0; k < nops; ++k) {
    const std::string op = ops[pick(5)];
    auto operand = [&] {
      if (!computed.empty() && pick(2)) return computed[size_t(pick(int64_t(computed.size())))];
      if (pick(4) == 0) return scalars[size_t(pick(int64_t(scalars.size())))];
      return arrays[size_t(pick(int64_t(arrays.size())))];
    };
    const int64_t a = operand();
    if (op == "sqrt") {
      text += fmt::format("  %{} = sqrt %{} : {}\n", next, a, ty);
    } else {
      const int64_t b = op == "div" && pick(2) ? scalars.back() : operand();
      text += fmt::format("  %{} = {} %{}, %{} : {}\n", next, op, a, b, ty);
    }
    computed.push_back(next);
    if (update < 0 && k >= 1 && pick(3) == 0) {
      update = next;  // the parameter's new value; later steps read the old one
      outs += fmt::format("  out update %{} -> %{} \"a0\"\n", next, arrays[0]);
    } else if (k + 1 < nops && pick(3) == 0) {
      outs += fmt::format("  out user %{} \"r{}\"\n", next, k);
    }
    ++next;
  }
  // The last step reads the parameter again, after its update.
  text += fmt::format("  %{} = mul %{}, %{} : {}\n", next, arrays[0], computed.back(), ty);
  outs += fmt::format("  out user %{} \"last\"\n", next);
  return text + outs + "}";
}

// Streaming loops of the block ops run as block programs, every step inlined
// over a block of elements, and give the interpreter's bits: random chains
// over lengths below a vector, below a block, one block, a block and a bit,
// and long enough for every thread, on teams of 1, 2 and 3 threads.
// Over g's lowered fused loop kernels: the sum of `count` and how many
// there are.
template <class F>
std::pair<int, int> count_loops(const ir::Graph& g, F count) {
  std::pair<int, int> out{0, 0};
  for (const exec::Kernel& k : lower::lower(g).kernels)
    if (k.loop) {
      out.first += int(count(*k.loop));
      ++out.second;
    }
  return out;
}

// Loops compiled to machine code or not (exec::set_compiled_loops) while
// it lives, as before after.
struct CompiledLoops {
  bool before = exec::compiled_loops();
  explicit CompiledLoops(bool on) { exec::set_compiled_loops(on); }
  ~CompiledLoops() { exec::set_compiled_loops(before); }
};

TEST(FuseElementwise, BlockProgramsGiveTheInterpretersBits) {
  const CompiledLoops off(false);  // block programs run where loops are not compiled
  std::mt19937 gen(7);
  const int64_t sizes[] = {1, 5, 17, 127, exec::kFusedBlock, exec::kFusedBlock + 3, 1000, 70001};
  int blocks = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const int64_t n = sizes[size_t(trial) % std::size(sizes)];
    const std::string text = random_block_program(gen, n);
    SCOPED_TRACE(text);
    const ir::Graph g = ir::parse(text);
    blocks += count_loops(g, [](const exec::FusedLoop& l) { return l.block_program(); }).first;
    expect_same_on_every_team(g);
  }
  EXPECT_GE(blocks, 48);
}

// A random chain of `dt` ops over [rows, cols] reading two arrays, a run
// repeated along every row (tiled), one value per row (read per segment
// when rows are long), a hyperparameter and a constant, the last value
// summed over rows (end 1), over columns (end 2) or not (end 0); the
// operand read is most often the value just computed, so that products,
// sums and differences in a row pair up.
std::string random_pair_chain(std::mt19937& gen, int64_t rows, int64_t cols, const std::string& dt,
                              int end) {
  auto pick = [&gen](int64_t k) { return int64_t(gen() % uint64_t(k)); };
  const std::string ty = fmt::format("{}[{},{}]", dt, rows, cols);
  std::string text = fmt::format(R"(graph pairs {{
  %0 = input data "x" : {0}
  %1 = input data "z" : {0}
  %2 = input data "col" : {1}[{2}]
  %3 = broadcast %2 {{dims=[1], shape=[{3},{2}]}} : {0}
  %4 = input data "row" : {1}[{3}]
  %5 = broadcast %4 {{dims=[0], shape=[{3},{2}]}} : {0}
  %6 = input hyper "h" : {1}[]
  %7 = broadcast %6 {{dims=[], shape=[{3},{2}]}} : {0}
  %8 = full {{value=0.625}} : {0}
)",
                                 ty, dt, cols, rows);
  const std::vector<int64_t> leaves = {0, 1, 3, 5, 7, 8};
  const char* ops[] = {"add", "sub", "mul", "div"};
  std::vector<int64_t> computed;
  std::string outs;
  int64_t next = 9;
  const int64_t nops = 2 + pick(9);
  for (int64_t k = 0; k < nops; ++k) {
    auto operand = [&] {
      if (!computed.empty() && pick(3) != 0)
        return pick(4) ? computed.back() : computed[size_t(pick(int64_t(computed.size())))];
      return leaves[size_t(pick(int64_t(leaves.size())))];
    };
    int64_t a = operand(), b = operand();
    if (pick(2)) std::swap(a, b);
    text += fmt::format("  %{} = {} %{}, %{} : {}\n", next, ops[pick(4)], a, b, ty);
    if (k + 1 < nops && pick(4) == 0) outs += fmt::format("  out user %{} \"r{}\"\n", next, k);
    computed.push_back(next++);
  }
  if (end == 0) {
    outs += fmt::format("  out user %{} \"last\"\n", computed.back());
  } else {
    const int64_t kept = end == 1 ? rows : cols;
    text += fmt::format("  %{} = reduce_sum %{} {{axes=[{}]}} : {}[{}]\n", next, computed.back(),
                        end == 1 ? 1 : 0, dt, kept);
    outs += fmt::format("  out user %{} \"sum\"\n", next);
  }
  return text + outs + "}";
}

// Two steps in a row whose first value only the second reads run as one pair
// step and give the interpreter's bits: random chains of f32 and f64 sums,
// differences, products and quotients over arrays, tiled runs, per-row
// values, hyperparameters and constants, in loops, row sums and column
// sums, over rows shorter and longer than a segment, on teams of 1, 2 and
// 3 threads.
TEST(FuseElementwise, PairedStepsGiveTheInterpretersBits) {
  const CompiledLoops off(false);  // pairs run where loops are not compiled
  std::mt19937 gen(11);
  const std::pair<int64_t, int64_t> shapes[] = {{3, 5}, {37, 8}, {64, 32}, {9, 300}, {700, 24}};
  int paired = 0, kernels = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const auto [rows, cols] = shapes[size_t(trial) % std::size(shapes)];
    const std::string text =
        random_pair_chain(gen, rows, cols, trial % 3 == 2 ? "f64" : "f32", trial / 5 % 3);
    SCOPED_TRACE(text);
    const ir::Graph g = ir::parse(text);
    const auto [n, loops] =
        count_loops(g, [](const exec::FusedLoop& l) { return l.paired_steps(); });
    paired += n;
    kernels += loops;
    expect_same_on_every_team(g);
  }
  EXPECT_GE(paired, 40) << "over " << kernels << " fused kernels";
}

// A random loop of f32 sums, differences, products, quotients, negations,
// square roots, comparisons and selects over [rows, cols]: two arrays, a
// parameter updated in place, a bool array, a per-column run, a
// hyperparameter, a constant, and (with `per_row`) one value per row; f32
// and bool results, and the last f32 value summed over rows (end 1) or
// columns (end 2).
std::string random_compiled_loop(std::mt19937& gen, int64_t rows, int64_t cols, bool per_row,
                                 int end) {
  auto pick = [&gen](int64_t k) { return int64_t(gen() % uint64_t(k)); };
  const std::string f = fmt::format("f32[{},{}]", rows, cols),
                    b = fmt::format("bool[{},{}]", rows, cols);
  std::string text = fmt::format(R"(graph compiled {{
  %0 = input data "x" : {0}
  %1 = input data "z" : {0}
  %2 = input param "w" : {0}
  %3 = input data "m" : {1}
  %4 = input data "col" : f32[{2}]
  %5 = broadcast %4 {{dims=[1], shape=[{3},{2}]}} : {0}
  %6 = input hyper "h" : f32[]
  %7 = broadcast %6 {{dims=[], shape=[{3},{2}]}} : {0}
  %8 = full {{value=0.0}} : {0}
  %9 = input data "row" : f32[{3}]
  %10 = broadcast %9 {{dims=[0], shape=[{3},{2}]}} : {0}
)",
                                 f, b, cols, rows);
  std::vector<int64_t> floats = {0, 1, 2, 5, 7, 8}, bools = {3};
  if (per_row) floats.push_back(10);
  const char* arith[] = {"add", "sub", "mul", "div"};
  const char* compare[] = {"ge", "gt", "le", "lt", "eq", "ne"};
  std::string outs;
  int64_t next = 11, update = -1;
  const int64_t nops = 3 + pick(10);
  auto any = [&](const std::vector<int64_t>& v) { return v[size_t(pick(int64_t(v.size())))]; };
  for (int64_t k = 0; k < nops; ++k) {
    const int64_t kind = pick(8);
    if (kind < 4) {
      text += fmt::format("  %{} = {} %{}, %{} : {}\n", next, arith[pick(4)], any(floats),
                          any(floats), f);
      floats.push_back(next);
    } else if (kind == 4) {
      text += fmt::format("  %{} = {} %{} : {}\n", next, pick(2) ? "neg" : "sqrt", any(floats), f);
      floats.push_back(next);
    } else if (kind == 5) {
      text += fmt::format("  %{} = {} %{}, %{} : {}\n", next, compare[pick(6)], any(floats),
                          any(floats), b);
      bools.push_back(next);
    } else {
      text += fmt::format("  %{} = select %{}, %{}, %{} : {}\n", next, any(bools), any(floats),
                          any(floats), f);
      floats.push_back(next);
    }
    const bool is_bool = bools.back() == next;
    if (!is_bool && update < 0 && pick(4) == 0) {
      update = next;
      outs += fmt::format("  out update %{} -> %2 \"w\"\n", next);
    } else if (pick(3) == 0 || k + 1 == nops) {
      outs += fmt::format("  out user %{} \"r{}\"\n", next, k);
    }
    ++next;
  }
  if (end != 0 && floats.back() > 10) {  // the last f32 value summed over rows or columns
    text += fmt::format("  %{} = reduce_sum %{} {{axes=[{}]}} : f32[{}]\n", next, floats.back(),
                        end == 1 ? 1 : 0, end == 1 ? rows : cols);
    outs += fmt::format("  out user %{} \"sum\"\n", next);
  }
  return text + outs + "}";
}

// Floats with zeros of both signs, 6, infinities and NaN among them (one
// in `one_in` a special value; 0: none), and bools of 0 and 1. A sum over
// hundreds of such elements is NaN: sums are checked without them too.
std::vector<Tensor> special_inputs(const ir::Graph& g, std::mt19937& gen, unsigned one_in = 5) {
  std::vector<Tensor> in;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float special[] = {0.0f, -0.0f, 6.0f, INFINITY, -INFINITY, NAN, 1.0f};
  for (ir::ValueId v : g.inputs) {
    const ir::Type& t = g.type(v);
    const int64_t n = t.numel();
    if (t.dtype == DType::b8) {
      Tensor m = Tensor::zeros(t.shape, DType::b8);
      for (int64_t j = 0; j < n; ++j) m.data<uint8_t>()[j] = uint8_t(gen() % 2);
      in.push_back(m);
      continue;
    }
    std::vector<float> x(static_cast<size_t>(n));
    for (float& e : x)
      e = one_in > 0 && gen() % one_in == 0 ? special[gen() % std::size(special)] : normal(gen);
    in.push_back(Tensor::from_vector(x, t.shape));
  }
  return in;
}

// Loops of f32 arithmetic, comparisons and selects run as machine code made
// for them and give the interpreter's bits: random loops over arrays, bool
// arrays, parameters updated in place, tiled and gathered runs, one-element
// operands and per-row values (the code called once per row piece, the
// row's value in a register), ending in nothing, a row sum or a column sum, with NaN, infinities
// and signed zeros among the operands in half the loops (a long sum of them is NaN), over lengths
// below a vector, not a multiple of a vector, one chunk and many, on teams of 1, 2 and 3 threads.
TEST(FuseElementwise, CompiledLoopsGiveTheInterpretersBits) {
  ASSERT_TRUE(exec::compiled_loops()) << "this CPU has no AVX2: loops are not compiled";
  std::mt19937 gen(13);
  const std::pair<int64_t, int64_t> shapes[] = {{1, 7},   {3, 5},    {37, 8},   {64, 32},
                                                {9, 300}, {700, 24}, {2049, 1}, {5, 2051}};
  int compiled = 0, kernels = 0;
  for (int trial = 0; trial < 96; ++trial) {
    const auto [rows, cols] = shapes[size_t(trial) % std::size(shapes)];
    const std::string text = random_compiled_loop(gen, rows, cols, trial % 4 == 3, trial / 8 % 3);
    SCOPED_TRACE(text);
    const ir::Graph g = ir::parse(text);
    const auto [n, loops] = count_loops(g, [](const exec::FusedLoop& l) { return l.compiled(); });
    compiled += n;
    kernels += loops;
    expect_same_on_every_team(g, special_inputs(g, gen, trial % 2 ? 5 : 0));
  }
  EXPECT_GE(compiled, 48) << "of " << kernels << " fused kernels";
  // The listing says which loops are compiled.
  const exec::Program p = lower::lower(ir::parse(R"(graph listed {
  %0 = input data "x" : f32[64,32]
  %1 = input data "s" : f32[32]
  %2 = broadcast %1 {dims=[1], shape=[64,32]} : f32[64,32]
  %3 = mul %0, %2 : f32[64,32]
  %4 = full {value=0.0} : f32[64,32]
  %5 = le %3, %4 : bool[64,32]
  %6 = select %5, %4, %3 : f32[64,32]
  out user %5 "mask"
  out user %6 "y"
})"));
  EXPECT_NE(p.str().find(") : bool[64,32]  # compiled\n"), std::string::npos) << p.str();
}

// A mean over rows summed in f64 (BatchNorm's over NHWC rows): x times a
// per-column run, widened, summed; the product written out too.
std::string widened_mean(int64_t rows, int64_t cols) {
  return fmt::format(R"(graph mean {{
  %0 = input data "x" : f32[{0},{1}]
  %1 = input data "col" : f32[{1}]
  %2 = broadcast %1 {{dims=[1], shape=[{0},{1}]}} : f32[{0},{1}]
  %3 = mul %0, %2 : f32[{0},{1}]
  %4 = convert %3 {{dtype="f64"}} : f64[{0},{1}]
  %5 = reduce_sum %4 {{axes=[0]}} : f64[{1}]
  out user %3 "scaled"
  out user %5 "sum"
}})",
                     rows, cols);
}

// A compiled loop's column sum is summed as the code computes each row,
// into the ColumnStream's lanes (fill_rows), where the rows make a group of
// blocks for each thread (on one thread, always): random loops ending in
// a column sum (a quarter of them reading one value per row, loaded as
// the code starts each row), and means widened to f64, over rows below the
// lane count, at it and past it, in one block, in several, and in so many blocks that
// each group holds two (66000 rows), columns of 8 to 136 (more than one
// tile of the column walk), operands with NaN, infinities and signed zeros
// among them and (so that long columns' sums are not all NaN) without, on
// teams of 1, 2 and 3 threads: the interpreter's bits.
TEST(FuseElementwise, ColumnSumsOfCompiledLoopsGiveTheInterpretersBits) {
  ASSERT_TRUE(exec::compiled_loops()) << "this CPU has no AVX2: loops are not compiled";
  std::mt19937 gen(29);
  const std::pair<int64_t, int64_t> shapes[] = {{2, 8},      {63, 16},   {64, 8},
                                                {65, 24},    {1024, 8},  {1500, 40},
                                                {3100, 136}, {4096, 16}, {66000, 8}};
  int summed = 0, summed_per_row = 0;
  for (int trial = 0; trial < 36; ++trial) {
    const auto [rows, cols] = shapes[size_t(trial) % std::size(shapes)];
    const bool per_row = trial % 4 == 1;
    const std::string text = trial % 4 >= 2 ? widened_mean(rows, cols)
                                            : random_compiled_loop(gen, rows, cols, per_row, 2);
    SCOPED_TRACE(text);
    const ir::Graph g = ir::parse(text);
    const int n = count_loops(g, [](const exec::FusedLoop& l) { return l.sums_compiled(); }).first;
    summed += n;
    // Rows of 16 or more read a per-row value where it lies (narrower ones
    // gather it).
    if (per_row && cols >= 16 && text.find("%10") != text.rfind("%10")) summed_per_row += n;
    expect_same_on_every_team(g, special_inputs(g, gen, trial % 2 ? 5 : 0));
  }
  EXPECT_GE(summed, 24);
  EXPECT_GE(summed_per_row, 2);
}

// Loops over [a, b, c] reading a run along each row that moves with the
// rows' first dim ([a, c] broadcast over b) and one value per row ([a, b]
// broadcast over c) run as machine code called once per row piece: random
// chains over rows shorter than a vector, not a multiple of one, and
// longer than a chunk, ending in nothing or a row sum, on teams of 1, 2 and
// 3 threads: the interpreter's bits.
TEST(FuseElementwise, CompiledLoopsReadRunsAndValuesThatMoveAlongRows) {
  ASSERT_TRUE(exec::compiled_loops()) << "this CPU has no AVX2: loops are not compiled";
  std::mt19937 gen(31);
  auto pick = [&gen](int64_t k) { return int64_t(gen() % uint64_t(k)); };
  const int64_t shapes[][3] = {{3, 5, 16}, {2, 7, 21}, {5, 3, 64}, {2, 2, 2500}, {4, 9, 40}};
  int compiled = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const auto& d = shapes[size_t(trial) % std::size(shapes)];
    const std::string f = fmt::format("f32[{},{},{}]", d[0], d[1], d[2]);
    std::string text = fmt::format(R"(graph rows {{
  %0 = input data "x" : {0}
  %1 = input data "run" : f32[{1},{3}]
  %2 = broadcast %1 {{dims=[0,2], shape=[{1},{2},{3}]}} : {0}
  %3 = input data "row" : f32[{1},{2}]
  %4 = broadcast %3 {{dims=[0,1], shape=[{1},{2},{3}]}} : {0}
)",
                                   f, d[0], d[1], d[2]);
    const char* ops[] = {"add", "sub", "mul", "div"};
    std::vector<int64_t> values = {0, 2, 4};
    int64_t next = 5;
    for (int64_t k = 0, n = 2 + pick(6); k < n; ++k, ++next) {
      text += fmt::format("  %{} = {} %{}, %{} : {}\n", next, ops[pick(4)],
                          values[size_t(pick(int64_t(values.size())))],
                          values[size_t(pick(int64_t(values.size())))], f);
      values.push_back(next);
    }
    std::string outs = fmt::format("  out user %{} \"y\"\n", next - 1);
    if (trial % 2) {
      text += fmt::format("  %{} = reduce_sum %{} {{axes=[2]}} : f32[{},{}]\n", next, next - 1,
                          d[0], d[1]);
      outs += fmt::format("  out user %{} \"sum\"\n", next);
    }
    text += outs + "}";
    SCOPED_TRACE(text);
    const ir::Graph g = ir::parse(text);
    compiled += count_loops(g, [](const exec::FusedLoop& l) { return l.compiled(); }).first;
    expect_same_on_every_team(g, special_inputs(g, gen, trial % 3 ? 0 : 5));
  }
  EXPECT_GE(compiled, 20);
}

// Column sums whose operand is one op over stored arrays are summed as they
// read those arrays, never storing the operand: a mean of f32 summed in f64,
// a variance's sum of squares of a centered value the loop also writes, a
// sum of products of two operands, a square of an operand; over rows below,
// at and above a lane count and a block, and columns below, at and above a
// tile; on every team, the interpreter's bits.
TEST(FuseElementwise, ColumnSumsReadThroughTheirOperandsOpGiveTheInterpretersBits) {
  int loads = 0;
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {2, 2}, {3, 5}, {64, 64}, {65, 65}, {700, 130}, {1025, 7}, {2000, 3}, {3000, 33}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows of " << cols);
    const std::string shape = fmt::format("[{},{}]", rows, cols);
    const ir::Graph g = ir::parse(fmt::format(R"(graph column_operands {{
  %0 = input data "x" : f32{0}
  %1 = input data "y" : f32{0}
  %2 = input data "d" : f64{0}
  %3 = convert %0 {{dtype="f64"}} : f64{0}
  %4 = reduce_sum %3 {{axes=[0]}} : f64[{1}]
  %5 = full {{value={2}.0}} : f64[{1}]
  %6 = div %4, %5 : f64[{1}]
  %7 = convert %6 {{dtype="f32"}} : f32[{1}]
  %8 = broadcast %7 {{dims=[1], shape={0}}} : f32{0}
  %9 = sub %0, %8 : f32{0}
  %10 = mul %9, %9 : f32{0}
  %11 = reduce_sum %10 {{axes=[0]}} : f32[{1}]
  %12 = mul %0, %1 : f32{0}
  %13 = reduce_sum %12 {{axes=[0]}} : f32[{1}]
  %14 = mul %2, %2 : f64{0}
  %15 = reduce_sum %14 {{axes=[0]}} : f64[{1}]
  out user %7 "mean"
  out user %9 "centered"
  out user %11 "squares"
  out user %13 "products"
  out user %15 "squares64"
}})",
                                              shape, cols, rows));
    for (const exec::Kernel& k : lower::lower(g).kernels)
      if (k.loop) loads += k.loop->reads_column_operand();
    expect_same_on_every_team(g);
  }
  EXPECT_GE(loads, 4 * 8);
}

// A column sum of an operand's squares, where a result of the same loop is
// written over that operand (its storage given to the result): the sum
// cannot read the operand after the loop, so it sums what the loop computed
// before the overwrite.
TEST(FuseElementwise, ColumnSumOfAnOperandTheLoopOverwritesSumsItBeforeTheOverwrite) {
  const int64_t rows = 300, cols = 40;
  const ir::Graph body = ir::parse(fmt::format(R"(graph body {{
  %0 = input data "x" : f32[{0},{1}]
  %1 = input data "y" : f32[{0},{1}]
  %2 = full {{value=0.5}} : f32[{0},{1}]
  %3 = sub %1, %2 : f32[{0},{1}]
  %4 = mul %0, %0 : f32[{0},{1}]
  %5 = reduce_sum %4 {{axes=[0]}} : f32[{1}]
  out user %3 "over_x"
  out user %5 "squares"
}})",
                                               rows, cols));
  const exec::FusedLoop loop(body, {0, 1}, {0, 2});  // "over_x" takes x's storage
  EXPECT_FALSE(loop.reads_column_operand());
  std::vector<float> x(size_t(rows * cols)), y(x.size()), squares(x.size()),
      want(static_cast<size_t>(cols));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 0.25f + float(i % 97) / 64.0f;
    y[i] = float(i % 13);
    squares[i] = x[i] * x[i];
  }
  exec::reduce_sum<float>({rows, cols}, {0, 1}, squares.data(), want.data());
  const int before = exec::num_threads();
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    exec::set_num_threads(threads);
    std::vector<float> storage = x, got(static_cast<size_t>(cols));
    std::vector<std::byte> scratch(size_t(exec::fused_scratch_bytes(body)));
    const void* ins[] = {storage.data(), y.data()};
    void* outs[] = {storage.data(), got.data()};
    loop.run(ins, outs, scratch.data());
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(got[size_t(c)], want[size_t(c)]) << "column " << c;
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(storage[i], y[i] - 0.5f) << "element " << i;
  }
  exec::set_num_threads(before);
}

// A broadcast operand repeating one run along every row (a per-channel
// value over NHWC rows, a LayerNorm weight) is tiled once a run of the
// kernel and read as an array at the chunk's offset in its row: rows that
// do and do not divide a chunk, rows of one chunk exactly, one element more
// (gathered then), f32, f64 and bool operands, read by loop steps, by a row
// sum straight from the tile's chunk, and by a column sum; on every team,
// the interpreter's bits.
TEST(FuseElementwise, RunsRepeatedAlongEveryRowAreTiledWithTheInterpretersBits) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {700, 3}, {301, 13}, {257, 32}, {41, 100}, {9, 1000}, {5, 2048}, {4, 2049}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows of " << cols);
    const std::string shape = fmt::format("[{},{}]", rows, cols);
    const ir::Graph g = ir::parse(fmt::format(R"(graph tiles {{
  %0 = input data "x" : f32{0}
  %1 = input data "b" : f32[{1}]
  %2 = input data "d" : f64[{1}]
  %3 = input data "m" : bool[{1}]
  %4 = input data "y" : f64{0}
  %5 = broadcast %1 {{dims=[1], shape={0}}} : f32{0}
  %6 = mul %0, %5 : f32{0}
  %7 = broadcast %3 {{dims=[1], shape={0}}} : bool{0}
  %8 = full {{value=0.0}} : f32{0}
  %9 = select %7, %6, %8 : f32{0}
  %10 = exp %9 : f32{0}
  %11 = broadcast %2 {{dims=[1], shape={0}}} : f64{0}
  %12 = add %4, %11 : f64{0}
  %13 = reduce_sum %5 {{axes=[1]}} : f32[{2}]
  %14 = reduce_sum %6 {{axes=[0]}} : f32[{1}]
  out user %10 "e"
  out user %12 "z"
  out user %13 "rowsum"
  out user %14 "colsum"
}})",
                                              shape, cols, rows));
    expect_same_on_every_team(g);
  }
}

// Plain SGD on a weight whose gradient is a product: one product
// accumulated into the weight (w's); a gradient read elsewhere too (v's, an
// output) stays a buffer and its update a loop.
TEST(FuseUpdateIntoProduct, PlainSgdAccumulatesTheGradientsProductIntoTheWeight) {
  const ir::Graph in = golden_input("update_into_product", "sgd_into_product");
  const exec::Program p = lower::lower(in);
  EXPECT_EQ(p.copy_bytes, 0) << p.str();
  int accumulated = 0;
  for (const exec::Kernel& k : p.kernels) accumulated += k.op == ir::Op::matmul_add;
  EXPECT_EQ(accumulated, 1) << p.str();
}

// update_into_product/<name>.in.ir lowered has one matmul_add (its golden
// output is pass_goldens_test.cpp's); then `in` lowered and interpreted, run after run (input
// `hyper` set to the next of `values` first, the updates fed on), agree on
// every update: bit for bit when `exact` (the unfused update computes
// (beta * c) + (alpha * (a @ b)) too, each product rounded), else within a
// few roundings (the unfused update is another expression of the same sum).
// Inputs in `fixed` (index, value) are set first.
void expect_update_into_product(const std::string& name, size_t hyper,
                                const std::vector<float>& values, bool exact,
                                const std::vector<std::pair<size_t, float>>& fixed = {}) {
  const ir::Graph in = golden_input("update_into_product", name);
  std::vector<Tensor> args = inputs_for(in);
  for (auto [i, value] : fixed) args[i] = Tensor::full({}, value, DType::f32);
  exec::Executable e(lower::lower(in, {}));
  int accumulated = 0;
  for (const exec::Kernel& k : e.program().kernels) accumulated += k.op == ir::Op::matmul_add;
  EXPECT_EQ(accumulated, 1) << e.program().str();
  EXPECT_EQ(e.program().copy_bytes, 0);
  std::vector<Tensor> live;
  for (const Tensor& t : args) live.push_back(t.clone());
  for (size_t i = 0; i < live.size(); ++i) e.bind_input(i, live[i].impl()->storage->data);
  for (float value : values) {
    args[hyper] = Tensor::full({}, value, DType::f32);
    *static_cast<float*>(live[hyper].impl()->storage->data) = value;
    const std::vector<Tensor> want = exec::interpret(in, args);
    e.run();
    for (size_t o = 0; o < in.outputs.size(); ++o) {
      const size_t i = size_t(in.input_index(in.outputs[o].aliased_input));
      const std::vector<double> w = want[o].to_vector(), r = live[i].to_vector();
      for (size_t j = 0; j < w.size(); ++j) {
        if (exact)
          EXPECT_EQ(r[j], w[j]) << in.outputs[o].name << ", " << j;
        else
          EXPECT_NEAR(r[j], w[j], 1e-6 * std::abs(w[j]) + 1e-7) << in.outputs[o].name << ", " << j;
      }
      args[i] = want[o];
    }
  }
}

// SGD with momentum: the gradient's product is accumulated into the
// momentum buffer (beta = momentum, alpha = 1 - dampening), and the weight's
// update reads the buffer: the unfused update's bits, also when momentum
// changes between runs (and with momentum 1, where nothing is scaled).
TEST(FuseUpdateIntoProduct, MomentumAccumulatesTheGradientsProductIntoTheBuffer) {
  expect_update_into_product("momentum_into_product", 3, {0.9f, 0.9f, 0.5f, 1.0f, 0.7f}, true);
}

// Without dampening (alpha = 1, SGD's default) the product runs without a
// runtime scale (oneDNN's brgemm rather than gemm:jit): the same bits.
TEST(FuseUpdateIntoProduct, MomentumWithoutDampeningGivesTheSameBits) {
  expect_update_into_product("momentum_into_product", 3, {0.9f, 0.9f, 0.5f, 1.0f, 0.7f}, true,
                             {{4, 1.0f}});
}

// Plain SGD (alpha = -lr, a multiply after the product) whose gradient sums
// over a long contraction: the unfused update's bits as the learning rate
// changes, and with lr = -1 (alpha = 1, the product added as it is).
TEST(FuseUpdateIntoProduct, PlainSgdOverALongContractionGivesTheUnfusedBits) {
  expect_update_into_product("sgd_long_contraction_into_product", 1, {0.05f, 0.05f, 0.2f, -1.0f},
                             true);
}

// Plain SGD with weight decay: W' = (1 - lr * wd) * W - lr * (a @ b), one
// product accumulated into the weight with beta = 1 - lr * wd, where the
// unfused update computes W - ((a @ b) + W * wd) * lr: equal within
// roundings.
TEST(FuseUpdateIntoProduct, WeightDecayIsTheAccumulatorsScale) {
  expect_update_into_product("sgd_weight_decay_into_product", 2, {0.1f, 0.1f, 0.2f}, false);
}

// A relu of a linear layer's output is the product's epilogue, its mask
// read from the rectified product, bit for bit (values of both signs, and a
// NaN, which stays NaN as in PyTorch); a product whose pre-activation value
// is an output keeps its relu.
TEST(FuseActivationIntoProduct, ReluOfALinearLayerIsTheProductsEpilogue) {
  const ir::Graph in = golden_input("activation_into_product", "relu_into_product");
  std::vector<Tensor> inputs = inputs_for(in);
  const std::vector<Tensor> out = exec::interpret(in, inputs);
  const std::vector<double> y = out[0].to_vector();
  EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](double v) { return v == 0; }));
  EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](double v) { return v > 0; }));
  inputs[0] = inputs[0].clone();
  inputs[0].data<float>()[5] = NAN;  // row 0 of the product
  const std::vector<double> with_nan = exec::interpret(in, inputs)[0].to_vector();
  EXPECT_TRUE(std::isnan(with_nan[0]) && std::isnan(with_nan[3]));
  EXPECT_FALSE(std::isnan(with_nan[4]));
  expect_same_everywhere(in, inputs);
}

// A residual added to a linear layer's output is accumulated by the
// product, bit for bit, in the residual's block where it dies there; a
// product read by anything else keeps its add.
TEST(FuseResidualIntoProduct, AResidualIsTheProductsAccumulator) {
  const ir::Graph in = golden_input("residual_into_product", "residual_into_product");
  const exec::Program p = lower::lower(in);
  const exec::Kernel* k = nullptr;
  for (const exec::Kernel& kk : p.kernels)
    if (kk.op == ir::Op::matmul_bias_add) k = &kk;
  ASSERT_NE(k, nullptr) << p.str();
  EXPECT_EQ(k->out, k->in[3]) << "exp(x) dies at the add: the product adds into its block\n"
                              << p.str();
}

TEST(FuseElementwise, AdamUpdateOfOneParameterIsOneKernelAndExact) {
  const ir::Graph g = ir::parse(testing::read_file(std::string(WS_TEST_DIR) + "/adam_step.ir"));
  expect_same_everywhere(g, inputs_for(g));
}

// Lowered with fusion, no fused kernel writes a slot it reads (each graph
// below reads its operand at other positions than those it writes), and
// every way of running g gives the same bits.
void expect_fused_results_apart(const ir::Graph& g) {
  const exec::Program p = lower::lower(g);
  for (const exec::Kernel& k : p.kernels)
    if (k.loop)
      for (int32_t s : k.outs())
        EXPECT_EQ(std::count(k.in.begin(), k.in.end(), s), 0)
            << "slot " << s << " is an operand and a result of " << k.name << "\n"
            << p.str();
  expect_same_everywhere(g, inputs_for(g));
}

// A fused result never takes the block of an operand the loop reads through
// a broadcast at other elements than the result's own, even where the two
// have the same size and the operand dies there: a gradient over [N, C]
// broadcast over 1x1 feature maps (average pooling's backward) into a loop
// over [N, C, 1, 1], as a reduction's loop and as a plain loop; and a
// per-row result of a sum over rows that reads a per-column operand, which
// an early row's result would overwrite.
TEST(Lower, FusedResultNeverTakesTheBlockOfAnOperandReadThroughABroadcast) {
  expect_fused_results_apart(ir::parse(R"(graph reduce_over_1x1 {
  %0 = input data "x" : f32[4,8]
  %1 = input data "m" : bool[4,8,1,1]
  %2 = exp %0 : f32[4,8]
  %3 = broadcast %2 {dims=[0,1], shape=[4,8,1,1]} : f32[4,8,1,1]
  %4 = full {value=0.0} : f32[4,8,1,1]
  %5 = select %1, %4, %3 : f32[4,8,1,1]
  %6 = reduce_sum %5 {axes=[0,2,3]} : f32[8]
  %7 = reduce_sum %5 {axes=[1,2,3]} : f32[4]
  out user %6 "s"
  out user %7 "t"
}
)"));
  expect_fused_results_apart(ir::parse(R"(graph loop_over_1x1 {
  %0 = input data "x" : f32[4,8]
  %1 = input data "y" : f32[4,8,1,1]
  %2 = exp %0 : f32[4,8]
  %3 = broadcast %2 {dims=[0,1], shape=[4,8,1,1]} : f32[4,8,1,1]
  %4 = input data "w" : f32[2,8,1,1]
  %5 = mul %1, %3 : f32[4,8,1,1]
  %6 = tanh %5 : f32[4,8,1,1]
  %7 = conv2d %6, %4 {dilation=[1,1], groups=1, padding=[0,0], stride=[1,1]} : f32[4,2,1,1]
  out user %7 "t"
}
)"));
  expect_fused_results_apart(ir::parse(R"(graph rows_read_columns {
  %0 = input data "x" : f32[512,512]
  %1 = input data "y" : f32[512]
  %2 = exp %1 : f32[512]
  %3 = broadcast %2 {dims=[1], shape=[512,512]} : f32[512,512]
  %4 = mul %0, %3 : f32[512,512]
  %5 = reduce_sum %4 {axes=[1]} : f32[512]
  %6 = reduce_sum %5 {axes=[0]} : f32[]
  out user %6 "s"
}
)"));
}

// The same for an update: a parameter read through a broadcast by the loop
// of the reduction that gives its update is updated by a copy.
TEST(Lower, FusedUpdateOfAnOperandReadThroughABroadcastIsCopied) {
  const ir::Graph g = ir::parse(R"(graph update_read_by_rows {
  %0 = input data "x" : f32[512,512]
  %1 = input param "w" : f32[512]
  %2 = input hyper "lr" : f32[]
  %3 = broadcast %1 {dims=[1], shape=[512,512]} : f32[512,512]
  %4 = mul %0, %3 : f32[512,512]
  %5 = reduce_sum %4 {axes=[1]} : f32[512]
  %6 = broadcast %2 {dims=[], shape=[512]} : f32[512]
  %7 = mul %5, %6 : f32[512]
  %8 = sub %1, %7 : f32[512]
  out update %8 -> %1 "w"
}
)");
  EXPECT_EQ(lower::lower(g).copy_bytes, 512 * 4);
  expect_fused_results_apart(g);
}

// A per-row statistic read through a broadcast over the reduced dim alone
// (a LayerNorm's mean, by its variance's loop) is read by its own row's
// loop only, which runs before that row's result is written: the result
// takes its block where it dies.
TEST(Lower, FusedPerRowResultTakesTheBlockOfItsRowsStatistic) {
  const ir::Graph g = ir::parse(R"(graph variance_over_mean {
  %0 = input data "x" : f32[64,128]
  %1 = reduce_sum %0 {axes=[1]} : f32[64]
  %2 = full {value=128.0} : f32[64]
  %3 = div %1, %2 : f32[64]
  %4 = broadcast %3 {dims=[0], shape=[64,128]} : f32[64,128]
  %5 = sub %0, %4 : f32[64,128]
  %6 = mul %5, %5 : f32[64,128]
  %7 = reduce_sum %6 {axes=[1]} : f32[64]
  %8 = reduce_sum %7 {axes=[0]} : f32[]
  out user %8 "s"
}
)");
  const exec::Program p = lower::lower(g);
  ASSERT_EQ(p.kernels.size(), 3u) << p.str();
  EXPECT_EQ(p.kernels[1].out, p.kernels[1].in[1]) << p.str();
  expect_same_everywhere(g, inputs_for(g));
}

// A one-element result of a reduction may take the block of a one-element
// operand that dies there; an epilogue step after the result's reads the
// operand, so the result waits in a buffer until the epilogue is done.
TEST(Lower, FusedEpilogueReadsAOneElementOperandBeforeItsResultOverwritesIt) {
  const ir::Graph g = ir::parse(R"(graph epilogue_reads_scalar {
  %0 = input data "x" : f32[64]
  %1 = input data "y" : f32[8]
  %2 = reduce_max %1 {axes=[0]} : f32[]
  %3 = reduce_sum %0 {axes=[0]} : f32[]
  %4 = mul %3, %2 : f32[]
  %5 = add %4, %2 : f32[]
  %6 = broadcast %4 {dims=[], shape=[64]} : f32[64]
  %7 = mul %0, %6 : f32[64]
  out user %5 "s"
  out user %7 "t"
}
)");
  expect_same_everywhere(g, inputs_for(g));
}

}  // namespace
}  // namespace ws
