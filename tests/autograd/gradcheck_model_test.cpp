// check::gradcheck on a model written as a user would: one result per
// parameter with its worst element, a deliberately wrong rule (VjpFault)
// flagging exactly the parameters whose gradients pass through it, and a
// model with dropout checked for the mask it draws.
#include <cmath>

#include <gtest/gtest.h>

#include "autograd/gradcheck.hpp"
#include "autograd/vjp_fault.hpp"
#include "exec/interpreter.hpp"
#include "step/capture_step.hpp"
#include "test_util.hpp"
#include "wholestep/check.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

using testing::error_of;

// A user's own model: Linear, tanh, optional dropout, Linear.
struct TwoLayerTanh : nn::Module {
  explicit TwoLayerTanh(double dropout = 0) : drop(dropout) {
    register_module("fc1", fc1);
    register_module("drop", drop);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) { return fc2(drop(tanh(fc1(x)))); }
  nn::Linear fc1{5, 4}, fc2{4, 3};
  nn::Dropout drop;
};

struct Seeded {
  explicit Seeded(uint64_t seed) { manual_seed(seed); }
};

struct Case {
  explicit Case(double dropout = 0) : model(dropout) {
    x = randn({6, 5});
    y = Tensor::from_vector(std::vector<int64_t>{0, 2, 1, 1, 0, 2}, {6});
  }
  LossFn loss() {
    return [this](const std::vector<Tensor>& d) {
      return nn::cross_entropy(model.forward(d[0]), d[1]);
    };
  }
  check::GradcheckResult run(int64_t max_elements = 64) {
    return check::gradcheck(model, loss(), {x, y}, {.max_elements = max_elements});
  }
  Seeded seed{4};  // before the model: its initialization is drawn from the seed
  TwoLayerTanh model;
  Tensor x, y;
};

TEST(GradcheckModel, GivesEachParameterItsWorstElement) {
  Case c;
  const check::GradcheckResult r = c.run(/*max_elements=*/8);
  EXPECT_TRUE(r.ok) << r.report;
  const nn::NamedTensors params = c.model.named_parameters();
  ASSERT_EQ(r.params.size(), params.size());
  int64_t checked = 0;
  double max_error = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const check::ParamCheck& p = r.params[i];
    SCOPED_TRACE(p.name);
    EXPECT_EQ(p.name, params[i].first);
    EXPECT_EQ(p.shape, params[i].second.shape());
    EXPECT_EQ(p.checked, std::min<int64_t>(8, params[i].second.numel()));
    EXPECT_TRUE(p.ok);
    ASSERT_EQ(p.at.size(), p.shape.size());
    for (size_t d = 0; d < p.at.size(); ++d) {
      EXPECT_GE(p.at[d], 0);
      EXPECT_LT(p.at[d], p.shape[d]);
    }
    EXPECT_EQ(p.error, std::abs(p.analytic - p.numeric));
    EXPECT_LE(p.error, p.max_abs_error);
    EXPECT_LE(p.error, 1e-6 + 1e-4 * std::abs(p.numeric));
    checked += p.checked;
    max_error = std::max(max_error, p.max_abs_error);
  }
  EXPECT_EQ(r.checked, checked);
  EXPECT_EQ(r.max_abs_error, max_error);
  // The gradients are not all zero: the check compared something.
  double largest = 0;
  for (const check::ParamCheck& p : r.params) largest = std::max(largest, std::abs(p.numeric));
  EXPECT_GT(largest, 1e-3);
}

// Each parameter's finite differences evaluate only the part of the graph
// that depends on it; the numbers are those of the whole graph.
TEST(GradcheckModel, NumericValuesAreTheWholeGraphsFiniteDifferences) {
  Case c;
  const check::GradcheckResult r = c.run(/*max_elements=*/8);
  const step::CapturedStep cap = step::trace_forward(
      c.model, nullptr, c.loss(), {{DType::f32, c.x.shape()}, {DType::i64, c.y.shape()}}, {});
  ir::Graph g = autograd::promote_to_f64(cap.joint.graph);
  g.outputs.resize(1);
  std::vector<Tensor> inputs;
  for (ir::ValueId v : g.inputs) {
    const step::InputSource& s = cap.source(v);
    if (s.role == ir::InputRole::data)
      inputs.push_back(s.index == 0 ? cast(c.x, DType::f64).clone() : c.y);
    else
      inputs.push_back(cast(cap.persistent.at(s.index).second, DType::f64).clone());
  }
  ASSERT_EQ(inputs.size(), g.inputs.size());
  const double eps = check::GradcheckOptions{}.eps;
  size_t compared = 0;
  for (const check::ParamCheck& p : r.params) {
    SCOPED_TRACE(p.name);
    int64_t flat = 0;
    for (size_t d = 0; d < p.at.size(); ++d) flat = flat * p.shape[d] + p.at[d];
    for (size_t i = 0; i < g.inputs.size(); ++i)
      if (g.input_name(g.inputs[i]) == p.name) {
        double* v = inputs[i].data<double>();
        const double saved = v[flat];
        v[flat] = saved + eps;
        const double up = exec::interpret(g, inputs)[0].item();
        v[flat] = saved - eps;
        const double down = exec::interpret(g, inputs)[0].item();
        v[flat] = saved;
        EXPECT_EQ(p.numeric, (up - down) / (2 * eps));
        ++compared;
      }
  }
  EXPECT_EQ(compared, r.params.size());
  EXPECT_EQ(compared, 4u);
}

