// The joint graph from a frontend's forward graph: the backward, the
// optimizer's updates, and the non-finite guard. Nothing here knows where
// the forward came from (step_source.hpp).
#include <algorithm>
#include <numeric>

#include "autograd/reverse.hpp"
#include "optim/update.hpp"
#include "step/accumulate.hpp"
#include "step/capture_step.hpp"
#include "step/reduce_gradients.hpp"
#include "step/zero.hpp"

namespace ws::step {

StepClip step_clip(const std::vector<optim::UpdateGroup>& groups,
                   const std::vector<GroupInputs>& inputs) {
  StepClip clip;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const optim::UpdateSpec& spec = groups[gi].spec;
    if (!spec.clip) continue;
    if (clip.max_norm != ir::kNoValue)
      throw Error(
          "two update groups clip the gradients: a step clips every group's gradients "
          "together, by one max_grad_norm");
    const auto it = std::find(spec.hyper_names.begin(), spec.hyper_names.end(), "max_grad_norm");
    WS_CHECK(it != spec.hyper_names.end()) << "a group clips without a max_grad_norm";
    clip.max_norm = inputs[gi].hypers.at(size_t(it - spec.hyper_names.begin()));
    clip.skip_nonfinite = spec.skip_nonfinite_norm;
  }
  return clip;
}

ir::ValueId append_clip(ir::Builder& b, const StepClip& clip, std::vector<ir::ValueId>& grads,
                        bool sharded) {
  if (clip.max_norm == ir::kNoValue) return ir::kNoValue;
  optim::Clipped c = optim::clip_by_global_norm(b, grads, clip.max_norm, sharded);
  grads = std::move(c.grads);
  b.graph().outputs.push_back(
      ir::Output{ir::OutputRole::user, c.norm, ir::kNoValue, kGradNormOutput});
  return c.norm;
}

std::vector<GroupInputs> group_inputs(const ir::Graph& g,
                                      const std::vector<optim::UpdateGroup>& groups) {
  const std::vector<ir::ValueId> state_ids = g.inputs_with_role(ir::InputRole::opt_state);
  const std::vector<ir::ValueId> hyper_ids = g.inputs_with_role(ir::InputRole::hyper);
  std::vector<GroupInputs> out(groups.size());
  size_t next_state = 0, next_hyper = 0;
  auto take = [&](const std::vector<ir::ValueId>& ids, size_t& next, const char* what) {
    WS_CHECK(next < ids.size()) << "the optimizer's groups need more " << what << " inputs than "
                                << ids.size();
    return ids[next++];
  };
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const optim::UpdateSpec& spec = groups[gi].spec;
    for (size_t j = 0; j < groups[gi].params.size(); ++j) {
      out[gi].state.emplace_back();
      for (size_t s = 0; s < spec.state_slots.size(); ++s)
        out[gi].state.back().push_back(take(state_ids, next_state, "state"));
    }
    for (size_t s = 0; s < spec.global_slots.size(); ++s)
      out[gi].globals.push_back(take(state_ids, next_state, "state"));
    for (size_t h = 0; h < spec.hyper_names.size(); ++h)
      out[gi].hypers.push_back(take(hyper_ids, next_hyper, "hyperparameter"));
  }
  WS_CHECK(next_state == state_ids.size() && next_hyper == hyper_ids.size())
      << "the optimizer's groups use " << next_state << " state and " << next_hyper
      << " hyperparameter inputs of " << state_ids.size() << " and " << hyper_ids.size();
  return out;
}

