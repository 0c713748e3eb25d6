// A checker of lowered Programs' memory, run on every reference model in
// both compiled modes:
//  - no two arena slots that are alive at the same time share a byte (a slot
//    is alive from its first write to its last read; results written in
//    place share their operand's slot, so one slot may be written by a
//    chain of kernels);
//  - no kernel reads an arena slot before some kernel has written it.
// (That no parameter or state is overwritten while its old value is still to
// be read is the alias pass's rule, tested in lower_test.cpp: a Program
// alone cannot tell an old value's read from a read of the update.)
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "exec/program.hpp"
#include "lower/lower.hpp"
#include "partition/partition.hpp"
#include "partition/update_order.hpp"
#include "step/capture_step.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

using exec::SlotKind;

struct Use {
  int64_t first_write = -1, last_read = -1, last_write = -1;
  std::vector<int64_t> reads;
};

void check_program(const exec::Program& p, const std::string& what) {
  std::vector<Use> uses(p.slots.size());
  for (int64_t k = 0; k < int64_t(p.kernels.size()); ++k) {
    const exec::Kernel& kern = p.kernels[size_t(k)];
    for (int32_t s : kern.in) {
      uses[size_t(s)].reads.push_back(k);
      uses[size_t(s)].last_read = k;
    }
    std::vector<int32_t> written = kern.outs();
    written.push_back(kern.scratch);
    for (int32_t s : written) {
      if (s < 0) continue;
      Use& u = uses[size_t(s)];
      if (u.first_write < 0) u.first_write = k;
      u.last_write = k;
    }
  }
  for (size_t s = 0; s < p.slots.size(); ++s) {
    const exec::Slot& sl = p.slots[s];
    const Use& u = uses[s];
    if (sl.kind == SlotKind::arena && !u.reads.empty())
      EXPECT_TRUE(u.first_write >= 0 && u.first_write <= u.reads.front())
          << what << ": arena slot " << s << " is read at kernel " << u.reads.front()
          << " before it is written";
  }
  for (size_t a = 0; a < p.slots.size(); ++a)
    for (size_t b = a + 1; b < p.slots.size(); ++b) {
      const exec::Slot &x = p.slots[a], &y = p.slots[b];
      if (x.kind != SlotKind::arena || y.kind != SlotKind::arena) continue;
      const Use &ux = uses[a], &uy = uses[b];
      if (ux.first_write < 0 || uy.first_write < 0) continue;
      const int64_t xe = std::max(ux.last_read, ux.last_write),
                    ye = std::max(uy.last_read, uy.last_write);
      const bool time = ux.first_write <= ye && uy.first_write <= xe;
      const bool space = x.index < y.index + y.bytes && y.index < x.index + x.bytes;
      EXPECT_FALSE(time && space) << what << ": arena slots " << a << " [" << x.index << ", +"
                                  << x.bytes << ") and " << b << " [" << y.index << ", +" << y.bytes
                                  << ") are alive together at overlapping bytes";
    }
}

TEST(PlanCheck, EveryModelsProgramsKeepLiveBuffersApartAndWriteBeforeReading) {
  for (const std::string& name : models::names()) {
    models::Spec spec = models::spec(name);
    manual_seed(0);
    auto model = models::make(spec);
    optim::Adam opt(*model, {.lr = 1e-3, .max_grad_norm = 1.0});
    std::vector<ir::Type> types;
    for (const Tensor& t : models::random_batch(spec, 0)) types.push_back({t.dtype(), t.shape()});
    step::CapturedStep cap = step::capture_step(*model, opt, models::loss_fn(*model), types, {});
    std::vector<ir::Graph> graphs = {partition::single_graph(cap.joint)};
    partition::ThreeGraphs three = partition::three_graphs(cap.joint);
    graphs.push_back(three.forward);
    graphs.push_back(three.backward);
    graphs.push_back(three.optimizer);
    for (const ir::Graph& g : graphs)
      for (bool fuse : {true, false}) {
        const exec::Program p = lower::lower(g, {.fuse = fuse});
        const std::string what = fmt::format("{} {}{}", name, g.name, fuse ? "" : " unfused");
        EXPECT_GE(p.arena_bytes, p.max_live_bytes) << what;
        EXPECT_EQ(p.copy_bytes, 0) << what << ": an update is not in place";
        check_program(p, what);
      }
  }
}

