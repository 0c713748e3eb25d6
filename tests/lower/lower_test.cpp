// Lowering: memory planning, simplification, in-place updates, and compiled
// Programs against the interpreter.
#include <random>

#include <gtest/gtest.h>

#include "exec/interpreter.hpp"
#include "exec/program.hpp"
#include "ir/builder.hpp"
#include "lower/lower.hpp"
#include "lower/plan_memory.hpp"
#include "lower/simplify.hpp"
#include "lowered_runs.hpp"
#include "tensor/tensor_impl.hpp"
#include "test_util.hpp"
#include "wholestep/compare.hpp"

namespace ws {
namespace {

using ir::Op;
using ir::ValueId;

TEST(PlanMemory, LiveRangesNeverShareBytesAndReuseFreedBlocks) {
  std::mt19937 gen(1);
  std::vector<lower::LiveRange> ranges;
  for (int i = 0; i < 200; ++i) {
    int64_t def = int64_t(gen() % 100);
    ranges.push_back({int64_t(1 + gen() % 5000), def, def + int64_t(gen() % 20)});
  }
  lower::MemoryPlan plan = lower::plan_memory(ranges);
  for (size_t i = 0; i < ranges.size(); ++i)
    for (size_t j = i + 1; j < ranges.size(); ++j) {
      bool time = ranges[i].def <= ranges[j].last && ranges[j].def <= ranges[i].last;
      bool space = plan.offsets[i] < plan.offsets[j] + ranges[j].bytes &&
                   plan.offsets[j] < plan.offsets[i] + ranges[i].bytes;
      ASSERT_FALSE(time && space) << "ranges " << i << " and " << j << " overlap";
    }
  EXPECT_GE(plan.arena_bytes, plan.max_live);
  int64_t total = 0;
  for (auto& r : ranges) total += r.bytes;
  EXPECT_LT(plan.arena_bytes, total / 2) << "freed blocks are not reused";
}

TEST(PlanMemory, SequentialChainNeedsTwoBuffers) {
  std::vector<lower::LiveRange> chain;
  for (int i = 0; i < 10; ++i) chain.push_back({1024, i, i + 1});
  lower::MemoryPlan plan = lower::plan_memory(chain);
  EXPECT_EQ(plan.arena_bytes, 2 * 1024);  // value i+1 is written while i is read
  EXPECT_EQ(plan.max_live, 2 * 1024);
}

// In definition order, a freed small block cannot hold the next big value
// and the arena grows; placing the largest first reaches the lower bound.
TEST(PlanMemory, KeepsTheSmallerOfTwoPlacements) {
  const std::vector<lower::LiveRange> ranges = {{128, 0, 0}, {256, 0, 2}, {320, 1, 2}};
  lower::MemoryPlan plan = lower::plan_memory(ranges);
  EXPECT_EQ(plan.max_live, 256 + 320);
  EXPECT_EQ(plan.arena_bytes, plan.max_live);
}

TEST(Simplify, RemovesDeadAndRepeatedNodes) {
  ir::Graph g = ir::parse(R"(graph g {
  %0 = input param "w" : f32[2]
  %1 = exp %0 : f32[2]
  %2 = exp %0 : f32[2]
  %3 = log %0 : f32[2]
  %4 = add %1, %2 : f32[2]
  out user %4 "y"
}
)");
  EXPECT_EQ(ir::print(lower::simplify(g)), R"(graph g {
  %0 = input param "w" : f32[2]
  %1 = exp %0 : f32[2]
  %2 = add %1, %1 : f32[2]
  out user %2 "y"
}
)");
}

// An SGD-like update: w' = w - lr * (w * x), aliased to w.
ir::Graph update_graph() {
  return ir::parse(R"(graph step {
  %0 = input param "w" : f32[4]
  %1 = input hyper "lr" : f32[]
  %2 = input data "x" : f32[4]
  %3 = mul %0, %2 : f32[4]
  %4 = reduce_sum %3 {axes=[0]} : f32[]
  %5 = broadcast %1 {dims=[], shape=[4]} : f32[4]
  %6 = mul %3, %5 : f32[4]
  %7 = sub %0, %6 : f32[4]
  out loss %4 "loss"
  out update %7 -> %0 "w"
}
)");
}

