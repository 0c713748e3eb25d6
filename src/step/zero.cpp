#include "step/zero.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "dist/collectives.hpp"
#include "exec/collective_kernels.hpp"
#include "ir/attr.hpp"
#include "optim/update.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::step {

using ir::ValueId;

std::string shard_input_name(size_t bucket, const std::string& slot) {
  return fmt::format("zero.{}.{}", bucket, slot);
}

void OptimizerShards::take_over() {
  if (taken_) return;
  const int64_t rank = dist::rank();
  for (Bucket& b : buckets_)
    for (size_t s = 0; s < b.shards.size(); ++s) {
      std::vector<const void*> in;
      for (const Tensor& t : b.full[s]) in.push_back(t.impl()->storage->data);
      exec::pack_window(b.types, in.data(), rank * b.part, b.part, 1.0,
                        b.shards[s].impl()->storage->data);
      for (const Tensor& t : b.full[s]) {
        detail::TensorImpl& impl = *t.impl();
        if (impl.storage->borrowed) continue;  // not ours to free
        impl.storage = std::make_shared<detail::Storage>(0);
        impl.type.shape = {0};
        impl.sharded = true;
      }
    }
  taken_ = true;
}

void OptimizerShards::gather() {
  if (!taken_) return;
  const int64_t world = dist::world_size(), rank = dist::rank();
  for (Bucket& b : buckets_)
    for (size_t s = 0; s < b.shards.size(); ++s) {
      const DType dt = b.types[0].dtype;
      const size_t part_bytes = size_t(b.part) * dtype_size(dt);
      std::vector<std::byte> all(part_bytes * size_t(world));
      std::memcpy(all.data() + size_t(rank) * part_bytes, b.shards[s].impl()->storage->data,
                  part_bytes);
      dist::all_gather_in_place(all.data(), b.part, dt);
      size_t at = 0;
      for (size_t i = 0; i < b.full[s].size(); ++i) {
        detail::TensorImpl& impl = *b.full[s][i].impl();
        if (!impl.storage->borrowed) {
          impl.type = b.types[i];
          impl.storage = std::make_shared<detail::Storage>(b.types[i].bytes());
          impl.sharded = false;
        }
        std::memcpy(impl.storage->data, all.data() + at, b.types[i].bytes());
        at += b.types[i].bytes();
      }
    }
  taken_ = false;
}

namespace {

// The first state slot of `spec` the shards hold: a step count per
// parameter (PyTorch's) stays whole, as every rank advances it alike.
size_t first_sharded_slot(const optim::UpdateSpec& spec) {
  return !spec.state_slots.empty() && spec.state_slots[0] == optim::kStepSlot ? 1 : 0;
}

// The place of param input `p` among `group`'s parameters.
size_t index_in(const optim::UpdateGroup& group, size_t p) {
  return size_t(std::find(group.params.begin(), group.params.end(), p) - group.params.begin());
}

// Each group's parameters in the order the backward computes their
// gradients, in buckets of at most `bucket_bytes` (a larger parameter is a
// bucket of its own); all buckets in the order their last gradient is
// computed.
std::vector<OptimizerShards::Bucket> lay_out(const ir::Graph& g,
                                             const std::vector<optim::UpdateGroup>& groups,
                                             const std::vector<ValueId>& param_ids,
                                             const std::vector<ValueId>& grads,
                                             int64_t bucket_bytes) {
  std::vector<OptimizerShards::Bucket> out;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    std::vector<size_t> order = groups[gi].params;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return grads[a] < grads[b]; });
    int64_t bytes = 0;
    for (size_t p : order) {
      const ir::Type& t = g.type(param_ids[p]);
      if (out.empty() || out.back().group != gi ||
          (bytes > 0 && bytes + int64_t(t.bytes()) > bucket_bytes)) {
        out.emplace_back();
        out.back().group = gi;
        bytes = 0;
      }
      out.back().params.push_back(p);
      out.back().types.push_back(t);
      bytes += int64_t(t.bytes());
    }
  }
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    return grads[a.params.back()] < grads[b.params.back()];
  });
  const int64_t world = dist::world_size();
  for (OptimizerShards::Bucket& b : out) {
    int64_t n = 0;
    for (const ir::Type& t : b.types) n += t.numel();
    b.part = (n + world - 1) / world;
  }
  return out;
}

}  // namespace

