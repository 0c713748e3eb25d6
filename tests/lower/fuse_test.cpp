// The fuse pass: what fuses and what must not (IR text in, IR text out,
// golden files beside this test), and fused programs against the
// interpreter and against unfused programs.
#include <gtest/gtest.h>

#include <cmath>

#include "capture/tensor_impl.hpp"
#include "exec/fused_loop.hpp"
#include "exec/interpreter.hpp"
#include "exec/program.hpp"
#include "ir/text.hpp"
#include "ir/verify.hpp"
#include "lower/fuse_activation_into_product.hpp"
#include "lower/fuse_bias_into_product.hpp"
#include "lower/fuse_elementwise.hpp"
#include "lower/fuse_residual_into_product.hpp"
#include "lower/fuse_update_into_product.hpp"
#include "lower/lower.hpp"
#include "lower/merge_padded_sums.hpp"
#include "lower/move_reshapes.hpp"
#include "lower/pipeline.hpp"
#include "test_util.hpp"

namespace ws {
namespace {

// Inputs of g's types: floats near 1 (positive, so logs and roots are
// defined), integers zero.
std::vector<Tensor> inputs_for(const ir::Graph& g, uint64_t seed = 1) {
  std::vector<Tensor> in;
  manual_seed(seed);
  for (ir::ValueId v : g.inputs) {
    const ir::Type& t = g.type(v);
    if (is_floating(t.dtype))
      in.push_back(randn(t.shape, 1.0, 0.25, t.dtype));
    else
      in.push_back(Tensor::zeros(t.shape, t.dtype));
  }
  return in;
}

// Runs g lowered (fused or not) `runs` times on copies of `in`, updates
// written into their inputs; an update's result is its input afterwards.
std::vector<Tensor> run_lowered(const ir::Graph& g, const std::vector<Tensor>& in, bool fuse,
                                int runs) {
  std::vector<Tensor> args;
  for (const Tensor& t : in) args.push_back(t.clone());
  exec::Executable e(lower::lower(g, {.fuse = fuse}));
  for (size_t i = 0; i < args.size(); ++i) e.bind_input(i, args[i].impl()->storage->data);
  std::vector<Tensor> out(g.outputs.size());
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const ir::Output& o = g.outputs[i];
    if (o.role == ir::OutputRole::update) continue;
    out[i] = Tensor::zeros(g.type(o.value).shape, g.type(o.value).dtype);
    e.bind_output(i, out[i].impl()->storage->data);
  }
  for (int r = 0; r < runs; ++r) e.run();
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (g.outputs[i].role == ir::OutputRole::update)
      out[i] = args[size_t(g.input_index(g.outputs[i].aliased_input))];
  return out;
}

// The interpreter run `runs` times, each run's updates fed to the next.
std::vector<Tensor> interpret_runs(const ir::Graph& g, std::vector<Tensor> in, int runs) {
  std::vector<Tensor> out;
  for (int r = 0; r < runs; ++r) {
    out = exec::interpret(g, in);
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (g.outputs[i].role == ir::OutputRole::update)
        in[size_t(g.input_index(g.outputs[i].aliased_input))] = out[i];
  }
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (g.outputs[i].role == ir::OutputRole::update)
      out[i] = in[size_t(g.input_index(g.outputs[i].aliased_input))];
  return out;
}

// Every way of running g gives the same bits: the interpreter on g and on
// its fused form, and programs with fusion on and off, over `runs` runs.
void expect_same_everywhere(const ir::Graph& g, const std::vector<Tensor>& in, int runs = 3) {
  const std::vector<Tensor> want = interpret_runs(g, in, runs);
  const ir::Graph fused = lower::run_passes(g, lower::graph_passes({}));
  const std::vector<std::vector<Tensor>> got = {interpret_runs(fused, in, runs),
                                                run_lowered(g, in, true, runs),
                                                run_lowered(g, in, false, runs)};
  const char* names[] = {"interpreted fused graph", "fused program", "unfused program"};
  for (size_t k = 0; k < got.size(); ++k)
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(std::string(names[k]) + ", output " + g.outputs[i].name);
      const std::vector<double> w = want[i].to_vector(), r = got[k][i].to_vector();
      ASSERT_EQ(w.size(), r.size());
      for (size_t j = 0; j < w.size(); ++j)
        ASSERT_TRUE(r[j] == w[j] || (std::isnan(r[j]) && std::isnan(w[j])))
            << "element " << j << ": " << r[j] << " against " << w[j];
    }
}