TEST(Lower, UpdateIsWrittenInPlaceAndScalarsAreNotMaterialized) {
  exec::Program p = lower::lower(update_graph(), {.fuse = false});
  EXPECT_EQ(p.copy_bytes, 0);
  // mul, reduce_sum, mul (lr read as a scalar: no broadcast kernel), sub.
  ASSERT_EQ(p.kernels.size(), 4u) << p.str();
  const exec::Kernel& last = p.kernels.back();
  EXPECT_EQ(p.slots[size_t(last.out)].kind, exec::SlotKind::input) << p.str();

  float w[4] = {1, 2, 3, 4}, x[4] = {1, 1, 2, 2}, lr = 0.5f, loss = 0;
  exec::Executable e(std::move(p));
  e.bind_input(0, w);
  e.bind_input(1, &lr);
  e.bind_input(2, x);
  e.bind_output(0, &loss);
  e.run();
  EXPECT_FLOAT_EQ(loss, 1 + 2 + 6 + 8);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[3], 4 - 0.5f * 8);
}

TEST(Lower, UpdateReadAfterItsWriteIsCopiedAndCounted) {
  // %4 reads w after the update's kernel would have run: not in place.
  ir::Graph g = ir::parse(R"(graph step {
  %0 = input param "w" : f32[4]
  %1 = neg %0 : f32[4]
  %2 = exp %0 : f32[4]
  out update %1 -> %0 "w"
  out user %2 "e"
}
)");
  exec::Program p = lower::lower(g);
  EXPECT_EQ(p.copy_bytes, 16) << p.str();
  float w[4] = {0, 1, 2, 3}, e[4];
  exec::Executable ex(std::move(p));
  ex.bind_input(0, w);
  ex.bind_output(1, e);
  ex.run();
  EXPECT_FLOAT_EQ(w[2], -2);
  EXPECT_FLOAT_EQ(e[2], std::exp(2.0f));
}

TEST(Lower, ReshapeIsAViewAndOnlyAReshapedOutputIsCopied) {
  // %1 and %3 are views (of the input, then of %2); %4 is an output, so the
  // caller's storage receives a copy.
  ir::Graph g = ir::parse(R"(graph g {
  %0 = input data "x" : f32[2,3]
  %1 = reshape %0 {shape=[3,2]} : f32[3,2]
  %2 = exp %1 : f32[3,2]
  %3 = reshape %2 {shape=[6]} : f32[6]
  %4 = reshape %2 {shape=[2,3]} : f32[2,3]
  %5 = neg %3 : f32[6]
  out user %5 "y"
  out user %4 "z"
}
)");
  exec::Program p = lower::lower(g);
  ASSERT_EQ(p.kernels.size(), 3u) << p.str();  // exp, neg, the copy of %4
  EXPECT_EQ(p.slots[size_t(p.kernels[0].in[0])].kind, exec::SlotKind::input) << p.str();
  EXPECT_EQ(p.kernels[1].in[0], p.kernels[0].out) << p.str();
  float x[6] = {0, 1, 2, 3, 4, 5}, y[6], z[6];
  exec::Executable e(std::move(p));
  e.bind_input(0, x);
  e.bind_output(0, y);
  e.bind_output(1, z);
  e.run();
  for (int i = 0; i < 6; ++i) {
    EXPECT_FLOAT_EQ(y[i], -std::exp(float(i)));
    EXPECT_FLOAT_EQ(z[i], std::exp(float(i)));
  }
}

// A causal mask built from iotas depends on nothing the step is given: it
// is computed once, at compile time, into the program's constants, and the
// select reads it there. A value too large to keep (the full over x) stays
// a kernel.
TEST(Lower, ValuesComputedFromConstantsAloneAreProgramConstants) {
  ir::Graph g = ir::parse(R"(graph g {
  %0 = input data "x" : f32[4,4]
  %1 = iota {axis=0} : i64[4,4]
  %2 = iota {axis=1} : i64[4,4]
  %3 = ge %1, %2 : bool[4,4]
  %4 = full {value=-1.0} : f32[4,4]
  %5 = select %3, %0, %4 : f32[4,4]
  %6 = full {value=0.0} : f32[256,128]
  %7 = neg %6 : f32[256,128]
  out user %5 "y"
  out user %7 "z"
}
)");
  exec::Program p = lower::lower(g, {.fuse = false});
  ASSERT_EQ(p.kernels.size(), 3u) << p.str();  // the select; the large full and its neg
  EXPECT_EQ(p.slots[size_t(p.kernels[0].in[0])].kind, exec::SlotKind::constant) << p.str();
  float x[16], y[16];
  std::vector<float> z(256 * 128);
  for (int i = 0; i < 16; ++i) x[i] = float(i);
  exec::Executable e(std::move(p));
  e.bind_input(0, x);
  e.bind_output(0, y);
  e.bind_output(1, z.data());
  e.run();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(y[i * 4 + j], i >= j ? float(i * 4 + j) : -1.0f);
}

