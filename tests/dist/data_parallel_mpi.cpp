// Data-parallel steps on 2 ranks (run under `mpirun -np 2`, see
// tests/CMakeLists.txt): the same training as one process over the global
// batch, in every compiled mode; the collectives in the step graph; the
// ranks' graphs compared when they compile.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "dist/collectives.hpp"
#include "dist/ranks.hpp"
#include "ir/text.hpp"
#include "ir/verify.hpp"
#include "wholestep/models.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

using test::Difference;
using test::relative_difference;
using test::shard;
using test::State;
using test::Trained;

constexpr int kSteps = 10;

// kSteps steps of `spec` over global batches of spec.batch examples: one
// process over whole batches, or (data_parallel) this rank over its shard.
Trained train(const models::Spec& spec, const models::OptimizerChoice& choice, StepOptions opts) {
  manual_seed(0);
  TrainSetup setup = models::make_setup(spec, choice);
  TrainStep step = compile_train_step(*setup.model, *setup.opt, setup.loss_fn, opts);
  Trained t;
  for (int i = 0; i < kSteps; ++i) {
    std::vector<Tensor> batch = models::random_batch(spec, uint64_t(i));
    t.loss = step.run(opts.data_parallel ? shard(batch) : batch).loss;
  }
  for (auto& [name, p] : setup.model->named_parameters()) t.state.emplace_back(name, p.clone());
  for (auto& [name, b] : setup.model->named_buffers()) t.state.emplace_back(name, b.clone());
  return t;
}

struct Case {
  const char* model;
  const char* optimizer;
  StepMode mode;
  bool sync_batch_norm = false;  // cnn: its BatchNorms see the global batch
  bool zero = false;             // the optimizer state sharded over the ranks
};

class DataParallel : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallel, TwoRanksTrainAsOneProcessOverTheGlobalBatch) {
  ASSERT_EQ(dist::world_size(), 2) << "run under mpirun -np 2";
  const Case c = GetParam();
  models::Spec spec = models::spec(c.model);
  spec.gpt.dropout = 0;
  if (spec.name == "gpt") spec.batch = 8;  // 4 sequences per rank
  models::OptimizerChoice choice{.name = c.optimizer};
  StepOptions one{.mode = c.mode};
  StepOptions dp = one;
  dp.data_parallel = true;
  dp.bucket_bytes = 256 << 10;  // several buckets
  dp.sync_batch_norm = c.sync_batch_norm;
  dp.zero = c.zero;
  const Trained single = train(spec, choice, one);
  const Trained parallel = train(spec, choice, dp);
  const Difference d = relative_difference(parallel.state, single.state);
  // The mean of two half-batch gradients rounds differently from the whole
  // batch's. Adam divides each gradient element by its own size, so an
  // element that is rounding noise (attention's key bias, whose exact
  // gradient is zero: softmax ignores a shift of all scores) moves by up to
  // lr per step either way: the largest elementwise difference has a looser
  // bound than the norm.
  EXPECT_LE(d.norm, 1e-5) << c.model << " " << c.optimizer << " " << mode_name(c.mode);
  EXPECT_LE(d.max, 1e-4) << c.model << " " << c.optimizer << " " << mode_name(c.mode);
  EXPECT_NEAR(parallel.loss, single.loss, 1e-5 * std::abs(single.loss));
  // Every rank holds the same parameters, to the bit.
  for (const auto& [name, t] : parallel.state) {
    std::vector<uint64_t> h = dist::all_gather(std::hash<std::string_view>{}(
        std::string_view(reinterpret_cast<const char*>(t.data<float>()), t.nbytes())));
    EXPECT_EQ(h[0], h[1]) << name;
  }
  if (dist::rank() == 0)
    std::printf("%s %s %s%s after %d steps: relative difference %.3g (norm), %.3g (max)\n", c.model,
                c.optimizer, mode_name(c.mode), c.zero ? " zero" : "", kSteps, d.norm, d.max);
}

