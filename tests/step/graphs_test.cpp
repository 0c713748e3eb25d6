// The graphs a 2-layer MLP step produces, as golden text, and gradcheck of
// the MLP loss through the public API.
#include <gtest/gtest.h>

#include "autograd/gradcheck.hpp"
#include "ir/text.hpp"
#include "ir/verify.hpp"
#include "partition/partition.hpp"
#include "step/capture_step.hpp"
#include "step/mlp_fixture.hpp"
#include "test_util.hpp"

namespace ws {
namespace {

struct TwoLayer {
  TwoLayer() {
    manual_seed(0);
    model = std::make_unique<models::Mlp>(std::vector<int64_t>{4, 3, 2});
    opt = std::make_unique<optim::SGD>(*model, optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
  }
  LossFn loss_fn() {
    models::Mlp* m = model.get();
    return [m](const std::vector<Tensor>& d) { return nn::cross_entropy(m->forward(d[0]), d[1]); };
  }
  std::vector<ir::Type> types{{DType::f32, {2, 4}}, {DType::i64, {2}}};
  std::unique_ptr<models::Mlp> model;
  std::unique_ptr<optim::SGD> opt;
};

TEST(StepGraphs, TracedForwardOfTwoLayerMlpMatchesGolden) {
  TwoLayer t;
  step::CapturedStep cap = step::trace_forward(*t.model, nullptr, t.loss_fn(), t.types, {});
  testing::expect_round_trip(cap.joint.graph);
  testing::expect_golden(ir::print(cap.joint.graph, {.locations = false}), "mlp2_forward.ir");
}

TEST(StepGraphs, JointGraphOfTwoLayerMlpMatchesGolden) {
  TwoLayer t;
  step::CapturedStep cap = step::capture_step(*t.model, *t.opt, t.loss_fn(), t.types, {});
  testing::expect_round_trip(cap.joint.graph);
  testing::expect_golden(ir::print(cap.joint.graph, {.locations = false}), "mlp2_joint.ir");
}

TEST(StepGraphs, ThreeGraphSplitRoundTripsAndConnectsByName) {
  TwoLayer t;
  step::CapturedStep cap = step::capture_step(*t.model, *t.opt, t.loss_fn(), t.types, {});
  partition::ThreeGraphs three = partition::three_graphs(cap.joint);
  for (const ir::Graph* g : {&three.forward, &three.backward, &three.optimizer}) {
    testing::expect_round_trip(*g);
    ir::verify(*g);
  }
  // Every saved/grad input of a later graph is an output of an earlier one.
  auto outputs_named = [](const ir::Graph& g, const std::string& n) {
    for (const ir::Output& o : g.outputs)
      if (o.name == n) return true;
    return false;
  };
  for (ir::ValueId v : three.backward.inputs_with_role(ir::InputRole::saved))
    EXPECT_TRUE(outputs_named(three.forward, three.backward.input_name(v)))
        << three.backward.input_name(v);
  for (ir::ValueId v : three.optimizer.inputs_with_role(ir::InputRole::grad))
    EXPECT_TRUE(outputs_named(three.backward, three.optimizer.input_name(v)));
  EXPECT_EQ(three.optimizer.inputs_with_role(ir::InputRole::grad).size(), 4u);
  // The single graph has no gradient outputs: they are intermediate values.
  ir::Graph single = partition::single_graph(cap.joint);
  for (const ir::Output& o : single.outputs) EXPECT_NE(o.role, ir::OutputRole::grad);
  testing::expect_round_trip(single);
}

TEST(StepGraphs, MlpLossGradientMatchesFiniteDifferences) {
  testing::SmallMlp run(9);
  auto batch = testing::random_batches(1, 3)[0];
  check::GradcheckResult r =
      check::gradcheck(*run.model, run.loss_fn(), batch, {.max_elements = 40});
  EXPECT_TRUE(r.ok) << r.report;
  int64_t expected = 0;  // every parameter of the three layers, up to 40 elements each
  for (auto& [n, p] : run.model->named_parameters()) expected += std::min<int64_t>(40, p.numel());
  EXPECT_EQ(r.checked, expected);
}

}  // namespace
}  // namespace ws
