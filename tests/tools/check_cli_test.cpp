// `wholestep check`: a table row per parameter and the modes' agreement,
// exit status 0 when all pass; a deliberately wrong gradient rule (the
// hidden --testing-scale-vjp) makes it fail with status 1, naming the
// parameters whose gradients pass through the rule.
#include <gtest/gtest.h>

#include <string>

#include "cli_run.hpp"

namespace {

using namespace ws::testing;

// The line of `text` that starts with `start`, or "".
std::string line_starting(const std::string& text, const std::string& start) {
  const size_t at = text.rfind("\n" + start, text.size());
  if (at == std::string::npos) return "";
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

TEST(CliCheck, PassesOnASmallModelWithARowPerParameterAndMode) {
  const Result r = run("check --model tiny_mlp --threads 1");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_EQ(r.err, "");
  for (int layer = 1; layer <= 8; ++layer)
    for (const char* what : {"weight", "bias"}) {
      const std::string row = line_starting(r.out, fmt::format("fc{}.{} ", layer, what));
      EXPECT_TRUE(row.ends_with("  pass")) << row << "\n" << r.out;
    }
  EXPECT_NE(line_starting(r.out, "fc1.weight ").find("[64,64]"), std::string::npos) << r.out;
  EXPECT_TRUE(line_starting(r.out, "interpret ").ends_with("reference")) << r.out;
  EXPECT_TRUE(line_starting(r.out, "three_graph ").ends_with("pass")) << r.out;
  EXPECT_TRUE(line_starting(r.out, "single_graph ").ends_with("pass")) << r.out;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;
}

// tiny_mlp is fc1, relu, ..., relu, fc8, then a cross-entropy; relu is a
// select, and so is log_softmax's choice of its gradient's form per row:
// with the select rule doubled every layer gets a wrong gradient.
TEST(CliCheck, AWrongRuleFailsNamingTheParametersBehindIt) {
  const Result r = run("check --model tiny_mlp --threads 1 --testing-scale-vjp select=2");
  EXPECT_EQ(r.status, 1) << r.err << r.out;
  EXPECT_EQ(r.err.rfind("error: check failed: tiny_mlp: the gradient of fc1.weight, fc1.bias", 0),
            0u)
      << r.err;
  EXPECT_NE(r.err.find("fc8.bias differs from finite differences"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(line_starting(r.out, "fc1.weight ").ends_with("  FAIL")) << r.out;
  EXPECT_TRUE(line_starting(r.out, "fc8.weight ").ends_with("  FAIL")) << r.out;
  EXPECT_EQ(r.out.find("all checks passed"), std::string::npos) << r.out;
}

TEST(CliCheck, BadFlagsAreUsageErrorsAndTheTestOptionIsHidden) {
  expect_usage_error("check --steps 0", "--steps 0: must be at least 1");
  expect_usage_error("check --batch 0", "--batch 0: must be at least 1");
  expect_usage_error("check --elements -1", "--elements -1: must be at least 1");
  expect_usage_error("check --model resnet", "--model resnet: unknown model 'resnet'");
  expect_usage_error("check --testing-scale-vjp select",
                     "--testing-scale-vjp select: expected OP=FACTOR");
  expect_usage_error("check --testing-scale-vjp select=2x",
                     "--testing-scale-vjp select=2x: expected OP=FACTOR");
  expect_usage_error("check --testing-scale-vjp eq=2",
                     "--testing-scale-vjp eq=2: VjpFault: 'eq' is not a differentiable op");
  const Result help = run("check --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--elements"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("testing"), std::string::npos) << help.out;
}

}  // namespace
