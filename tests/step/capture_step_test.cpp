// What capture records for binding each input of the joint graph: its role
// and its place in what the role reads, never parsed from its name.
#include <gtest/gtest.h>

#include "mlp_fixture.hpp"
#include "step/capture_step.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

using testing::SmallMlp;

// Capture records what each joint input binds to from the order it lifts
// them in: arguments, hyperparameters and persistent entries by position.
TEST(CapturedStepSources, FollowTheCaptureOrder) {
  SmallMlp run(5);
  const std::vector<ir::Type> types = {{DType::f32, {SmallMlp::kBatch, SmallMlp::kIn}},
                                       {DType::i64, {SmallMlp::kBatch}}};
  step::CapturedStep cap = step::capture_step(*run.model, *run.opt, run.loss_fn(), types, {});
  const ir::Graph& g = cap.joint.graph;
  ASSERT_EQ(cap.sources.size(), g.inputs.size());
  size_t data = 0, hyper = 0;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const ir::ValueId v = g.inputs[i];
    const step::InputSource& s = cap.source(v);
    SCOPED_TRACE(g.input_name(v));
    EXPECT_EQ(&s, &cap.sources[i]);
    EXPECT_EQ(&cap.source(g.input_name(v)), &s);
    EXPECT_EQ(s.role, g.input_role(v));
    if (s.role == ir::InputRole::data) {
      EXPECT_EQ(s.index, data++);
    } else if (s.role == ir::InputRole::hyper) {
      EXPECT_EQ(s.index, hyper++);
      EXPECT_EQ(cap.hyper_names[s.index], g.input_name(v));
    } else {
      ASSERT_LT(s.index, cap.persistent.size());
      EXPECT_EQ(cap.persistent[s.index].first, g.input_name(v));
      EXPECT_EQ(cap.persistent[s.index].second.shape(), g.type(v).shape);
    }
  }
  EXPECT_EQ(data, 2u);
  EXPECT_EQ(hyper, cap.hyper_names.size());
}

}  // namespace
}  // namespace ws