namespace {

// Each group's updates of the whole parameters, after clipping, and each
// gradient as an output (what three_graph passes between its graphs).
// Returns the gradients' norm when the step clips, else kNoValue.
ir::ValueId append_updates(CapturedStep& out, const std::vector<optim::UpdateGroup>& groups,
                           const std::vector<ir::ValueId>& grads, ir::Builder& b) {
  ir::Graph& g = out.joint.graph;
  const std::vector<ir::ValueId> param_ids = g.inputs_with_role(ir::InputRole::param);
  const std::vector<GroupInputs> inputs = group_inputs(g, groups);
  // The gradients the updates read: those of the groups' parameters
  // clipped together, when a group clips.
  std::vector<ir::ValueId> used = grads;
  std::vector<size_t> trained;
  for (const optim::UpdateGroup& group : groups)
    for (size_t p : group.params) {
      WS_CHECK(p < param_ids.size())
          << "an optimizer parameter names param input " << p << " of " << param_ids.size();
      trained.push_back(p);
    }
  std::vector<ir::ValueId> clipped;
  for (size_t p : trained) clipped.push_back(grads[p]);
  const ir::ValueId norm = append_clip(b, step_clip(groups, inputs), clipped, false);
  for (size_t i = 0; i < trained.size(); ++i) used[trained[i]] = clipped[i];
  std::vector<std::pair<ir::ValueId, ir::ValueId>> updates;  // (new value, input)
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const optim::UpdateGroup& group = groups[gi];
    optim::UpdateInputs in;
    for (size_t j = 0; j < group.params.size(); ++j) {
      const size_t p = group.params[j];
      optim::ParamValues pv;
      pv.param = param_ids[p];
      pv.grad = used[p];
      pv.state = inputs[gi].state[j];
      in.params.push_back(std::move(pv));
    }
    in.globals = inputs[gi].globals;
    in.hypers = inputs[gi].hypers;
    optim::UpdateOutputs updated = optim::build_updates(b, group.spec, in);
    for (size_t i = 0; i < in.params.size(); ++i) {
      updates.emplace_back(updated.params[i].param, in.params[i].param);
      for (size_t s = 0; s < in.params[i].state.size(); ++s)
        updates.emplace_back(updated.params[i].state[s], in.params[i].state[s]);
    }
    for (size_t s = 0; s < in.globals.size(); ++s)
      updates.emplace_back(updated.globals[s], in.globals[s]);
  }
  for (size_t j = 0; j < param_ids.size(); ++j)
    g.outputs.push_back(ir::Output{ir::OutputRole::grad, grads[j], ir::kNoValue,
                                   "grad." + g.input_name(param_ids[j])});
  for (auto [value, input] : updates)
    g.outputs.push_back(ir::Output{ir::OutputRole::update, value, input, g.input_name(input)});
  return norm;
}

// Every update of a parameter or of optimizer state becomes
// select(finite, new, old): a step whose gradients' norm is not finite
// writes back what it read there (UpdateSpec::skip_nonfinite_norm).
void keep_unless_finite(ir::Graph& g, ir::Builder& b, ir::ValueId norm) {
  b.loc = {};
  b.internal = "the clipping's non-finite norm";
  const ir::ValueId zero = b.scalar(0);
  const ir::ValueId finite = b.binary(ir::Op::eq, b.binary(ir::Op::mul, norm, zero), zero);
  for (ir::Output& o : g.outputs) {
    if (o.role != ir::OutputRole::update) continue;
    const ir::InputRole role = g.input_role(o.aliased_input);
    if (role != ir::InputRole::param && role != ir::InputRole::opt_state) continue;
    const ir::Type& t = g.type(o.value);
    o.value = b.add(ir::Op::select, {b.broadcast_to(finite, t.shape), o.value, o.aliased_input});
  }
}

// Each gradient plus its sum (accumulate.hpp), added in the order the
// backward computes the gradients: a data-parallel step buckets them in
// the order of their values.
std::vector<ir::ValueId> plus_sums(ir::Builder& b, const std::vector<ir::ValueId>& grads,
                                   const std::vector<ir::ValueId>& sums) {
  std::vector<size_t> order(grads.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return grads[x] < grads[y]; });
  b.internal = "gradient accumulation";
  std::vector<ir::ValueId> out(grads.size());
  for (size_t i : order) {
    b.loc = b.graph().node(grads[i]).loc;
    out[i] = b.binary(ir::Op::add, grads[i], sums[i]);
  }
  return out;
}

// The summing graph's end: each gradient as an output (what three_graph's
// backward passes on), and each gradient added into its sum, in place.
// Returns the new sums.
std::vector<ir::ValueId> append_sums(ir::Graph& g, ir::Builder& b,
                                     const std::vector<ir::ValueId>& grads,
                                     const std::vector<ir::ValueId>& sums) {
  const std::vector<ir::ValueId> param_ids = g.inputs_with_role(ir::InputRole::param);
  const std::vector<ir::ValueId> summed = plus_sums(b, grads, sums);
  for (size_t j = 0; j < param_ids.size(); ++j)
    g.outputs.push_back(ir::Output{ir::OutputRole::grad, grads[j], ir::kNoValue,
                                   "grad." + g.input_name(param_ids[j])});
  for (size_t j = 0; j < sums.size(); ++j)
    g.outputs.push_back(
        ir::Output{ir::OutputRole::update, summed[j], sums[j], g.input_name(sums[j])});
  return summed;
}

}  // namespace

ir::ValueId nonfinite_probe(ir::Builder& b, ir::ValueId loss,
                            const std::vector<ir::ValueId>& grads) {
  // x * 0 is 0 for every finite x and NaN for inf and NaN, so the sum of
  // loss * 0 and every gradient times 0 is 0 exactly when all are finite
  // (a sum of squares could overflow for large finite gradients).
  const DType lt = b.type(loss).dtype;
  ir::ValueId probe = b.binary(ir::Op::mul, loss, b.scalar(0, lt));
  for (ir::ValueId gr : grads) {
    const ir::Type t = b.type(gr);  // a copy: appending moves the nodes
    std::vector<int64_t> axes(t.shape.size());
    for (size_t a = 0; a < axes.size(); ++a) axes[a] = int64_t(a);
    ir::ValueId zeroed = b.binary(ir::Op::mul, gr, b.full(0, t));
    ir::ValueId sum = axes.empty() ? zeroed : b.reduce(ir::Op::reduce_sum, zeroed, axes);
    if (t.dtype != lt) sum = b.convert(sum, lt);
    probe = b.binary(ir::Op::add, probe, sum);
  }
  return probe;
}

