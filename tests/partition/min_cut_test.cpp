// The min-cut partitioner: what the forward saves for the backward, against
// saving everything the backward reads.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "partition/explain.hpp"
#include "partition/min_cut.hpp"
#include "step/capture_step.hpp"
#include "test_util.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

partition::JointGraph joint_of(const models::Spec& spec) {
  manual_seed(0);
  auto model = models::make(spec);
  optim::Adam opt(*model, {.lr = 1e-3});
  std::vector<ir::Type> types;
  for (const Tensor& t : models::random_batch(spec, 0)) types.push_back({t.dtype(), t.shape()});
  return step::capture_step(*model, opt, models::loss_fn(*model), types, {}).joint;
}

int64_t saved_bytes(const ir::Graph& forward) {
  int64_t bytes = 0;
  for (const ir::Output& o : forward.outputs)
    if (o.role == ir::OutputRole::saved) bytes += int64_t(forward.type(o.value).bytes());
  return bytes;
}

// On every reference model the cut keeps no more bytes than saving
// everything, recomputes only elementwise, reduction and shape ops, and the
// forward graph saves exactly the cut.
TEST(MinCut, EveryModelSavesNoMoreThanSaveAllAndRecomputesOnlyCheapOps) {
  for (const std::string& name : models::names()) {
    SCOPED_TRACE(name);
    const partition::JointGraph joint = joint_of(models::spec(name));
    const partition::RematPlan plan = partition::min_cut(joint);
    EXPECT_LE(plan.saved_bytes, plan.save_all_bytes);
    for (ir::ValueId v : plan.recomputed) {
      const ir::OpCategory c = ir::op_info(joint.graph.node(v).op).category;
      EXPECT_TRUE(c == ir::OpCategory::elementwise || c == ir::OpCategory::reduction ||
                  c == ir::OpCategory::shape || joint.graph.node(v).op == ir::Op::iota)
          << "%" << v << " " << ir::op_name(joint.graph.node(v).op) << " recomputed";
    }
    const partition::ThreeGraphs cut = partition::three_graphs(joint);
    const partition::ThreeGraphs all = partition::three_graphs(joint, partition::Saving::all);
    EXPECT_EQ(saved_bytes(cut.forward), plan.saved_bytes);
    EXPECT_EQ(saved_bytes(all.forward), plan.save_all_bytes);
    std::printf("%s: save-all %.2f MiB, min cut %.2f MiB (%zu values recomputed)\n", name.c_str(),
                double(plan.save_all_bytes) / (1 << 20), double(plan.saved_bytes) / (1 << 20),
                plan.recomputed.size());
  }
}

// A 2-layer MLP (784 -> 32 -> 10, batch 8): the exact values the cut saves
// and what it recomputes (golden text beside this test), at the default
// prices and at the smallest budget.
TEST(MinCut, TwoLayerMlpSavesExactlyTheseValues) {
  models::Spec spec = models::spec("mlp");
  spec.sizes = {784, 32, 10};
  spec.batch = 8;
  const partition::JointGraph joint = joint_of(spec);
  std::string text;
  auto describe = [&](const char* title, const partition::RematPlan& plan) {
    text += fmt::format("{}:\n", title);
    auto line = [&](const char* what, ir::ValueId v) {
      const ir::Node& n = joint.graph.node(v);
      std::string args;
      for (ir::ValueId a : n.args)
        args += fmt::format("{}{}", args.empty() ? "" : ", ", ir::op_name(joint.graph.node(a).op));
      text += fmt::format("{} %{} = {}({}) : {}\n", what, v, ir::op_name(n.op), args, n.type.str());
    };
    for (ir::ValueId v : plan.saved) line("saved", v);
    for (ir::ValueId v : plan.recomputed) line("recomputed", v);
    text += fmt::format("saved bytes {} of {}\n", plan.saved_bytes, plan.save_all_bytes);
  };
  describe("min cut", partition::min_cut(joint));
  describe("smallest budget", partition::budgeted_cut(joint, 0));
  testing::expect_golden(text, "two_layer_mlp.min_cut.txt");
}