// fuse/<name>.in.ir through `pass` (the fuse pass unless named) gives
// fuse/<name>.out.ir (the verifier and a print/parse round trip pass on the
// result), and the rewritten graph computes what the input graph computes,
// bit for bit. Returns the input graph.
ir::Graph expect_pass_as_golden(const std::string& name,
                                ir::Graph (*pass)(const ir::Graph&) = lower::fuse_elementwise) {
  const ir::Graph in =
      ir::parse(testing::read_file(std::string(WS_TEST_DIR) + "/fuse/" + name + ".in.ir"));
  const ir::Graph out = pass(in);
  ir::verify_with_round_trip(out);
  testing::expect_golden(ir::print(out), "fuse/" + name + ".out.ir");
  expect_same_everywhere(in, inputs_for(in));
  return in;
}

// Bias along rows, a statistic per row, a scalar, a constant, a comparison
// and a select: one loop, every broadcast read in place.
TEST(FuseElementwise, ChainWithBroadcastOperandsBecomesOneLoop) {
  expect_pass_as_golden("chain_with_broadcasts");
}

// exp feeds a product and a mul that also reads the product: putting the
// mul with exp would make the group wait for a product that waits for it.
// exp's value leaves its group as a result for the product: computed once.
TEST(FuseElementwise, NeverFusesAcrossAProductThatDependsOnTheGroup) {
  expect_pass_as_golden("no_cycle_through_product");
}

// Softmax: exp and its row sum are one reduce fusion (exp's values leave it
// as a result, computed once); the division waits for the sum, so it cannot
// join that loop and runs as a second.
TEST(FuseElementwise, SoftmaxIsExpWithItsRowSumThenTheDivision) {
  expect_pass_as_golden("softmax_two_loops");
}

// Dropout: a random draw joins the loop that reads it (element i of the
// draw is number offset + skip + i of the stream, whichever chunk and
// thread computes it), so the draw never reaches memory; a value of another
// shape (after a reshape) starts its own group.
TEST(FuseElementwise, RandomDrawsFuseWithTheirReadersAndOtherShapesStayApart) {
  expect_pass_as_golden("random_draw_fuses_other_shapes_stay_apart");
}

// relu (a comparison, then a select reading its mask) and a row mean:
// buffers of different element sizes are never shared by a step and the
// operand it still reads.
TEST(FuseElementwise, ReluThenRowMeanKeepsTheMaskApartFromTheResult) {
  expect_pass_as_golden("relu_then_row_mean");
}

// A per-channel statistic repeated along 3x3 rows would cost a call per
// nine elements: that op stays its own kernel, and the ops after it fuse.
TEST(FuseElementwise, ShortRowBroadcastsStayTheirOwnKernel) {
  expect_pass_as_golden("short_row_broadcast");
}

// A parameter read through a reshape and a broadcast by a loop that ends
// after its update: the loop still runs first, and the update is written in
// place (no copy).
TEST(FuseElementwise, UpdateWaitsForReadsThroughAReshape) {
  const ir::Graph in = expect_pass_as_golden("update_after_reads_through_reshape");
  exec::Executable e(lower::lower(in, {}));
  for (const exec::Kernel& k : e.program().kernels) EXPECT_STRNE(k.name, "copy");
}

// An Adam moment's decay reads only inputs, of the reduced shape: it joins
// the epilogue of the reduction that gives the gradient it is added to, and
// the moment is updated in place by that one kernel.
TEST(FuseElementwise, EpilogueTakesInTheLoopsOfTheReducedShapeItReads) {
  const ir::Graph in = expect_pass_as_golden("epilogue_reads_loops_of_the_reduced_shape");
  exec::Executable e(lower::lower(in, {}));
  EXPECT_EQ(e.program().kernels.size(), 1u);
}

// The gradient of q, k and v sliced from one product: three zero-padded
// pieces summed are one concatenation, whatever the zero pieces' bounds
// (v, w and q); pieces that overlap (w and k) are summed as before.
TEST(MergePaddedSums, DisjointPaddedPiecesSumToOneConcatenation) {
  expect_pass_as_golden("padded_sums_merge", lower::merge_padded_sums);
}