ShardedStep append_sharded_step(CapturedStep& cap, const std::vector<optim::UpdateGroup>& groups,
                                const std::vector<ValueId>& grads, int64_t bucket_bytes, bool guard,
                                OptimizerShards& shards) {
  ir::Graph& g = cap.joint.graph;
  const int64_t world = dist::world_size();
  const std::vector<ValueId> param_ids = g.inputs_with_role(ir::InputRole::param);
  const std::vector<GroupInputs> inputs = group_inputs(g, groups);

  if (!shards.laid_out()) {
    shards.buckets() = lay_out(g, groups, param_ids, grads, bucket_bytes);
    for (OptimizerShards::Bucket& b : shards.buckets()) {
      const optim::UpdateGroup& group = groups[b.group];
      for (size_t s = first_sharded_slot(group.spec); s < group.spec.state_slots.size(); ++s) {
        b.full.emplace_back();
        for (size_t p : b.params) {
          b.full.back().push_back(
              cap.persistent[cap.source(inputs[b.group].state[index_in(group, p)][s]).index]
                  .second);
        }
        b.shards.push_back(Tensor::zeros({b.part}, b.types[0].dtype));
      }
    }
  }

  ir::Builder b(g);
  b.internal = "the sharded optimizer update";
  // Backward: each bucket's gradients reduced and scattered, then the loss
  // (and the guard's probe of every rank's own gradients) averaged.
  const std::vector<OptimizerShards::Bucket>& buckets = shards.buckets();
  std::vector<ValueId> grad_parts;
  for (const OptimizerShards::Bucket& k : buckets) {
    std::vector<ValueId> gs;
    for (size_t p : k.params) gs.push_back(grads.at(p));
    b.loc = g.node(gs.back()).loc;
    grad_parts.push_back(b.reduce_scatter(gs, "mean", world));
  }
  ir::Output& loss_out = g.outputs[0];
  b.loc = g.node(loss_out.value).loc;
  std::vector<ValueId> reduced = {loss_out.value};
  if (guard) reduced.push_back(nonfinite_probe(b, loss_out.value, grads));
  std::vector<ir::Type> types;
  for (ValueId v : reduced) types.push_back(g.type(v));
  const ValueId start =
      b.add(ir::Op::all_reduce_start, reduced,
            ir::make_attrs<ir::Op::all_reduce_start>(
                {{"reduce", std::string("mean")}, {"seq", ir::next_collective_seq(g)}}));
  reduced = b.unpack(b.add(ir::Op::wait, {start}), types);
  g.outputs[0].value = reduced[0];
  cap.joint.backward_end = g.size();

  // Optimizer: the parts clipped together (over the ranks), then each
  // group's buckets, this rank's part of each.
  ShardedStep r;
  r.norm = append_clip(b, step_clip(groups, inputs), grad_parts, true);
  b.internal = "the sharded optimizer update";
  std::vector<std::pair<ValueId, ValueId>> updates;  // (new value, input)
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const optim::UpdateSpec& spec = groups[gi].spec;
    const size_t first = first_sharded_slot(spec);
    optim::UpdateInputs in;
    std::vector<size_t> mine;  // its buckets
    for (size_t k = 0; k < buckets.size(); ++k) {
      if (buckets[k].group != gi) continue;
      mine.push_back(k);
      optim::ParamValues pv;
      std::vector<ValueId> ps;
      for (size_t p : buckets[k].params) ps.push_back(param_ids[p]);
      pv.param = b.local_shard(ps, world);
      pv.grad = grad_parts[k];
      if (first > 0) {  // each parameter's step count, whole on every rank
        for (size_t p : buckets[k].params)
          pv.steps.push_back(inputs[gi].state[index_in(groups[gi], p)][0]);
        pv.packed = buckets[k].types;
        pv.world = world;
      }
      for (size_t s = first; s < spec.state_slots.size(); ++s) {
        const std::string name = shard_input_name(k, spec.state_slots[s]);
        pv.state.push_back(b.input(ir::InputRole::opt_state, name, g.type(pv.param)));
        cap.sources.push_back({ir::InputRole::opt_state, cap.persistent.size()});
        cap.rank_local.push_back(cap.persistent.size());
        cap.persistent.emplace_back(name, buckets[k].shards[s - first]);
      }
      in.params.push_back(std::move(pv));
    }
    in.globals = inputs[gi].globals;
    in.hypers = inputs[gi].hypers;
    optim::UpdateOutputs out = optim::build_updates(b, spec, in);
    for (size_t i = 0; i < mine.size(); ++i) {
      const OptimizerShards::Bucket& k = buckets[mine[i]];
      const std::vector<ValueId> parts =
          b.unpack(b.all_gather(out.params[i].param, world), k.types);
      for (size_t j = 0; j < parts.size(); ++j)
        updates.emplace_back(parts[j], param_ids[k.params[j]]);
      for (size_t s = 0; s < in.params[i].state.size(); ++s)
        updates.emplace_back(out.params[i].state[s], in.params[i].state[s]);
      for (size_t j = 0; j < in.params[i].steps.size(); ++j)
        updates.emplace_back(out.params[i].steps[j], in.params[i].steps[j]);
    }
    for (size_t s = 0; s < in.globals.size(); ++s)
      updates.emplace_back(out.globals[s], in.globals[s]);
  }
  for (auto [value, input] : updates)
    g.outputs.push_back(ir::Output{ir::OutputRole::update, value, input, g.input_name(input)});
  r.probe = guard ? reduced[1] : ir::kNoValue;
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (const auto& param : inputs[gi].state)
      r.replaced.insert(r.replaced.end(), param.begin() + long(first_sharded_slot(groups[gi].spec)),
                        param.end());
  return r;
}