// An elementwise kernel writes over an operand of its size that dies there;
// one that is read again later keeps its own block.
TEST(Lower, ElementwiseResultTakesTheBlockOfAnOperandThatDiesThere) {
  ir::Graph g = ir::parse(R"(graph g {
  %0 = input data "x" : f32[64]
  %1 = neg %0 : f32[64]
  %2 = exp %1 : f32[64]
  %3 = mul %2, %2 : f32[64]
  %4 = tanh %3 : f32[64]
  %5 = add %4, %3 : f32[64]
  %6 = sigmoid %5 : f32[64]
  out user %6 "y"
}
)");
  exec::Program p = lower::lower(g, {.fuse = false});  // one kernel per op
  ASSERT_EQ(p.kernels.size(), 6u) << p.str();
  auto out = [&](size_t k) { return p.kernels[k].out; };
  EXPECT_EQ(out(1), out(0)) << "exp over neg's result\n" << p.str();
  EXPECT_EQ(out(2), out(0)) << "mul over exp's result\n" << p.str();
  EXPECT_NE(out(3), out(2)) << "tanh must not overwrite %3: add reads it\n" << p.str();
  EXPECT_EQ(out(4), out(3)) << "add over tanh's result\n" << p.str();
  std::vector<Tensor> in = {randn({64})};
  const Tensor want = exec::interpret(g, in)[0];
  Tensor got = Tensor::zeros({64});
  exec::Executable e(std::move(p));
  e.bind_input(0, in[0].data<float>());
  e.bind_output(0, got.data<float>());
  e.run();
  EXPECT_EQ(max_rel_diff(got, want), 0.0);
}

// Per-channel and per-row statistics broadcast over activations (BatchNorm,
// LayerNorm), in every position and dtype: no broadcast kernel runs, and the
// result is the interpreter's, bit for bit.
TEST(Lower, BroadcastOperandsAreReadThroughStridesNotMaterialized) {
  struct Case {
    Shape small, big;
    std::vector<int64_t> dims;  // where small's dims land in big
  };
  const Case cases[] = {{{3}, {2, 3, 4, 5}, {1}},        // [C] over NCHW: a middle dim
                        {{4, 5}, {2, 3, 4, 5}, {2, 3}},  // trailing dims
                        {{2, 1}, {2, 7}, {0, 1}},        // a column: one value per row
                        {{7}, {2, 7}, {1}},              // a row: bias
                        {{2, 1, 5}, {2, 3, 5}, {0, 1, 2}}};
  for (bool fuse : {false, true})
    for (DType dt : {DType::f32, DType::f64})
      for (const Case& c : cases)
        for (int side = 0; side < 2; ++side) {
          ir::Graph g;
          ir::Builder b(g);
          ValueId x = b.input(ir::InputRole::data, "x", {dt, c.big});
          ValueId s = b.input(ir::InputRole::data, "s", {dt, c.small});
          ValueId bs = b.add(Op::broadcast, {s}, ir::Attrs{{"dims", c.dims}, {"shape", c.big}});
          ValueId y = side ? b.binary(Op::sub, bs, x) : b.binary(Op::mul, x, bs);
          ValueId m = b.binary(Op::gt, x, bs);
          ValueId z = b.add(Op::select, {m, y, bs});
          g.outputs.push_back({ir::OutputRole::user, z, ir::kNoValue, "z"});
          exec::Program p = lower::lower(g, {.fuse = fuse});
          for (const exec::Kernel& k : p.kernels)
            EXPECT_NE(std::string(k.name), "broadcast") << p.str();
          // Unfused: three kernels. Fused: one loop, unless the broadcast
          // repeats one value along rows too short to pay for gathering it.
          if (!fuse) ASSERT_EQ(p.kernels.size(), 3u) << p.str();

          std::vector<Tensor> in = {randn(c.big, 0, 1, dt), randn(c.small, 0, 1, dt)};
          const Tensor want = exec::interpret(g, in)[0];
          Tensor got = Tensor::zeros(c.big, dt);
          exec::Executable e(std::move(p));
          e.bind_input(0, in[0].impl()->storage->data);
          e.bind_input(1, in[1].impl()->storage->data);
          e.bind_output(0, got.impl()->storage->data);
          e.run();
          EXPECT_EQ(max_rel_diff(got, want), 0.0) << dtype_name(dt) << " side " << side;
        }
}

