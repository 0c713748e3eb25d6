// Every model, optimizer and option the command line accepts, through every
// mode: each compiles, trains two steps to a finite loss, and the compiled
// modes agree with the interpreter. The setups are made as the command line
// makes them (models::make_setup, what tools/options.cpp calls); the
// options are --weight-decay, --max-grad-norm, --momentum 0 (SGD) and
// --memory-budget, each alone, and none.
//
// Where a bug depends on the graph's shape (tiny_mlp with weight decay:
// one more input made autograd's node vector grow inside a VJP rule), the
// model's architecture is what matters, so every model is built as the
// command line builds it; only the batch is smaller (it changes no node),
// except tiny_mlp's, to keep the interpreter's share of the time small.
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ir/verify.hpp"
#include "wholestep/compare.hpp"
#include "wholestep/models.hpp"

namespace ws {
namespace {

// Agreement after two steps, as `wholestep check` asks after three.
constexpr double kTolerance = 1e-4;

struct Case {
  std::string model, optimizer, option;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << c.optimizer << " " << c.option;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.model + "_" + info.param.optimizer + "_" + info.param.option;
}

std::vector<Case> cases(const std::string& model) {
  std::vector<Case> out;
  for (const char* opt : {"sgd", "adam", "adamw"})
    for (const char* option :
         {"default", "weight_decay", "max_grad_norm", "momentum_0", "memory_budget"})
      if (std::string(option) != "momentum_0" || std::string(opt) == "sgd")
        out.push_back({model, opt, option});
  return out;
}

// Turns the verifier on or off, and back as it was.
class VerifyGuard {
 public:
  explicit VerifyGuard(bool on) : before_(ir::verify_enabled()) { ir::set_verify_enabled(on); }
  ~VerifyGuard() { ir::set_verify_enabled(before_); }
  VerifyGuard(const VerifyGuard&) = delete;
  VerifyGuard& operator=(const VerifyGuard&) = delete;

 private:
  bool before_;
};

class Sweep : public ::testing::TestWithParam<Case> {};

TEST_P(Sweep, EveryModeTrainsTwoFiniteStepsAndAgreesWithTheInterpreter) {
  const Case& c = GetParam();
  models::Spec spec = models::spec(c.model);
  if (c.model == "mlp") spec.batch = 8;
  if (c.model == "cnn") spec.batch = 2;
  if (c.model == "gpt") spec.batch = 1;
  // Verifying (with a text round trip) after every pass takes ten times the
  // run for cnn's and gpt's graphs; models_test verifies those through
  // every mode, so here they run as the command line runs them.
  VerifyGuard verify(c.model == "mlp" || c.model == "tiny_mlp");
  models::OptimizerChoice choice{.name = c.optimizer};
  double budget = 0;
  if (c.option == "weight_decay") choice.weight_decay = 0.01;
  if (c.option == "max_grad_norm") choice.max_grad_norm = 1;
  if (c.option == "momentum_0") choice.momentum = 0;
  if (c.option == "memory_budget") budget = 0.5;
  const std::vector<CompareConfig> configs = {
      {StepMode::interpret},
      {.mode = StepMode::three_graph, .memory_budget = budget},
      {.mode = StepMode::single_graph, .memory_budget = budget}};
  const std::vector<CompareRow> rows = compare_modes(
      [&] {
        manual_seed(3);
        return models::make_setup(spec, choice);
      },
      configs, [&](int64_t step) { return models::random_batch(spec, uint64_t(step) + 1); },
      /*steps=*/2, /*warmup_steps=*/0);
  ASSERT_EQ(rows.size(), configs.size());
  for (const CompareRow& r : rows) {
    SCOPED_TRACE(mode_name(r.config.mode));
    EXPECT_TRUE(std::isfinite(r.final_loss)) << r.final_loss;
    EXPECT_LT(r.max_rel_diff, kTolerance) << "largest difference in " << r.max_diff_at;
    EXPECT_NEAR(r.final_loss, rows[0].final_loss, kTolerance * std::abs(rows[0].final_loss));
  }
}

// An mlp with a hidden layer of 1536 at batch 8: that layer's weight
// gradient is a product over a short contraction of 2^20 results or more,
// computed inside the weight's update (a product loop). The fused single
// graph gives the unfused program's bits under every optimizer: the
// sweep's tolerance is far wider than what a misplaced tile changes.
TEST(ProductLoops, TheFusedSingleGraphGivesTheUnfusedProgramsBits) {
  models::Spec spec = models::spec("mlp");
  spec.batch = 8, spec.sizes = {784, 1536, 10};
  for (const char* name : {"sgd", "adam", "adamw"})
    for (double momentum : {0.9, 0.0}) {
      if (momentum == 0 && std::string(name) != "sgd") continue;
      SCOPED_TRACE(std::string(name) + (momentum == 0 ? " without momentum" : ""));
      const models::OptimizerChoice choice{.name = name, .momentum = momentum};
      const std::vector<CompareConfig> configs = {{.mode = StepMode::single_graph, .fuse = false},
                                                  {.mode = StepMode::single_graph}};
      const std::vector<CompareRow> rows = compare_modes(
          [&] {
            manual_seed(3);
            return models::make_setup(spec, choice);
          },
          configs, [&](int64_t step) { return models::random_batch(spec, uint64_t(step) + 1); },
          /*steps=*/2, /*warmup_steps=*/0);
      ASSERT_EQ(rows.size(), 2u);
      EXPECT_EQ(rows[1].max_rel_diff, 0.0) << "largest difference in " << rows[1].max_diff_at;
      EXPECT_EQ(rows[1].final_loss, rows[0].final_loss);
    }
}

INSTANTIATE_TEST_SUITE_P(Mlp, Sweep, ::testing::ValuesIn(cases("mlp")), case_name);
INSTANTIATE_TEST_SUITE_P(TinyMlp, Sweep, ::testing::ValuesIn(cases("tiny_mlp")), case_name);
INSTANTIATE_TEST_SUITE_P(Cnn, Sweep, ::testing::ValuesIn(cases("cnn")), case_name);
INSTANTIATE_TEST_SUITE_P(Gpt, Sweep, ::testing::ValuesIn(cases("gpt")), case_name);

}  // namespace
}  // namespace ws