void inputs_first(CapturedStep& cap, const std::vector<ValueId>& drop) {
  ir::Graph& g = cap.joint.graph;
  std::vector<bool> dropped(g.nodes.size(), false);
  for (ValueId v : drop) dropped[size_t(v)] = true;
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(g.nodes.size(), ir::kNoValue);
  std::vector<InputSource> sources;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (!dropped[size_t(g.inputs[i])]) {
      map[size_t(g.inputs[i])] = ir::append_renamed(out, g.node(g.inputs[i]), map);
      sources.push_back(cap.sources[i]);
    }
  // A stage's end moves by the inputs it gains and the nodes it loses.
  const ValueId inputs = out.size();
  int64_t forward_end = inputs, backward_end = inputs;
  for (ValueId v = 0; v < g.size(); ++v) {
    if (g.node(v).op == ir::Op::input) continue;
    map[size_t(v)] = ir::append_renamed(out, g.node(v), map);
    forward_end += v < cap.joint.forward_end;
    backward_end += v < cap.joint.backward_end;
  }
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (!dropped[size_t(g.inputs[i])]) out.inputs.push_back(map[size_t(g.inputs[i])]);
  for (const ir::Output& o : g.outputs) {
    ir::Output r = o;
    r.value = map[size_t(o.value)];
    if (o.aliased_input != ir::kNoValue) r.aliased_input = map[size_t(o.aliased_input)];
    WS_CHECK(r.value != ir::kNoValue) << "output " << o.name << " reads a dropped input";
    out.outputs.push_back(r);
  }
  g = std::move(out);
  cap.sources = std::move(sources);
  cap.joint.forward_end = forward_end;
  cap.joint.backward_end = backward_end;
}

}  // namespace ws::step