// LayerNorm's statistic: the ops between its reduction and the reshape that
// broadcasts it run before the reshape (so they join the reduction's
// epilogue); an op with a full-size operand that is no reshape, and a graph
// output, stay; a reshape there and back is its operand. A scaling of an
// input read only through a reshape runs after the reshape, on a view of
// the input, and joins the add that reads it.
TEST(MoveReshapes, ElementwiseOpsMoveToTheShapeOfWhatTheyFuseWith) {
  const ir::Graph in =
      expect_pass_as_golden("reshapes_move_after_elementwise_ops", lower::move_reshapes);
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
// dim (keeping an outer one too) stays its own kernel after its producer.
TEST(FuseElementwise, ColumnSumTakesItsProducerAndItsUpdate) {
  const ir::Graph in = expect_pass_as_golden("column_sum_with_producer_and_update");
  exec::Executable e(lower::lower(in, {}));
  EXPECT_EQ(e.program().kernels.size(), 3u) << e.program().str();
  EXPECT_EQ(e.program().copy_bytes, 0);
}

// BatchNorm's normalization, affine map and relu over 7x7 maps, per-channel
// statistics read one value per row piece, and a global pool: one reduce
// fusion. Chunks (2048 elements) and threads start mid-row.
TEST(FuseElementwise, PerChannelStatisticsOverShortRowsFuse) {
  const ir::Graph in = expect_pass_as_golden("per_channel_statistics_over_short_rows");
  exec::Executable e(lower::lower(in, {}));
  EXPECT_EQ(e.program().kernels.size(), 1u);
}

// Over arrays larger than the caches, a group keeps at most four streams
// (full-size operands plus results).
TEST(FuseElementwise, GroupsOverLargeArraysKeepFewStreams) {
  expect_pass_as_golden("many_streams_over_large_arrays_split");
}

// SGD with momentum over arrays larger than the caches: the gradient, the
// buffer and the weight, the last two updated in place, are three streams,
// so the whole update is one loop.
TEST(FuseElementwise, InPlaceUpdatesCountAsOneStreamWithTheirRead) {
  const ir::Graph in = expect_pass_as_golden("momentum_update_over_large_arrays");
  exec::Executable e(lower::lower(in, {}));
  EXPECT_EQ(e.program().kernels.size(), 1u) << e.program().str();
}

// Plain SGD on a weight whose gradient is a product: one product
// accumulated into the weight (w's); a gradient read elsewhere too (v's, an
// output) stays a buffer and its update a loop.
TEST(FuseUpdateIntoProduct, PlainSgdAccumulatesTheGradientsProductIntoTheWeight) {
  const ir::Graph in = expect_pass_as_golden("sgd_into_product", lower::fuse_update_into_product);
  const exec::Program p = lower::lower(in);
  EXPECT_EQ(p.copy_bytes, 0) << p.str();
  int accumulated = 0;
  for (const exec::Kernel& k : p.kernels) accumulated += k.op == ir::Op::matmul_add;
  EXPECT_EQ(accumulated, 1) << p.str();
}

// `in` through fuse_update_into_product gives fuse/<name>.out.ir with one
// matmul_add; then `in` lowered and interpreted, run after run (input
// `hyper` set to the next of `values` first, the updates fed on), agree on
// every update: bit for bit when `exact` (the unfused update computes
// (beta * c) + (alpha * (a @ b)) too, each product rounded), else within a
// few roundings (the unfused update is another expression of the same sum).
// Inputs in `fixed` (index, value) are set first.
void expect_update_into_product(const std::string& name, size_t hyper,
                                const std::vector<float>& values, bool exact,
                                const std::vector<std::pair<size_t, float>>& fixed = {}) {
  const ir::Graph in =
      ir::parse(testing::read_file(std::string(WS_TEST_DIR) + "/fuse/" + name + ".in.ir"));
  const ir::Graph out = lower::fuse_update_into_product(in);
  ir::verify_with_round_trip(out);
  testing::expect_golden(ir::print(out), "fuse/" + name + ".out.ir");
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
  const ir::Graph in =
      expect_pass_as_golden("relu_into_product", lower::fuse_activation_into_product);
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
  const ir::Graph in =
      expect_pass_as_golden("residual_into_product", lower::fuse_residual_into_product);
  const exec::Program p = lower::lower(in);
  const exec::Kernel* k = nullptr;
  for (const exec::Kernel& kk : p.kernels)
    if (kk.op == ir::Op::matmul_bias_add) k = &kk;
  ASSERT_NE(k, nullptr) << p.str();
  EXPECT_EQ(k->out, k->in[3]) << "exp(x) dies at the add: the product adds into its block\n"
                              << p.str();
}

// A bias along a product's rows becomes the product's bias; a product read
// by anything else, or a bias repeated along columns, stays as it was.
TEST(FuseBiasIntoProduct, ALinearLayersBiasIsTheProductsOwn) {
  expect_pass_as_golden("bias_into_product", lower::fuse_bias_into_product);
}

TEST(FuseElementwise, AdamUpdateOfOneParameterIsOneKernelAndExact) {
  const ir::Graph g = ir::parse(testing::read_file(std::string(WS_TEST_DIR) + "/adam_step.ir"));
  expect_same_everywhere(g, inputs_for(g));
}

}  // namespace
}  // namespace ws
