// Gradient accumulation in data-parallel steps on 2 ranks (run under
// `mpirun -np 2`, see tests/CMakeLists.txt): accumulate=2 over each rank's
// shards trains as one process with accumulate=2 over the global batches,
// in every mode and with ZeRO; the calls before a cycle's last run no
// gradient collective (DDP's no_sync), only the loss's.
#include <gtest/gtest.h>

#include <cmath>

#include "dist/collectives.hpp"
#include "dist/ranks.hpp"
#include "wholestep/models.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

using test::Difference;
using test::relative_difference;
using test::shard;
using test::Trained;

constexpr int kAccumulate = 2, kCalls = 6;

Trained train(const models::Spec& spec, StepOptions opts, std::vector<int64_t>* collectives) {
  manual_seed(0);
  TrainSetup setup = models::make_setup(spec, {.name = "sgd"});
  TrainStep step = compile_train_step(*setup.model, *setup.opt, setup.loss_fn, opts);
  Trained t;
  for (int i = 0; i < kCalls; ++i) {
    std::vector<Tensor> batch = models::random_batch(spec, uint64_t(i));
    const StepResult r = step.run(opts.data_parallel ? shard(batch) : batch);
    EXPECT_EQ(r.updated, i % kAccumulate == kAccumulate - 1);
    t.loss = r.loss;
    if (collectives) collectives->push_back(r.counters.collectives);
  }
  for (auto& [name, p] : setup.model->named_parameters()) t.state.emplace_back(name, p.clone());
  return t;
}

struct Case {
  StepMode mode;
  bool zero = false;
};

class DataParallelAccumulate : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelAccumulate, TwoRanksTrainAsOneProcessOverTheGlobalBatches) {
  ASSERT_EQ(dist::world_size(), 2) << "run under mpirun -np 2";
  const Case c = GetParam();
  const models::Spec spec = models::spec("mlp");
  const StepOptions one{.mode = c.mode, .accumulate = kAccumulate};
  StepOptions dp = one;
  dp.data_parallel = true;
  dp.zero = c.zero;
  const Trained single = train(spec, one, nullptr);
  std::vector<int64_t> collectives;
  const Trained parallel = train(spec, dp, &collectives);
  const Difference d = relative_difference(parallel.state, single.state);
  EXPECT_LE(d.norm, 1e-5) << mode_name(c.mode);
  EXPECT_LE(d.max, 1e-4) << mode_name(c.mode);
  EXPECT_NEAR(parallel.loss, single.loss, 1e-5 * std::abs(single.loss));
  // A summing call reduces only its loss; an updating one the gradients too.
  for (int i = 0; i < kCalls; ++i)
    if (i % kAccumulate == kAccumulate - 1)
      EXPECT_GT(collectives[size_t(i)], 1) << "call " << i;
    else
      EXPECT_EQ(collectives[size_t(i)], 1) << "call " << i;
  for (const auto& [name, t] : parallel.state) {
    std::vector<uint64_t> h = dist::all_gather(std::hash<std::string_view>{}(
        std::string_view(reinterpret_cast<const char*>(t.data<float>()), t.nbytes())));
    EXPECT_EQ(h[0], h[1]) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, DataParallelAccumulate,
                         ::testing::Values(Case{StepMode::single_graph},
                                           Case{StepMode::three_graph}, Case{StepMode::interpret},
                                           Case{StepMode::single_graph, true},
                                           Case{StepMode::three_graph, true}),
                         [](const auto& info) {
                           return std::string(mode_name(info.param.mode)) +
                                  (info.param.zero ? "_zero" : "");
                         });

}  // namespace
}  // namespace ws

int main(int argc, char** argv) { return ws::test::run_tests_on_ranks(argc, argv); }
