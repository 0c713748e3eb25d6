// `wholestep opt`: the passes by name over IR text, as the pass goldens
// run them; its usage errors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli_run.hpp"

namespace ws::testing {
namespace {

const std::string kLower = std::string(WS_SOURCE_DIR) + "/tests/lower/";

// The printed graph is the golden, and stdout holds nothing else.
TEST(CliOpt, PrintsThePassesResultAsTheGoldenHasIt) {
  const Result r = run("opt --passes=fuse " + kLower + "fuse/softmax_two_loops.in.ir");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, slurp(kLower + "fuse/softmax_two_loops.out.ir"));
}

// Passes run in the order named; -o writes the text to a file instead.
TEST(CliOpt, RunsPassesInOrderAndWritesTheOutputFile) {
  const std::string dir = temp_dir("opt");
  const Result r = run("opt --passes=simplify,fold_constants " + kLower +
                       "fold_constants/causal_mask_folds.in.ir -o " + dir + "/out.ir");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(slurp(dir + "/out.ir"), slurp(kLower + "fold_constants/causal_mask_folds.out.ir"));
}

TEST(CliOpt, UnknownPassesAndBadInputsAreUsageErrors) {
  const std::string in = kLower + "simplify/cse_merges_equal_nodes.in.ir";
  expect_usage_error("opt --passes=simplify,inline " + in,
                     "no pass 'inline'; the passes are simplify, channels_last, blocked_layouts, "
                     "blocked_layouts_of_8, "
                     "merge_product_sums, update_into_product");
  expect_usage_error("opt --passes=simplify /nonexistent/graph.ir",
                     "/nonexistent/graph.ir: cannot read the file");
  const std::string dir = temp_dir("opt_bad");
  std::ofstream(dir + "/bad.ir") << "graph g {\n  %0 = input data \"x\" : f32[2]\n  %1 = frob %0 "
                                    ": f32[2]\n  out user %1 \"y\"\n}\n";
  expect_usage_error("opt --passes=fuse " + dir + "/bad.ir",
                     dir + "/bad.ir: parse error at line 3: unknown op 'frob'");
}

}  // namespace
}  // namespace ws::testing