// A memory budget bounds what the forward keeps for the backward. Across a
// sweep on cnn and gpt, in both modes: the bytes between the graphs never
// grow as the budget falls and stay within it down to the fewest bytes any
// cut keeps; the planned peak never rises as the budget falls, and at the
// smallest budget it is below saving everything's; and the step computes
// the same bits (recomputation repeats the same ops).
TEST(MinCut, LoweringTheBudgetLowersSavedBytesAndPlannedPeakInBothModes) {
  for (const char* name : {"cnn", "gpt"}) {
    SCOPED_TRACE(name);
    const models::Spec spec = models::spec(name);
    const std::vector<Tensor> batch = models::random_batch(spec, 0);
    const partition::JointGraph joint = joint_of(spec);
    const int64_t all = partition::save_all(joint).saved_bytes,
                  least = partition::budgeted_cut(joint, 0).saved_bytes;
    EXPECT_LT(least, all);
    auto run = [&](StepOptions opts) {
      manual_seed(0);  // the same parameters and random stream for every budget
      auto model = models::make(spec);
      optim::Adam opt(*model, {.lr = 1e-3});
      TrainStep step(*model, opt, models::loss_fn(*model), opts);
      return step.run(batch);
    };
    for (StepMode mode : {StepMode::three_graph, StepMode::single_graph}) {
      SCOPED_TRACE(mode == StepMode::three_graph ? "three_graph" : "single_graph");
      // Saving everything: three_graph without the cut; single_graph
      // without a budget.
      const StepResult keep = run({.mode = mode, .recompute = false});
      int64_t previous_between = keep.counters.interface_bytes,
              previous_peak = keep.counters.peak_bytes;
      // The last budget, 2 bytes (above 1: bytes), is below every cut: the
      // fewest bytes.
      for (double budget : {1.0, 0.8, 0.6, 0.4, 0.2, 2.0}) {
        const bool smallest = budget == 2.0;
        SCOPED_TRACE(budget);
        const StepResult r = run({.mode = mode, .memory_budget = budget});
        EXPECT_LE(r.counters.interface_bytes, previous_between);
        EXPECT_LE(r.counters.peak_bytes, previous_peak);
        previous_between = r.counters.interface_bytes;
        previous_peak = r.counters.peak_bytes;
        const int64_t bytes = budget > 1 ? int64_t(budget) : int64_t(budget * double(all));
        EXPECT_LE(partition::budgeted_cut(joint, bytes).saved_bytes, std::max(bytes, least));
        EXPECT_EQ(r.loss, keep.loss);
        if (smallest) {
          EXPECT_LT(r.counters.peak_bytes, keep.counters.peak_bytes);
          std::printf("%s %s: planned peak %.2f MiB saving everything, %.2f MiB at the fewest\n",
                      name, mode == StepMode::three_graph ? "three_graph" : "single_graph",
                      double(keep.counters.peak_bytes) / (1 << 20),
                      double(r.counters.peak_bytes) / (1 << 20));
        }
      }
    }
  }
}