// tanh's rule scaled by 1.5: the gradients of fc1 (before the tanh) are
// wrong by that factor, fc2's (after it) are right.
TEST(GradcheckModel, AWrongRuleFlagsTheParametersBehindIt) {
  Case c;
  check::GradcheckResult r;
  {
    autograd::VjpFault fault("tanh", 1.5);
    r = c.run();
  }
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.params.size(), 4u);
  for (const check::ParamCheck& p : r.params) {
    SCOPED_TRACE(p.name);
    const bool behind = p.name.rfind("fc1.", 0) == 0;
    EXPECT_EQ(p.ok, !behind);
    if (behind) {
      EXPECT_GT(p.error, 1e-6 + 1e-4 * std::abs(p.numeric));
      EXPECT_NEAR(p.analytic / p.numeric, 1.5, 1e-4);
    }
  }
  // The table says so, one row per parameter.
  const std::string table = check::format_gradcheck(r);
  for (const check::ParamCheck& p : r.params) {
    const size_t row = table.find("\n" + p.name + " ");
    ASSERT_NE(row, std::string::npos) << table;
    const std::string line = table.substr(row + 1, table.find('\n', row + 1) - row - 1);
    EXPECT_TRUE(line.ends_with(p.ok ? "  pass" : "  FAIL")) << line;
    EXPECT_NE(line.find(shape_str(p.shape)), std::string::npos) << line;
  }
  // The fault ended with its scope.
  EXPECT_TRUE(c.run().ok);
}

// An embedding of 500 rows whose batch reads 3: its gradient is zero but
// in 3 x 4 of 2000 elements. A sample of 8 still compares half of them
// where the loss depends on the table, so a wrong gather rule is caught
// (8 uniform draws would miss those rows 95% of the time), and the rest
// where the rule says the loss does not depend on it.
struct EmbeddingSum : nn::Module {
  EmbeddingSum() { register_module("emb", emb); }
  nn::Embedding emb{500, 4};
};

TEST(GradcheckModel, ASparseGradientIsSampledWhereItIsNotZero) {
  manual_seed(7);
  EmbeddingSum m;
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{17, 250, 17, 499}, {4});
  const LossFn loss = [&](const std::vector<Tensor>& d) {
    const Tensor e = m.emb(d[0]);
    return mean(e * e, {0, 1});
  };
  const check::GradcheckOptions opts{.max_elements = 8};
  const check::GradcheckResult ok = check::gradcheck(m, loss, {idx}, opts);
  ASSERT_TRUE(ok.ok) << ok.report;
  ASSERT_EQ(ok.params.size(), 1u);
  EXPECT_EQ(ok.params[0].checked, 8);
  EXPECT_NE(ok.params[0].analytic, 0) << "the worst element is in a row the batch reads";
  check::GradcheckResult bad;
  {
    autograd::VjpFault fault("gather", 0.5);
    bad = check::gradcheck(m, loss, {idx}, opts);
  }
  EXPECT_FALSE(bad.ok);
  EXPECT_FALSE(bad.params[0].ok);
  EXPECT_NEAR(bad.params[0].analytic / bad.params[0].numeric, 0.5, 1e-4);
}

TEST(GradcheckModel, AFaultNeedsADifferentiableOp) {
  EXPECT_EQ(error_of([] { autograd::VjpFault f("tanhh", 2); }),
            "VjpFault: 'tanhh' is not a differentiable op");
  EXPECT_EQ(error_of([] { autograd::VjpFault f("eq", 2); }),
            "VjpFault: 'eq' is not a differentiable op");
}

// Dropout draws from the random stream, an input of the traced graph: every
// evaluation sees the same mask, and the stream is left where it was.
TEST(GradcheckModel, DropoutIsCheckedForItsMaskAndLeavesTheStream) {
  Case c(/*dropout=*/0.5);
  const RandomStream before = random_stream();
  const check::GradcheckResult r = c.run();
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_EQ(r.params.size(), 4u);
  EXPECT_EQ(random_stream().seed, before.seed);
  EXPECT_EQ(random_stream().offset, before.offset);
}

}  // namespace
}  // namespace ws