INSTANTIATE_TEST_SUITE_P(
    Models, DataParallel,
    ::testing::Values(Case{"mlp", "sgd", StepMode::single_graph},
                      Case{"mlp", "sgd", StepMode::three_graph},
                      Case{"mlp", "sgd", StepMode::interpret},
                      Case{"gpt", "adamw", StepMode::single_graph},
                      Case{"gpt", "adamw", StepMode::three_graph},
                      // SGD: with Adam, whose first steps move each element by lr
                      // times its gradient's sign, rounding in BatchNorm's nearly
                      // scale-free weights grows to 1e-3 in 10 steps (1e-6 after one).
                      Case{"cnn", "sgd", StepMode::single_graph, true},
                      Case{"cnn", "sgd", StepMode::three_graph, true},
                      Case{"cnn", "sgd", StepMode::interpret, true},
                      Case{"mlp", "sgd", StepMode::single_graph, false, true},
                      Case{"mlp", "sgd", StepMode::three_graph, false, true},
                      Case{"mlp", "sgd", StepMode::interpret, false, true},
                      Case{"gpt", "adamw", StepMode::single_graph, false, true},
                      Case{"gpt", "adamw", StepMode::three_graph, false, true}),
    [](const auto& info) {
      return std::string(info.param.model) + "_" + info.param.optimizer + "_" +
             mode_name(info.param.mode) + (info.param.sync_batch_norm ? "_sync_batch_norm" : "") +
             (info.param.zero ? "_zero" : "");
    });

// Every value v's operands, transitively: whether some node with op `op`
// is among them.
bool reaches(const ir::Graph& g, ir::ValueId v, ir::Op op) {
  std::vector<ir::ValueId> stack = {v};
  std::vector<bool> seen(g.nodes.size(), false);
  while (!stack.empty()) {
    const ir::ValueId x = stack.back();
    stack.pop_back();
    if (seen[size_t(x)]) continue;
    seen[size_t(x)] = true;
    if (g.node(x).op == op) return true;
    for (ir::ValueId a : g.node(x).args) stack.push_back(a);
  }
  return false;
}

TEST(DataParallelGraph, CollectivesAreInTheStepGraphAndEveryUpdateWaitsForItsBucket) {
  models::Spec spec = models::spec("mlp");
  spec.batch = 16;
  for (StepMode mode : {StepMode::single_graph, StepMode::three_graph}) {
    manual_seed(0);
    TrainSetup setup = models::make_setup(spec);
    StepOptions opts{.mode = mode, .data_parallel = true, .bucket_bytes = 512 << 10};
    TrainStep step = compile_train_step(*setup.model, *setup.opt, setup.loss_fn, opts);
    step.run(shard(models::random_batch(spec, 0)));
    const std::string text = step.graphs_text();
    std::vector<ir::Graph> graphs;
    for (size_t at = text.find("graph "); at != std::string::npos;) {
      const size_t next = text.find("\ngraph ", at + 1);
      graphs.push_back(ir::parse(text.substr(at, next == std::string::npos ? next : next - at)));
      at = next == std::string::npos ? next : next + 1;
    }
    // The collectives, in the order the program starts them, with their
    // sizes: the same on every rank.
    std::string sequence;
    int64_t starts = 0, waits = 0;
    for (const ir::Graph& g : graphs)
      for (ir::ValueId v = 0; v < g.size(); ++v) {
        const ir::Node& n = g.node(v);
        if (n.op == ir::Op::all_reduce_start) {
          sequence += fmt::format("{}:{} ", g.name, n.type.str());
          ++starts;
        }
        waits += n.op == ir::Op::wait;
        // Nothing waits in another graph than the one that started it, and
        // the optimizer graph holds none.
        if (g.name == "optimizer")
          EXPECT_NE(ir::op_info(n.op).category, ir::OpCategory::collective);
      }
    // mlp's gradients in buckets of at most 512 KiB: fc1's and fc2's
    // weights alone (1.6 and 1 MB), the rest (and the loss) in the first.
    EXPECT_GE(starts, 3) << text;
    EXPECT_EQ(starts, waits);
    const std::vector<std::string> all = dist::all_gather_text(sequence);
    EXPECT_EQ(all[0], all[1]) << "the ranks start different collectives";
    // Every parameter's update reads a reduced gradient.
    for (const ir::Graph& g : graphs)
      for (const ir::Output& o : g.outputs)
        if (o.role == ir::OutputRole::update &&
            g.input_role(o.aliased_input) == ir::InputRole::param) {
          if (mode == StepMode::single_graph)
            EXPECT_TRUE(reaches(g, o.value, ir::Op::wait))
                << o.name << " reads no reduced gradient";
        }
    if (mode == StepMode::single_graph) {
      // The first bucket starts before the last gradient is computed: the
      // reduction overlaps the rest of the backward.
      const ir::Graph& g = graphs[0];
      ir::ValueId first_start = -1, last_product = -1;
      for (ir::ValueId v = 0; v < g.size(); ++v) {
        const ir::Node& n = g.node(v);
        if (n.op == ir::Op::all_reduce_start && first_start < 0) first_start = v;
        if (n.op == ir::Op::matmul || n.op == ir::Op::matmul_bias || n.op == ir::Op::matmul_add)
          last_product = v;
      }
      EXPECT_LT(first_start, last_product) << text;
    } else {
      // three_graph: the backward passes reduced gradients on.
      for (const ir::Graph& g : graphs)
        if (g.name == "backward")
          for (const ir::Output& o : g.outputs)
            if (o.role == ir::OutputRole::grad)
              EXPECT_TRUE(reaches(g, o.value, ir::Op::wait)) << o.name;
    }
  }
}