// No gradient outlives its update: in the single graph's order, every
// optimizer read of a parameter's gradient comes before the node computing
// the parameter's new value, so the gradient's buffer is free once the update
// has run, or once the backward pass's own last read of it has (BatchNorm's
// bias gradient is also its mean's, read by the input's gradient); for every
// model, with SGD with momentum and with Adam and clipping.
TEST(PlanCheck, NoGradientIsReadAfterItsParametersUpdateInTheSingleGraph) {
  for (const std::string& name : models::names())
    for (bool adam : {false, true}) {
      const models::Spec spec = models::spec(name);
      manual_seed(0);
      auto model = models::make(spec);
      std::unique_ptr<optim::Optimizer> opt;
      if (adam)
        opt = std::make_unique<optim::Adam>(*model,
                                            optim::AdamOptions{.lr = 1e-3, .max_grad_norm = 1.0});
      else
        opt = std::make_unique<optim::SGD>(*model, optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
      std::vector<ir::Type> types;
      for (const Tensor& t : models::random_batch(spec, 0)) types.push_back({t.dtype(), t.shape()});
      step::CapturedStep cap = step::capture_step(*model, *opt, models::loss_fn(*model), types, {});
      const ir::Graph g = partition::updates_early(cap.joint);  // the single graph's order
      std::vector<ir::ValueId> last_read(g.nodes.size(), -1);
      for (ir::ValueId v = 0; v < g.size(); ++v)
        for (ir::ValueId a : g.node(v).args)
          if (g.node(v).stage == ir::Stage::optimizer) last_read[size_t(a)] = v;
      int checked = 0;
      for (const ir::Output& grad : g.outputs) {
        if (grad.role != ir::OutputRole::grad) continue;
        for (const ir::Output& u : g.outputs)
          if (u.role == ir::OutputRole::update && "grad." + u.name == grad.name) {
            // The optimizer reads every gradient (its stage is marked).
            EXPECT_GE(last_read[size_t(grad.value)], 0) << name << ": " << grad.name;
            EXPECT_LE(last_read[size_t(grad.value)], u.value)
                << name << (adam ? " adam" : " sgd") << ": the gradient of " << grad.name
                << " is read after its update";
            ++checked;
          }
      }
      EXPECT_EQ(checked, int(model->named_parameters().size())) << name;
    }
}

// The single graph's order (partition/update_order.hpp): the last layer's
// update runs as soon as its gradient exists, while the backward pass still
// has products to run, so gradients do not all live to the end of the step;
// and no update is moved before a read of the value it overwrites.
TEST(PlanCheck, SingleGraphUpdatesRunDuringTheBackwardPass) {
  const models::Spec spec = models::spec("mlp");
  manual_seed(0);
  auto model = models::make(spec);
  optim::SGD opt(*model, {.lr = 0.01, .momentum = 0.9});
  std::vector<ir::Type> types;
  for (const Tensor& t : models::random_batch(spec, 0)) types.push_back({t.dtype(), t.shape()});
  step::CapturedStep cap = step::capture_step(*model, opt, models::loss_fn(*model), types, {});
  const exec::Program p = lower::lower(partition::single_graph(cap.joint));
  int64_t first_param_write = -1, last_product = -1;
  for (int64_t k = 0; k < int64_t(p.kernels.size()); ++k) {
    const exec::Kernel& kern = p.kernels[size_t(k)];
    for (int32_t o : kern.outs()) {
      if (o < 0) continue;
      const exec::Slot& out = p.slots[size_t(o)];
      if (out.kind == exec::SlotKind::input && first_param_write < 0 &&
          p.inputs[size_t(out.index)].role == ir::InputRole::param)
        first_param_write = k;
    }
    if (kern.op == ir::Op::matmul) last_product = k;
  }
  ASSERT_GE(first_param_write, 0) << p.str();
  EXPECT_LT(first_param_write, last_product) << p.str();
  EXPECT_EQ(p.copy_bytes, 0) << p.str();
  // Against the traced order (no optimizer nodes marked), the bound on the
  // planned memory falls.
  cap.joint.backward_end = cap.joint.graph.size();
  const exec::Program traced = lower::lower(partition::single_graph(cap.joint));
  EXPECT_LT(p.max_live_bytes, traced.max_live_bytes);
}

}  // namespace
}  // namespace ws
