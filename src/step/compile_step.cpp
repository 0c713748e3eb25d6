// Compiling a training step for one input signature: capture, partition by
// mode and memory budget, lower each graph to a Program and bind it; and
// what the result costs (StepCounters).
#include "capture/collective.hpp"
#include "exec/collective_kernels.hpp"
#include "exec/dnnl_backend.hpp"
#include "ir/attr.hpp"
#include "lower/assign_layouts.hpp"
#include "lower/lower.hpp"
#include "step/data_parallel.hpp"
#include "step/train_step_impl.hpp"
#include "step/zero.hpp"

namespace ws {

namespace {

void count_collectives(const ir::Graph& g, StepCounters& k) {
  for (const ir::Node& n : g.nodes)
    if (ir::kCollectiveStarts.contains(n.op)) {
      ++k.collectives;
      k.comm_bytes += int64_t(exec::storage_bytes(n.op, n.attrs, n.type));
    }
}

// The image layout the step option asks for (assign_layouts.hpp).
ir::ImageLayout image_layouts(ImageLayouts l) {
  return l == ImageLayouts::channels_last ? ir::ImageLayout::nhwc
         : l == ImageLayouts::blocked     ? ir::ImageLayout::nChw16c
                                          : ir::ImageLayout::nchw;
}

// The counters of an interpreted step graph: its nodes, their flops, and
// the updates copied back.
void count_interpreted(const ir::Graph& g, StepCounters& k) {
  k.graphs = 1;
  for (const ir::Node& n : g.nodes) {
    k.kernels += n.op != ir::Op::input;
    // Matrix products and convolutions (not the poolings, also in the
    // convolution category).
    if (n.op == ir::Op::matmul || ir::kConvOps.contains(n.op)) {
      std::vector<ir::Type> in;
      for (ir::ValueId a : n.args) in.push_back(g.type(a));
      k.flops += exec::backend_flops(n.op, n.attrs, in, n.type);
    }
  }
  for (const ir::Output& o : g.outputs)
    if (o.role == ir::OutputRole::update) k.bytes_copied += int64_t(g.type(o.value).bytes());
  count_collectives(g, k);
}

void count_programs(const step::Compiled& c, StepCounters& k) {
  k.graphs = int64_t(c.programs.size());
  for (const exec::Executable& e : c.programs) {
    k.kernels += int64_t(e.program().kernels.size());
    k.bytes_copied += e.program().copy_bytes;
    k.arena_bytes += e.program().arena_bytes;
    k.flops += e.program().flops;
  }
  int64_t shadow_bytes = 0;
  for (const step::Copy& s : c.shadows) shadow_bytes += int64_t(s.bytes);
  k.bytes_copied += 2 * shadow_bytes;
  for (auto& [name, b] : c.owned.by_name)
    if (b.interface) k.interface_bytes += int64_t(b.storage->bytes);
  k.peak_bytes = k.persistent_bytes + k.interface_bytes + k.arena_bytes + shadow_bytes;
  for (const ir::Graph& g : c.graphs) count_collectives(g, k);
}

}  // namespace

std::unique_ptr<step::Compiled> TrainStep::Impl::compile(const std::vector<ir::Type>& types,
                                                         const SourceLoc& loc) {
  step::CapturedStep cap = [&] {
    capture::SyncBatchStatistics sync(opts.data_parallel && opts.sync_batch_norm);
    return source->trace(types, loc);
  }();
  if (opts.accumulate == 1) return compile_graphs(std::move(cap), true);
  // Gradient accumulation: the summing graph from the same trace.
  step::CapturedStep summing = cap;
  std::unique_ptr<step::Compiled> c = compile_graphs(std::move(cap), true);
  c->summing = compile_graphs(std::move(summing), false);
  return c;
}

std::unique_ptr<step::Compiled> TrainStep::Impl::compile_graphs(step::CapturedStep cap,
                                                                bool update) {
  const bool accumulating = opts.accumulate > 1;
  step::append_step(cap, source->update_groups(),
                    {.guard_nonfinite = opts.on_nonfinite == NonFinite::skip,
                     .data_parallel = opts.data_parallel,
                     .bucket_bytes = opts.bucket_bytes,
                     .zero = zero.get(),
                     .accumulation = accumulating ? &source->accumulation() : nullptr,
                     .update = update});
  if (opts.data_parallel) step::synchronize_ranks(cap);
  if (zero) zero->take_over();
  auto c = std::make_unique<step::Compiled>();
  c->index_checks = cap.index_checks;
  for (const optim::UpdateGroup& group : source->update_groups())
    c->skip_nonfinite_norm |= update && group.spec.clip && group.spec.skip_nonfinite_norm;
  for (ir::ValueId v : cap.joint.graph.inputs) {
    const ir::InputRole role = cap.joint.graph.input_role(v);
    // The step writes each hyperparameter as a double (a frontend declares
    // them f64[]: ForwardTrace::hyper).
    WS_CHECK((role != ir::InputRole::hyper || cap.joint.graph.type(v) == ir::Type{DType::f64, {}}))
        << "hyperparameter input %" << v << " is " << cap.joint.graph.type(v).str()
        << ", not f64[]";
    if (role == ir::InputRole::hyper || role == ir::InputRole::data) continue;
    const int64_t bytes = int64_t(cap.joint.graph.type(v).bytes());
    c->counters.persistent_bytes += bytes;
    if (role == ir::InputRole::opt_state) c->counters.state_bytes += bytes;
  }
  WS_CHECK(hypers.size() == cap.hyper_names.size()) << "the optimizer's hyperparameters changed";

  if (opts.mode == StepMode::interpret) {
    for (auto& [name, t] : cap.persistent) c->persistent.push_back(t);
    c->step_graph = partition::single_graph(cap.joint);
    // Its images stored as the compiled modes store them: a convolution
    // over NHWC images sums in another order than over NCHW ones, and the
    // interpreter runs the compiled modes' convolutions, so their bits.
    bool changed = false;
    if (image_layouts(opts.layouts) == ir::ImageLayout::nhwc)
      c->step_graph = lower::channels_last(c->step_graph, &changed);
    else if (image_layouts(opts.layouts) == ir::ImageLayout::nChw16c)
      c->step_graph = lower::blocked_layouts_for_this_cpu(c->step_graph, &changed);
    step::after_stage(c->step_graph, "step");
    c->graphs = {c->step_graph};
    const ir::Graph& g = c->step_graph;
    c->inputs.emplace_back();
    for (ir::ValueId v : g.inputs)
      c->inputs.back().push_back(
          bind_input(*c, cap, g.input_role(v), g.input_name(v), g.type(v).bytes()));
    count_interpreted(g, c->counters);
    return c;
  }
  // What the backward recomputes: within the budget, else the minimum cut
  // or everything saved.
  partition::RematPlan plan;
  if (opts.memory_budget > 0) {
    const int64_t all = partition::save_all(cap.joint).saved_bytes;
    const int64_t budget = opts.memory_budget <= 1 ? int64_t(opts.memory_budget * double(all))
                                                   : int64_t(opts.memory_budget);
    plan = partition::budgeted_cut(cap.joint, budget);
  } else {
    plan = opts.recompute ? partition::min_cut(cap.joint) : partition::save_all(cap.joint);
  }
  if (opts.mode == StepMode::single_graph) {
    c->graphs = {partition::single_graph(partition::recompute_in_backward(cap.joint, plan))};
  } else {
    partition::ThreeGraphs three = partition::three_graphs(cap.joint, plan);
    c->graphs = {std::move(three.forward), std::move(three.backward), std::move(three.optimizer)};
  }
  // Aliasing off: the step keeps its own copy of every tensor it updates.
  if (!opts.aliasing) {
    for (const ir::Graph& g : c->graphs)
      for (const ir::Output& o : g.outputs)
        if (o.role == ir::OutputRole::update) {
          const auto& [name, t] = cap.persistent[cap.source(g.input_name(o.aliased_input)).index];
          c->shadows.push_back(
              {t.impl()->storage->data, c->owned.get("shadow." + name, t.nbytes()), t.nbytes()});
        }
  }
  for (const ir::Graph& g : c->graphs) {
    step::after_stage(g, g.name);
    c->lowered.emplace_back();
    c->programs.emplace_back(lower::lower(
        g, {.fuse = opts.fuse, .layouts = image_layouts(opts.layouts)}, &c->lowered.back()));
    bind_program(*c, c->programs.back(), cap);
  }
  c->partition.emplace(std::move(cap.joint), std::move(plan));
  count_programs(*c, c->counters);
  return c;
}

}  // namespace ws