TEST(DataParallelGraph, RanksThatTraceAnotherGraphAreToldWhereItDiffers) {
  models::Spec spec = models::spec("mlp");
  spec.batch = 8 + 8 * dist::rank();  // rank 1's batch is larger
  manual_seed(0);
  TrainSetup setup = models::make_setup(spec);
  TrainStep step = compile_train_step(*setup.model, *setup.opt, setup.loss_fn,
                                      StepOptions{.data_parallel = true});
  try {
    step.run(models::random_batch(spec, 0));
    FAIL() << "the ranks' different graphs were not found";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1 traced another step graph than rank 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[8,784]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[16,784]"), std::string::npos) << msg;
  }
}

TEST(DataParallelGraph, WithoutSyncBatchNormEachRankNormalizesByItsOwnBatch) {
  // The counterpart of the synchronized cases above: the ranks' running
  // statistics differ, and the parameters are not one process's.
  models::Spec spec = models::spec("cnn");
  StepOptions dp{.data_parallel = true};
  const Trained parallel = train(spec, {}, dp);
  const Trained single = train(spec, {}, StepOptions{});
  EXPECT_GT(relative_difference(parallel.state, single.state).norm, 1e-4);
  bool differ = false;
  for (const auto& [name, t] : parallel.state)
    if (name.find("running_mean") != std::string::npos) {
      std::vector<uint64_t> h = dist::all_gather(std::hash<std::string_view>{}(
          std::string_view(reinterpret_cast<const char*>(t.data<float>()), t.nbytes())));
      differ |= h[0] != h[1];
    }
  EXPECT_TRUE(differ) << "the ranks' running statistics should be their own";
}

TEST(DataParallelProgress, EveryWayOfMovingTheCollectivesGivesTheSameBits) {
  models::Spec spec = models::spec("mlp");
  spec.batch = 16;
  StepOptions opts{.data_parallel = true, .bucket_bytes = 256 << 10};
  std::vector<State> states;
  for (dist::Progress p : {dist::Progress::kernels, dist::Progress::wait, dist::Progress::thread}) {
    dist::set_progress(p);
    states.push_back(train(spec, {}, opts).state);
  }
  dist::set_progress(dist::Progress::kernels);
  for (size_t i = 1; i < states.size(); ++i) {
    const Difference d = relative_difference(states[i], states[0]);
    EXPECT_EQ(d.max, 0) << dist::progress_name(dist::Progress(i));
  }
}

}  // namespace
}  // namespace ws

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ws::ir::set_verify_enabled(true);
  ws::dist::set_progress(ws::dist::Progress::thread);  // MPI made ready for it
  ws::dist::init();
  ws::dist::set_progress(ws::dist::Progress::kernels);
  return RUN_ALL_TESTS();
}