void append_step(CapturedStep& out, const std::vector<optim::UpdateGroup>& groups,
                 const JointOptions& opts) {
  ir::Graph& g = out.joint.graph;
  ir::ValueId loss_id = g.outputs[0].value;
  const std::vector<ir::ValueId> param_ids = g.inputs_with_role(ir::InputRole::param);
  std::vector<ir::ValueId> grads = autograd::append_backward(g, loss_id, param_ids);
  ir::Builder b(g);
  ir::ValueId probe = ir::kNoValue;  // the guard's, when the sharded step built it
  ir::ValueId norm = ir::kNoValue;   // the gradients' when the step clips
  // Inputs nothing reads: the per-parameter state ZeRO's shards replace,
  // and in the summing graph the optimizer's state and hyperparameters.
  std::vector<ir::ValueId> replaced;
  std::vector<ir::ValueId> sums;  // accumulating: each parameter's gradient sum
  if (opts.accumulation) {
    sums = accumulator_inputs(out, *opts.accumulation);
    if (opts.update) grads = plus_sums(b, grads, sums);
  }
  if (opts.accumulation && !opts.update) {
    out.joint.backward_end = g.size();
    grads = append_sums(g, b, grads, sums);  // what the guard checks: the new sums
    // No update, so no gradient reduction (DDP's no_sync); the loss is
    // still the mean over the ranks, as every call returns it, and the
    // guard's verdict the same on every rank.
    if (opts.data_parallel) {
      if (opts.guard_nonfinite) probe = nonfinite_probe(b, loss_id, grads);
      std::vector<ir::ValueId> also;
      if (probe != ir::kNoValue) also.push_back(probe);
      ReducedGradients r = reduce_gradients(g, loss_id, also, opts.bucket_bytes);
      loss_id = g.outputs[0].value = r.loss;
      if (probe != ir::kNoValue) probe = r.grads[0];
    }
    for (ir::InputRole role : {ir::InputRole::opt_state, ir::InputRole::hyper})
      for (ir::ValueId v : g.inputs_with_role(role)) replaced.push_back(v);
  } else if (opts.zero) {
    ShardedStep sharded = append_sharded_step(out, groups, grads, opts.bucket_bytes,
                                              opts.guard_nonfinite, *opts.zero);
    probe = sharded.probe;
    norm = sharded.norm;
    replaced = std::move(sharded.replaced);
    loss_id = g.outputs[0].value;
  } else {
    if (opts.data_parallel) {
      // Part of the backward: what every update and the guard read is the
      // mean over the ranks, the same on every rank.
      ReducedGradients r = reduce_gradients(g, loss_id, grads, opts.bucket_bytes);
      loss_id = g.outputs[0].value = r.loss;
      grads = std::move(r.grads);
    }
    out.joint.backward_end = g.size();
    norm = append_updates(out, groups, grads, b);
  }
  if (opts.accumulation && opts.update) {
    b.loc = {};
    b.internal = "gradient accumulation";
    for (ir::ValueId s : sums)
      g.outputs.push_back(
          ir::Output{ir::OutputRole::update, b.full(0, g.type(s)), s, g.input_name(s)});
  }
  if (norm != ir::kNoValue &&
      std::any_of(groups.begin(), groups.end(), [](const optim::UpdateGroup& group) {
        return group.spec.clip && group.spec.skip_nonfinite_norm;
      }))
    keep_unless_finite(g, b, norm);
  if (opts.guard_nonfinite) {
    b.loc = g.node(loss_id).loc;
    b.internal = "the non-finite guard";
    if (probe == ir::kNoValue) probe = nonfinite_probe(b, loss_id, grads);
    const ir::ValueId finite = b.binary(ir::Op::eq, probe, b.scalar(0, g.type(probe).dtype));
    for (ir::Output& o : g.outputs) {
      if (o.role != ir::OutputRole::update) continue;
      const ir::Type& t = g.type(o.value);
      o.value = b.add(ir::Op::select, {b.broadcast_to(finite, t.shape), o.value, o.aliased_input});
    }
    g.outputs.push_back(ir::Output{ir::OutputRole::user, finite, ir::kNoValue, kFiniteOutput});
  }
  if (opts.zero || opts.accumulation) inputs_first(out, replaced);
  partition::mark_stages(out.joint);
  after_stage(g, "joint");
}

}  // namespace ws::step