// Attention's head split: q and k stored [B, T, H, D], transposed to
// [B, H, T, D] for q k^T. The product reads them where they lie: no transpose
// kernel runs, and the result is the interpreter's, bit for bit.
TEST(Lower, TransposedMatmulOperandsAreReadThroughStrides) {
  ir::Graph g;
  ir::Builder b(g);
  const ir::Attrs heads{{"perm", std::vector<int64_t>{0, 2, 1, 3}}};
  ValueId q = b.input(ir::InputRole::data, "q", {DType::f32, {2, 5, 3, 4}});
  ValueId k = b.input(ir::InputRole::data, "k", {DType::f32, {2, 5, 3, 4}});
  ValueId s =
      b.matmul(b.add(Op::transpose, {q}, heads), b.add(Op::transpose, {k}, heads), false, true);
  g.outputs.push_back({ir::OutputRole::user, s, ir::kNoValue, "scores"});
  exec::Program p = lower::lower(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str();  // the product alone, reading the inputs
  EXPECT_EQ(p.slots[size_t(p.kernels[0].in[0])].kind, exec::SlotKind::input) << p.str();

  std::vector<Tensor> in = {randn({2, 5, 3, 4}), randn({2, 5, 3, 4})};
  const Tensor want = exec::interpret(g, in)[0];
  Tensor got = Tensor::zeros({2, 3, 5, 5});
  exec::Executable e(std::move(p));
  e.bind_input(0, in[0].data<float>());
  e.bind_input(1, in[1].data<float>());
  e.bind_output(0, got.data<float>());
  e.run();
  EXPECT_EQ(max_rel_diff(got, want), 0.0);
}

// Attention's head merge: the values' product [B, H, T, D] transposed back
// to [B, T, H, D]. A product read only by the transpose writes the transposed
// layout itself; one with another reader keeps its own buffer and the
// transpose runs. Either way the interpreter's bits.
TEST(Lower, ProductReadOnlyByATransposeWritesItsLayout) {
  for (bool second_reader : {false, true}) {
    ir::Graph g;
    ir::Builder b(g);
    ValueId a = b.input(ir::InputRole::data, "a", {DType::f32, {2, 3, 5, 5}});
    ValueId v = b.input(ir::InputRole::data, "v", {DType::f32, {2, 3, 5, 4}});
    ValueId m = b.matmul(a, v, false, false);
    ValueId t = b.add(Op::transpose, {m}, ir::Attrs{{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
    ValueId out = b.reshape(t, {2, 5, 12});
    if (second_reader) out = b.binary(Op::add, out, b.reshape(b.unary(Op::neg, m), {2, 5, 12}));
    g.outputs.push_back({ir::OutputRole::user, out, ir::kNoValue, "y"});
    exec::Program p = lower::lower(g);
    bool transposes = false;
    for (const exec::Kernel& k : p.kernels) transposes |= std::string(k.name) == "transpose";
    EXPECT_EQ(transposes, second_reader) << p.str();

    std::vector<Tensor> in = {randn({2, 3, 5, 5}), randn({2, 3, 5, 4})};
    const Tensor want = exec::interpret(g, in)[0];
    Tensor got = Tensor::zeros({2, 5, 12});
    exec::Executable e(std::move(p));
    e.bind_input(0, in[0].data<float>());
    e.bind_input(1, in[1].data<float>());
    e.bind_output(0, got.data<float>());
    e.run();
    EXPECT_EQ(max_rel_diff(got, want), 0.0) << "second reader " << second_reader;
  }
}

// An NHWC image's planes read as NCHW matrices ([N, C, H, W] of a
// [N, H, W, C] value: neither matrix dim unit-strided) would get oneDNN's
// reference kernel: the transpose runs as a kernel of its own, both for an
// operand and for a product read only by such a transpose. The
// interpreter's bits either way.
TEST(Lower, TransposesWithoutAUnitStridedMatrixDimRunAsKernels) {
  for (bool out : {false, true}) {
    ir::Graph g;
    ir::Builder b(g);
    ValueId x = b.input(ir::InputRole::data, "x", {DType::f32, {2, 3, 3, 4}});
    ValueId w = b.input(ir::InputRole::data, "w", {DType::f32, {2, 4, 3, 5}});
    ValueId y = ir::kNoValue;
    if (out) {  // [2,4,3,3] @ [2,4,3,5] -> [2,4,3,5], stored [2,3,5,4]
      ValueId m =
          b.matmul(b.add(Op::transpose, {x}, ir::Attrs{{"perm", std::vector<int64_t>{0, 3, 1, 2}}}),
                   w, false, false);
      y = b.add(Op::transpose, {m}, ir::Attrs{{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
    } else {
      ValueId t = b.add(Op::transpose, {x}, ir::Attrs{{"perm", std::vector<int64_t>{0, 3, 1, 2}}});
      y = b.matmul(t, w, false, false);
    }
    g.outputs.push_back({ir::OutputRole::user, y, ir::kNoValue, "y"});
    exec::Program p = lower::lower(g);
    int transposes = 0;
    for (const exec::Kernel& k : p.kernels) transposes += std::string(k.name) == "transpose";
    EXPECT_EQ(transposes, out ? 2 : 1) << p.str();
    EXPECT_EQ(p.str().find("strided"), std::string::npos) << p.str();

    std::vector<Tensor> in = {randn({2, 3, 3, 4}), randn({2, 4, 3, 5})};
    const Tensor want = exec::interpret(g, in)[0];
    Tensor got = Tensor::zeros(g.type(y).shape);
    exec::Executable e(std::move(p));
    e.bind_input(0, in[0].data<float>());
    e.bind_input(1, in[1].data<float>());
    e.bind_output(0, got.data<float>());
    e.run();
    EXPECT_EQ(max_rel_diff(got, want), 0.0) << "out " << out;
  }
}

// Each elementwise op lowered (with scalar operands where the kernel takes
// them) agrees with the interpreter.
TEST(Lower, ProgramsAgreeWithInterpreterOnEveryKernelKind) {
  for (Op op : {Op::add, Op::sub, Op::mul, Op::div, Op::maximum, Op::gt, Op::eq}) {
    for (int scalar_side = 0; scalar_side < 3; ++scalar_side) {
      ir::Graph g;
      ir::Builder b(g);
      ValueId x = b.input(ir::InputRole::data, "x", {DType::f32, {3, 5}});
      ValueId y = b.input(ir::InputRole::data, "y", {DType::f32, {3, 5}});
      ValueId s = b.input(ir::InputRole::hyper, "s", {DType::f32, {}});
      ValueId lhs = scalar_side == 1 ? b.broadcast_to(s, {3, 5}) : x;
      ValueId rhs = scalar_side == 2 ? b.full(0.25, {DType::f32, {3, 5}}) : y;
      ValueId r = b.binary(op, lhs, rhs);
      if (ir::is_comparison(op)) r = b.add(Op::select, {r, x, y});
      ValueId t = b.add(Op::transpose, {r}, ir::Attrs{{"perm", std::vector<int64_t>{1, 0}}});
      ValueId m = b.matmul(t, x, false, false);
      ValueId red = b.reduce(Op::reduce_sum, m, {0});
      g.outputs.push_back({ir::OutputRole::user, red, ir::kNoValue, "r"});
      g.outputs.push_back({ir::OutputRole::user, b.broadcast_to(red, {2, 5}), ir::kNoValue, "bc"});

      std::vector<Tensor> in = {randn({3, 5}), randn({3, 5}), Tensor::scalar(0.75)};
      std::vector<Tensor> want = exec::interpret(g, in);
      exec::Executable e(lower::lower(g));
      std::vector<Tensor> got = {Tensor::zeros({5}), Tensor::zeros({2, 5})};
      for (size_t i = 0; i < in.size(); ++i) e.bind_input(i, in[i].data<float>());
      for (size_t i = 0; i < got.size(); ++i) e.bind_output(i, got[i].data<float>());
      e.run();
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LT(max_rel_diff(got[i], want[i]), 1e-5)
            << ir::op_name(op) << " side " << scalar_side;
    }
  }
}

// check passes its operand on when its condition holds everywhere; else the
// interpreter and the program (fused or not) fail with its message, the
// condition's first false element and the node's source line.
TEST(Lower, CheckPassesItsOperandOrFailsWithItsMessageEverywhere) {
  ir::Graph g;
  ir::Builder b(g);
  const ValueId x = b.input(ir::InputRole::data, "x", {DType::f32, {2, 3}});
  const ValueId ok = b.binary(Op::ge, x, b.full(0.0, {DType::f32, {2, 3}}));
  const ValueId y =
      b.add(Op::check, {x, ok}, ir::Attrs{{"message", std::string("x < 0 somewhere")}},
            SourceLoc{"model.py", 7});
  g.outputs.push_back({ir::OutputRole::user, b.unary(Op::log, y), ir::kNoValue, "y"});
  std::vector<Tensor> in = {Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})};
  testing::expect_same_everywhere(g, in, 1);
  EXPECT_EQ(exec::interpret(g, in)[0].to_vector()[1], double(std::log(2.0f)));
  in[0].data<float>()[5] = -1;
  in[0].data<float>()[4] = NAN;
  const std::string want = "x < 0 somewhere (first at position [1,1] of [2,3]) (at model.py:7)";
  EXPECT_EQ(testing::error_of([&] { exec::interpret(g, in); }), want);
  for (bool fuse : {true, false})
    EXPECT_EQ(testing::error_of([&] { testing::run_lowered(g, in, fuse, 1); }), want)
        << "fuse " << fuse;
}

// Strided kernels (broadcast, transpose, reductions with merged dims) and
// row copies (slice, concat, of any number of operands) on every dtype they
// move, against the interpreter.
TEST(Lower, StridedKernelsAgreeWithInterpreterForEveryDtype) {
  const char* text = R"(graph g {
  %0 = input data "x" : f32[2,3,4,5]
  %1 = iota {axis=1} : i64[4,5]
  %2 = iota {axis=0} : i64[4,5]
  %3 = ge %2, %1 : bool[4,5]
  %4 = broadcast %3 {dims=[2,3], shape=[2,3,4,5]} : bool[2,3,4,5]
  %5 = broadcast %1 {dims=[0,2], shape=[4,3,5]} : i64[4,3,5]
  %6 = transpose %5 {perm=[2,0,1]} : i64[5,4,3]
  %7 = transpose %0 {perm=[0,2,1,3]} : f32[2,4,3,5]
  %8 = reduce_sum %0 {axes=[0,2,3]} : f32[3]
  %9 = reduce_max %0 {axes=[1,3]} : f32[2,4]
  %10 = reshape %0 {shape=[2,3,20]} : f32[2,3,20]
  %11 = reduce_sum %10 {axes=[0,2]} : f32[3]
  %12 = slice %0 {axis=2, end=3, start=1} : f32[2,3,2,5]
  %13 = slice %6 {axis=0, end=5, start=2} : i64[3,4,3]
  %14 = concat %12, %0 {axis=2} : f32[2,3,6,5]
  %15 = concat %4, %4, %4 {axis=0} : bool[6,3,4,5]
  %16 = concat %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12, %12 {axis=1} : f32[2,60,2,5]
  out user %4 "mask"
  out user %6 "ints"
  out user %7 "t"
  out user %8 "s"
  out user %9 "m"
  out user %11 "s2"
  out user %13 "slice_ints"
  out user %14 "concat"
  out user %15 "concat_bools"
  out user %16 "concat_of_more_than_a_kernel_s_operand_array"
}
)";
  ir::Graph g = ir::parse(text);
  std::vector<Tensor> in = {randn({2, 3, 4, 5})};
  std::vector<Tensor> want = exec::interpret(g, in);
  exec::Executable e(lower::lower(g));
  e.bind_input(0, in[0].data<float>());
  std::vector<Tensor> got;
  for (size_t i = 0; i < want.size(); ++i) {
    got.push_back(Tensor::zeros(want[i].shape(), want[i].dtype()));
    e.bind_output(i, got.back().impl()->storage->data);
  }
  e.run();
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(g.outputs[i].name);
    std::vector<double> w = want[i].to_vector(), r = got[i].to_vector();
    ASSERT_EQ(w.size(), r.size());
    for (size_t j = 0; j < w.size(); ++j) EXPECT_NEAR(r[j], w[j], 1e-6 * (1 + std::abs(w[j])));
  }
}

}  // namespace
}  // namespace ws
