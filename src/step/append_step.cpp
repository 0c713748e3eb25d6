// The joint graph from a frontend's forward graph: the backward, the
// optimizer's updates, and the non-finite guard. Nothing here knows where
// the forward came from (step_source.hpp).
#include "autograd/reverse.hpp"
#include "optim/update.hpp"
#include "step/capture_step.hpp"

namespace ws::step {

void append_step(CapturedStep& out, const optim::UpdateSpec& spec,
                 const std::vector<size_t>& opt_params, bool guard_nonfinite) {
  ir::Graph& g = out.joint.graph;
  const ir::ValueId loss_id = g.outputs[0].value;
  const std::vector<ir::ValueId> param_ids = g.inputs_with_role(ir::InputRole::param);
  const std::vector<ir::ValueId> state_ids = g.inputs_with_role(ir::InputRole::opt_state);
  const std::vector<ir::ValueId> hyper_ids = g.inputs_with_role(ir::InputRole::hyper);

  std::vector<ir::ValueId> grads = autograd::append_backward(g, loss_id, param_ids);
  out.joint.backward_end = g.size();

  // The optimizer's parameters, in its order, with their state slots; then
  // its global state.
  optim::UpdateInputs in;
  const size_t slots = spec.state_slots.size();
  for (size_t i = 0; i < opt_params.size(); ++i) {
    optim::ParamValues pv;
    WS_CHECK(opt_params[i] < param_ids.size())
        << "optimizer parameter " << i << " names param input " << opt_params[i] << " of "
        << param_ids.size();
    pv.param = param_ids[opt_params[i]];
    pv.grad = grads[opt_params[i]];
    for (size_t s = 0; s < slots; ++s) pv.state.push_back(state_ids[i * slots + s]);
    in.params.push_back(std::move(pv));
  }
  for (size_t s = 0; s < spec.global_slots.size(); ++s)
    in.globals.push_back(state_ids[opt_params.size() * slots + s]);
  in.hypers = hyper_ids;
  ir::Builder b(g);
  optim::UpdateOutputs updated = optim::build_updates(b, spec, in);

  for (size_t j = 0; j < param_ids.size(); ++j)
    g.outputs.push_back(ir::Output{ir::OutputRole::grad, grads[j], ir::kNoValue,
                                   "grad." + g.input_name(param_ids[j])});
  auto update = [&](ir::ValueId value, ir::ValueId input) {
    g.outputs.push_back(ir::Output{ir::OutputRole::update, value, input, g.input_name(input)});
  };
  for (size_t i = 0; i < in.params.size(); ++i) {
    update(updated.params[i].param, in.params[i].param);
    for (size_t s = 0; s < slots; ++s) update(updated.params[i].state[s], in.params[i].state[s]);
  }
  for (size_t s = 0; s < in.globals.size(); ++s) update(updated.globals[s], in.globals[s]);
  if (guard_nonfinite) {
    // x * 0 is 0 for every finite x and NaN for inf and NaN, so the sum of
    // loss * 0 and every gradient times 0 is 0 exactly when all are finite
    // (a sum of squares could overflow for large finite gradients).
    b.loc = g.node(loss_id).loc;
    b.internal = "the non-finite guard";
    const DType lt = g.type(loss_id).dtype;
    ir::ValueId probe = b.binary(ir::Op::mul, loss_id, b.scalar(0, lt));
    for (ir::ValueId gr : grads) {
      const ir::Type t = g.type(gr);  // a copy: appending moves the nodes
      std::vector<int64_t> axes(t.shape.size());
      for (size_t a = 0; a < axes.size(); ++a) axes[a] = int64_t(a);
      ir::ValueId zeroed = b.binary(ir::Op::mul, gr, b.full(0, t));
      ir::ValueId sum = axes.empty() ? zeroed : b.reduce(ir::Op::reduce_sum, zeroed, axes);
      if (t.dtype != lt) sum = b.convert(sum, lt);
      probe = b.binary(ir::Op::add, probe, sum);
    }
    const ir::ValueId finite = b.binary(ir::Op::eq, probe, b.scalar(0, lt));
    for (ir::Output& o : g.outputs) {
      if (o.role != ir::OutputRole::update) continue;
      const ir::Type& t = g.type(o.value);
      o.value = b.add(ir::Op::select, {b.broadcast_to(finite, t.shape), o.value, o.aliased_input});
    }
    g.outputs.push_back(ir::Output{ir::OutputRole::user, finite, ir::kNoValue, kFiniteOutput});
  }
  partition::mark_stages(out.joint);
  after_stage(g, "joint");
}

}  // namespace ws::step
