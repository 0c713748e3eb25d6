// ZeRO stage 1 on 2 ranks (StepOptions::zero; run under `mpirun -np 2`):
// the optimizer state halved per rank, the same training as plain data
// parallelism, the state made whole for a checkpoint, the guard and
// clipping over the ranks, the collectives in the graph.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <regex>
#include <sstream>

#include "dist/collectives.hpp"
#include "dist/ranks.hpp"
#include "ir/verify.hpp"
#include "wholestep/models.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

using test::relative_difference;
using test::shard;
using test::State;

StepOptions data_parallel(bool zero, StepMode mode = StepMode::single_graph) {
  return {.mode = mode, .data_parallel = true, .bucket_bytes = 256 << 10, .zero = zero};
}

State copies(const nn::NamedTensors& tensors) {
  State out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.clone());
  return out;
}

// One model, optimizer and step, trained on this rank's part of global
// batches `from`, `from` + 1, ...
struct Trainer {
  models::Spec spec;
  TrainSetup setup;
  TrainStep step;
  Trainer(const char* model, const models::OptimizerChoice& choice, StepOptions opts)
      : spec(models::spec(model)),
        setup([&] {
          manual_seed(0);
          return models::make_setup(spec, choice);
        }()),
        step(compile_train_step(*setup.model, *setup.opt, setup.loss_fn, opts)) {}
  StepResult train(int from, int steps) {
    StepResult r;
    for (int i = from; i < from + steps; ++i)
      r = step.run(shard(models::random_batch(spec, uint64_t(i))));
    return r;
  }
};

TEST(Zero, OptimizerStateBytesPerRankAreHalvedAndTheOptimizersTensorsReleased) {
  ASSERT_EQ(dist::world_size(), 2) << "run under mpirun -np 2";
  Trainer plain("mlp", {.name = "adamw"}, data_parallel(false));
  Trainer zero("mlp", {.name = "adamw"}, data_parallel(true));
  const StepCounters p = plain.train(0, 1).counters, z = zero.train(0, 1).counters;
  // exp_avg and exp_avg_sq per parameter, then the 0-d step count: each
  // bucket's part is half of it, rounded up.
  int64_t params = 0, buckets = 0;
  for (const auto& [name, t] : zero.setup.model->named_parameters()) params += t.numel();
  const std::string text = zero.step.graphs_text();
  for (size_t at = text.find("reduce_scatter_start"); at != std::string::npos;
       at = text.find("reduce_scatter_start", at + 1))
    ++buckets;
  EXPECT_EQ(p.state_bytes, 2 * params * 4 + 4);
  EXPECT_LE(z.state_bytes, 2 * (params + buckets) / 2 * 4 + 4);
  EXPECT_GE(z.state_bytes, 2 * params / 2 * 4 + 4);
  EXPECT_EQ(p.persistent_bytes - z.persistent_bytes, p.state_bytes - z.state_bytes);
  std::printf("mlp AdamW optimizer state per rank: %lld bytes plain, %lld with ZeRO (%d buckets)\n",
              (long long)p.state_bytes, (long long)z.state_bytes, int(buckets));
  for (const auto& [name, t] : zero.setup.opt->state())
    if (name != "step") EXPECT_EQ(t.numel(), 0) << name << " is still whole";
}

TEST(Zero, TrainsAsPlainDataParallelAndGathersTheSameOptimizerState) {
  for (StepMode mode : {StepMode::single_graph, StepMode::three_graph}) {
    Trainer plain("mlp", {.name = "adamw"}, data_parallel(false, mode));
    Trainer zero("mlp", {.name = "adamw"}, data_parallel(true, mode));
    plain.train(0, 3);
    zero.train(0, 3);
    zero.step.gather_optimizer_state();
    EXPECT_LE(
        relative_difference(copies(zero.setup.opt->state()), copies(plain.setup.opt->state())).max,
        1e-6)
        << mode_name(mode);
    // The step takes the gathered tensors over again and goes on.
    plain.train(3, 2);
    zero.train(3, 2);
    EXPECT_LE(relative_difference(copies(zero.setup.model->named_parameters()),
                                  copies(plain.setup.model->named_parameters()))
                  .max,
              1e-6)
        << mode_name(mode);
  }
}

