// Every lowering pass as text in, text out: tests/lower/<pass>/<case>.in.ir
// run through the pass named <pass> (lower::find_pass, as `wholestep opt
// --passes=<pass>` runs it) must print as <case>.out.ir beside it. A new
// case is a file pair; no C++ to write. Each case also checks that
//  - the result passes the verifier and a print/parse round trip;
//  - the pass reports a change exactly when the text changed;
//  - the input graph and the rewritten graph, interpreted on the same
//    random inputs (three runs, updates fed on), give the same bits, and
//    so do the whole pipeline's graph and the lowered programs, fused and
//    unfused.
// Leading `#` lines of an .in.ir say what the case is about. One of them
// may relax the bit check: `# bits: near` (the rewrite computes the same
// sum another way; within a few roundings, the input graph against the
// rewritten one only).
//
// To regenerate the goldens after a deliberate change, run
//   WS_UPDATE_GOLDEN=1 build/tests/lower_tests --gtest_filter='*PassGoldens*'
// and review the diff of the .out.ir files (a missing .out.ir is written too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "ir/text.hpp"
#include "ir/verify.hpp"
#include "lower/pipeline.hpp"
#include "lowered_runs.hpp"
#include "test_util.hpp"

namespace ws {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string pass, name;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.pass << "/" << c.name; }

// Every folder of this directory holding .in.ir files, and its cases, in
// name order.
std::vector<Case> discover() {
  std::vector<Case> out;
  for (const fs::directory_entry& d : fs::directory_iterator(WS_TEST_DIR)) {
    if (!d.is_directory()) continue;
    for (const fs::directory_entry& f : fs::directory_iterator(d.path())) {
      const std::string file = f.path().filename().string();
      if (file.ends_with(".in.ir"))
        out.push_back({d.path().filename().string(), file.substr(0, file.size() - 6)});
    }
  }
  std::sort(out.begin(), out.end(), [](const Case& a, const Case& b) {
    return std::tie(a.pass, a.name) < std::tie(b.pass, b.name);
  });
  return out;
}

bool update_goldens() {
  const char* u = std::getenv("WS_UPDATE_GOLDEN");
  return u && std::string(u) == "1";
}

// Outputs of two runs agree: bit for bit, or within a few roundings.
void expect_agree(const std::vector<Tensor>& want, const std::vector<Tensor>& got,
                  const ir::Graph& g, bool near, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(std::string(what) + ", output " + g.outputs[i].name);
    const std::vector<double> w = want[i].to_vector(), r = got[i].to_vector();
    ASSERT_EQ(w.size(), r.size());
    for (size_t j = 0; j < w.size(); ++j) {
      if (near)
        ASSERT_NEAR(r[j], w[j], 1e-6 * std::abs(w[j]) + 1e-7) << "element " << j;
      else
        ASSERT_TRUE(r[j] == w[j] || (std::isnan(r[j]) && std::isnan(w[j])))
            << "element " << j << ": " << r[j] << " against " << w[j];
    }
  }
}

class PassGoldens : public ::testing::TestWithParam<Case> {};

TEST_P(PassGoldens, OutputIsTheGoldenAndComputesTheSameBits) {
  const Case& c = GetParam();
  const std::string dir = std::string(WS_TEST_DIR) + "/" + c.pass + "/";
  const lower::Pass* pass = lower::find_pass(c.pass);
  ASSERT_NE(pass, nullptr) << "tests/lower/" << c.pass
                           << "/ is named after no pass (known: " << lower::pass_names() << ")";
  const std::string text = testing::read_file(dir + c.name + ".in.ir");
  const bool near =
      text.find("\n# bits: near\n") != std::string::npos || text.starts_with("# bits: near\n");
  const ir::Graph in = ir::parse(text);
  bool changed = false;
  const ir::Graph out = pass->run(in, &changed);
  ir::verify_with_round_trip(out);
  const std::string got = ir::print(out), golden_path = dir + c.name + ".out.ir";
  if (update_goldens()) {
    std::ofstream(golden_path) << got;
  } else {
    EXPECT_EQ(got, testing::read_file(golden_path))
        << "golden " << c.pass << "/" << c.name << ".out.ir differs; to regenerate: "
        << "WS_UPDATE_GOLDEN=1 build/tests/lower_tests --gtest_filter='*PassGoldens*'";
  }
  EXPECT_EQ(changed, got != ir::print(in)) << c.pass << " reported a change wrongly";

  const std::vector<Tensor> inputs = testing::inputs_for(in);
  constexpr int kRuns = 3;
  expect_agree(testing::interpret_runs(in, inputs, kRuns),
               testing::interpret_runs(out, inputs, kRuns), in, near,
               "the rewritten graph interpreted");
  if (!near) testing::expect_same_everywhere(in, inputs, kRuns);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.pass + "__" + info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Lower, PassGoldens, ::testing::ValuesIn(discover()), case_name);

// Every pass of the pipeline has a folder of cases.
TEST(PassGoldensFolders, EveryPassHasCases) {
  const std::vector<Case> cases = discover();
  for (const lower::Pass& p : lower::all_passes())
    EXPECT_TRUE(
        std::any_of(cases.begin(), cases.end(), [&](const Case& c) { return c.pass == p.name; }))
        << "no golden case in tests/lower/" << p.name << "/";
}

}  // namespace
}  // namespace ws