// With the cut in both modes, the single graph plans a lower peak than the
// three graphs on every reference model, with SGD and with Adam; and cnn's
// three graphs keep at most 80% of what saving everything keeps between
// them.
TEST(MinCut, SingleGraphPlansALowerPeakThanThreeGraphsOnEveryModel) {
  for (const std::string& name : models::names()) {
    for (bool adam : {false, true}) {
      SCOPED_TRACE(name + (adam ? " adam" : " sgd"));
      const models::Spec spec = models::spec(name);
      auto run = [&](StepOptions opts) {
        manual_seed(0);
        auto model = models::make(spec);
        std::unique_ptr<optim::Optimizer> opt;
        if (adam)
          opt = std::make_unique<optim::Adam>(*model, optim::AdamOptions{.lr = 1e-3});
        else
          opt =
              std::make_unique<optim::SGD>(*model, optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
        TrainStep step(*model, *opt, models::loss_fn(*model), opts);
        return step.run(models::random_batch(spec, 0)).counters;
      };
      const StepCounters single = run({.mode = StepMode::single_graph}),
                         three = run({.mode = StepMode::three_graph});
      EXPECT_LT(single.peak_bytes, three.peak_bytes);
      if (name == "cnn") {
        const StepCounters all = run({.mode = StepMode::three_graph, .recompute = false});
        EXPECT_LE(double(three.interface_bytes), 0.8 * double(all.interface_bytes));
      }
    }
  }
}

TEST(MinCut, ANegativeBudgetIsAClearError) {
  manual_seed(0);
  auto model = models::make(models::spec("mlp"));
  optim::SGD opt(*model, {.lr = 0.01});
  EXPECT_THROW(
      {
        try {
          TrainStep bad(*model, opt, models::loss_fn(*model), {.memory_budget = -1});
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("memory_budget=-1: must be a finite number >= 0"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

// gpt's attention dropout: the cut saves the 1-byte mask of the draw and the
// backward recomputes the dropped-out probabilities from it, so the draw is
// never repeated and the gradients are unchanged: three steps of three_graph
// with the cut leave exactly the parameters the interpreter leaves.
TEST(MinCut, RecomputedDropoutUsesTheSavedMaskOfTheOriginalDraw) {
  const models::Spec spec = models::spec("gpt");
  ASSERT_GT(spec.gpt.dropout, 0);
  const partition::JointGraph joint = joint_of(spec);
  // The smallest budget: the cut that keeps the fewest bytes recomputes
  // the dropped-out attention probabilities.
  const partition::RematPlan plan = partition::budgeted_cut(joint, 0);
  const ir::Graph& g = joint.graph;
  int from_saved_mask = 0;
  for (ir::ValueId v : plan.recomputed) {
    const ir::Node& n = g.node(v);
    if (n.op != ir::Op::select) continue;
    const ir::Node& mask = g.node(n.args[0]);
    if (mask.op == ir::Op::lt && g.node(mask.args[0]).op == ir::Op::random_uniform &&
        std::find(plan.saved.begin(), plan.saved.end(), n.args[0]) != plan.saved.end())
      ++from_saved_mask;
  }
  for (ir::ValueId v : plan.recomputed)
    EXPECT_NE(g.node(v).op, ir::Op::random_uniform) << "a draw is recomputed";
  EXPECT_GE(from_saved_mask, 2) << "one per attention layer";
  std::vector<std::vector<double>> params;
  for (StepMode mode : {StepMode::interpret, StepMode::three_graph}) {
    manual_seed(3);
    auto model = models::make(spec);
    optim::Adam opt(*model, {.lr = 1e-3}, true);
    TrainStep step(*model, opt, models::loss_fn(*model), {.mode = mode, .memory_budget = 2});
    for (int i = 0; i < 3; ++i) step.run(models::random_batch(spec, uint64_t(i)));
    params.emplace_back();
    for (const auto& [name, p] : model->named_parameters()) {
      const std::vector<double> v = p.to_vector();
      params.back().insert(params.back().end(), v.begin(), v.end());
    }
  }
  ASSERT_EQ(params[0].size(), params[1].size());
  for (size_t i = 0; i < params[0].size(); ++i)
    ASSERT_EQ(params[1][i], params[0][i]) << "parameter element " << i;
}

// A small mlp whose loss squares three of its outputs picked by a gather:
// the backward reads the gather's result, which is never recomputed.
partition::JointGraph joint_reading_a_gather() {
  models::Spec spec = models::spec("mlp");
  spec.sizes = {784, 32, 10};
  spec.batch = 8;
  manual_seed(0);
  auto model = models::make(spec);
  optim::SGD opt(*model, {.lr = 0.01});
  std::vector<ir::Type> types;
  for (const Tensor& t : models::random_batch(spec, 0)) types.push_back({t.dtype(), t.shape()});
  const LossFn loss = [&model](const std::vector<Tensor>& d) {
    const Tensor picked = gather(model->forward(d[0]).reshape({80}),
                                 Tensor::from_vector(std::vector<int64_t>{3, 17, 42}, {3}));
    return sum(mul(picked, picked), {0});
  };
  return step::capture_step(*model, opt, loss, types, {}).joint;
}

// The report has one line per saved or recomputed value with its reason
// (on cnn, and on an mlp whose backward reads a gather's result: never
// recomputed), and the DOT picture marks the saved values. Compiled steps
// in both modes describe their partition; an interpreted step has none.
TEST(MinCut, ReportAndPictureDescribeThePlan) {
  const partition::JointGraph picking = joint_reading_a_gather();
  const std::string picked = partition::explain(picking, partition::min_cut(picking));
  EXPECT_NE(picked.find("never recomputed: gather is not an elementwise, reduction or shape op"),
            std::string::npos)
      << picked;
  const partition::JointGraph joint = joint_of(models::spec("cnn"));
  const partition::RematPlan plan = partition::min_cut(joint);
  const std::string report = partition::explain(joint, plan), dot = partition::to_dot(joint, plan);
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(report, " saved "), plan.saved.size()) << report;
  EXPECT_EQ(count(report, " recompute "), plan.recomputed.size()) << report;
  EXPECT_EQ(count(report, "never recomputed: ") + count(report, "cheaper to save"),
            plan.saved.size())
      << report;
  EXPECT_EQ(count(dot, "peripheries=2"), plan.saved.size());
  EXPECT_EQ(count(dot, "dashed"), plan.recomputed.size());
  EXPECT_EQ(dot.rfind("digraph step {", 0), 0u);

  models::Spec spec = models::spec("mlp");
  manual_seed(0);
  auto model = models::make(spec);
  optim::SGD opt(*model, {.lr = 0.01});
  for (StepMode mode : {StepMode::single_graph, StepMode::three_graph}) {
    TrainStep step(*model, opt, models::loss_fn(*model), {.mode = mode});
    step.run(models::random_batch(spec, 0));
    EXPECT_NE(step.partition_report().find("saving everything the backward reads keeps"),
              std::string::npos);
    EXPECT_EQ(step.partition_dot().rfind("digraph step {", 0), 0u);
  }
  TrainStep interpreted(*model, opt, models::loss_fn(*model), {.mode = StepMode::interpret});
  interpreted.run(models::random_batch(spec, 0));
  EXPECT_EQ(interpreted.partition_report(), "");
}

}  // namespace
}  // namespace ws