TEST(Zero, ACheckpointNeedsTheStateGatheredAndThenHoldsItWhole) {
  const std::string dir = "zero_checkpoints";
  if (dist::rank() == 0) std::filesystem::remove_all(dir);
  Trainer zero("mlp", {.name = "adamw"}, data_parallel(true));
  zero.train(0, 2);
  if (dist::rank() == 0) {
    try {
      save_checkpoint(dir, *zero.setup.model, *zero.setup.opt);
      ADD_FAILURE() << "a checkpoint of sharded state was written";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gather_optimizer_state"), std::string::npos)
          << e.what();
    }
  }
  zero.step.gather_optimizer_state();  // every rank
  std::string path;
  if (dist::rank() == 0) path = save_checkpoint(dir, *zero.setup.model, *zero.setup.opt);
  const State saved = copies(zero.setup.opt->state());
  dist::all_gather(0);  // rank 0 has written it
  // A process without ZeRO resumes from it with the whole state.
  Trainer resumed("mlp", {.name = "adamw"}, {});
  load_checkpoint(dir + "/checkpoint-2", *resumed.setup.model, *resumed.setup.opt);
  EXPECT_EQ(relative_difference(copies(resumed.setup.opt->state()), saved).max, 0);
  // The ZeRO step goes on from the gathered state.
  zero.train(2, 1);
  EXPECT_EQ(zero.setup.opt->step_count(), 3);
  dist::all_gather(0);
  if (dist::rank() == 0) std::filesystem::remove_all(dir);
}

TEST(Zero, ANonFiniteGradientOnOneRankSkipsTheStepOnEvery) {
  StepOptions opts = data_parallel(true);
  opts.on_nonfinite = NonFinite::skip;
  Trainer zero("mlp", {.name = "sgd"}, opts);
  zero.train(0, 1);
  const State before = copies(zero.setup.model->named_parameters());
  std::vector<Tensor> batch = shard(models::random_batch(models::spec("mlp"), 1));
  if (dist::rank() == 1) batch[0].data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  const StepResult r = zero.step.run(batch);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(relative_difference(copies(zero.setup.model->named_parameters()), before).max, 0);
  EXPECT_FALSE(zero.train(2, 1).skipped);
}

TEST(Zero, ClippingSumsTheNormOverTheRanks) {
  models::OptimizerChoice clipped{.name = "sgd", .max_grad_norm = 0.05};
  Trainer plain("mlp", clipped, data_parallel(false));
  Trainer zero("mlp", clipped, data_parallel(true));
  plain.train(0, 5);
  zero.train(0, 5);
  EXPECT_LE(relative_difference(copies(zero.setup.model->named_parameters()),
                                copies(plain.setup.model->named_parameters()))
                .norm,
            1e-6);
}

TEST(Zero, GradientsAreScatteredInTheBackwardAndParametersGatheredAfterTheirUpdate) {
  Trainer zero("mlp", {.name = "sgd"}, data_parallel(true, StepMode::three_graph));
  zero.train(0, 1);
  const std::string text = zero.step.graphs_text();
  const size_t backward = text.find("graph backward"), optimizer = text.find("graph optimizer");
  ASSERT_NE(optimizer, std::string::npos) << text;
  auto count = [&](const char* what, size_t from, size_t to) {
    int n = 0;
    for (size_t at = text.find(what, from); at < to; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const int scatters = count("reduce_scatter_start", backward, optimizer);
  EXPECT_GE(scatters, 2) << text;
  EXPECT_EQ(count("reduce_scatter_start", optimizer, text.size()), 0);
  EXPECT_EQ(count("all_gather_start", optimizer, text.size()), scatters);
  EXPECT_EQ(count("local_shard", optimizer, text.size()), scatters);
  const std::vector<std::string> all = dist::all_gather_text(text);
  EXPECT_EQ(all[0], all[1]) << "the ranks run different graphs";
}

// In the single graph, as plain data parallelism's updates, each bucket's
// update runs as soon as its reduce-scatter arrives and starts its gather
// (W G W G ...); the gathers are waited for last (g g ...), so they travel
// while the later buckets are updated.
TEST(Zero, InTheSingleGraphEachBucketIsUpdatedOnceItsPartArrivesAndGatheredLast) {
  Trainer zero("mlp", {.name = "sgd"}, data_parallel(true));
  zero.train(0, 1);
  const std::string text = zero.step.graphs_text();
  std::map<std::string, std::string> op_of;  // value -> its op
  std::string events;
  const std::regex node(R"(^\s*(%\d+) = (\w+) (%\d+)?)");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, node)) continue;
    op_of[m[1]] = m[2];
    if (m[2] == "all_gather_start") events += 'G';
    if (m[2] == "wait" && op_of[m[3]] == "reduce_scatter_start") events += 'W';
    if (m[2] == "wait" && op_of[m[3]] == "all_gather_start") events += 'g';
  }
  const size_t buckets = size_t(std::count(events.begin(), events.end(), 'W'));
  ASSERT_GE(buckets, 2u) << text;
  std::string expected;
  for (size_t k = 0; k < buckets; ++k) expected += "WG";
  EXPECT_EQ(events, expected + std::string(buckets, 'g')) << text;
}

TEST(Zero, NeedsDataParallel) {
  manual_seed(0);
  TrainSetup setup = models::make_setup(models::spec("mlp"));
  try {
    compile_train_step(*setup.model, *setup.opt, setup.loss_fn, {.zero = true});
    ADD_FAILURE() << "zero without data_parallel was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs data_parallel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ws

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ws::ir::set_verify_enabled(true);
  ws::dist::init();
  return RUN_ALL_TESTS();
}
