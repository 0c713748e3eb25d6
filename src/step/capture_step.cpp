#include "step/capture_step.hpp"
#include "step/forward_trace.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "autograd/reverse.hpp"
#include "capture/random.hpp"
#include "capture/tracer.hpp"
#include "ir/attr.hpp"
#include "ir/dump.hpp"
#include "ir/verify.hpp"
#include "nn/composites.hpp"
#include "optim/update.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::step {

void after_stage(const ir::Graph& g, const std::string& stage) {
  if (ir::verify_enabled()) ir::verify_with_round_trip(g);
  ir::dump(g, stage);
}

namespace {

// The data argument `v` is, looking through ops that only move elements.
std::optional<size_t> data_source(const CapturedStep& cap, ir::ValueId v) {
  const ir::Graph& g = cap.joint.graph;
  for (;;) {
    const ir::Node& n = g.node(v);
    if (n.op == ir::Op::reshape || n.op == ir::Op::slice || n.op == ir::Op::transpose ||
        n.op == ir::Op::broadcast) {
      v = n.args[0];
      continue;
    }
    if (n.op != ir::Op::input || g.input_role(v) != ir::InputRole::data) return std::nullopt;
    return cap.source(v).index;
  }
}

// The value of `v` when it is one number (a full, or a broadcast of one).
std::optional<double> one_number(const ir::Graph& g, ir::ValueId v) {
  while (g.node(v).op == ir::Op::broadcast) v = g.node(v).args[0];
  if (g.node(v).op != ir::Op::full) return std::nullopt;
  return ir::attr<ir::Op::full, "value">(g.node(v));
}

// `v` with a value the graph replaces before indexing peeled off:
// select(ne(a, K), a, 0) (nll_loss's ignore_index) is a, K allowed.
ir::ValueId peel_ignored(const ir::Graph& g, ir::ValueId v, std::optional<int64_t>* ignored) {
  const ir::Node& n = g.node(v);
  if (n.op != ir::Op::select) return v;
  const ir::Node& cond = g.node(n.args[0]);
  if (cond.op != ir::Op::ne || cond.args[0] != n.args[1] || one_number(g, n.args[2]) != 0.0)
    return v;
  const std::optional<double> k = one_number(g, cond.args[1]);
  if (!k) return v;
  *ignored = int64_t(*k);
  return n.args[1];
}

// Data arguments that index a table (gather) or pick classes (one_hot, or
// nll_loss's labels: the check of their upper bound).
void collect_index_checks(CapturedStep& cap) {
  const ir::Graph& g = cap.joint.graph;
  for (ir::ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& n = g.node(v);
    IndexCheck c;
    ir::ValueId idx = ir::kNoValue;
    if (n.op == ir::Op::gather) {
      idx = n.args[1];
      c.bound = g.type(n.args[0]).shape[0];
      c.what = "embedding index";
    } else if (n.op == ir::Op::one_hot) {
      idx = n.args[0];
      c.bound = ir::attr<ir::Op::one_hot, "num_classes">(n);
      c.what = "label";
    } else if (n.op == ir::Op::check &&
               ir::attr<ir::Op::check, "message">(n).starts_with(nn::kLabelRangeCheck) &&
               g.node(n.args[1]).op == ir::Op::lt && g.node(n.args[1]).args[0] == n.args[0]) {
      const std::optional<double> k = one_number(g, g.node(n.args[1]).args[1]);
      if (!k) continue;
      idx = n.args[0];
      while (g.node(idx).op == ir::Op::check) idx = g.node(idx).args[0];
      c.bound = int64_t(*k);
      c.what = "label";
    } else {
      continue;
    }
    idx = peel_ignored(g, idx, &c.ignored);
    std::optional<size_t> d = data_source(cap, idx);
    if (!d) continue;
    c.data_index = *d;
    c.loc = n.loc;
    cap.index_checks.push_back(c);
  }
}

}  // namespace

ForwardTrace::ForwardTrace()
    : cap_(std::make_unique<CapturedStep>()),
      tracer_(std::make_unique<capture::Tracer>(cap_->joint.graph)) {
  cap_->joint.graph.name = "joint";
}

ir::ValueId ForwardTrace::persistent(ir::InputRole role, const std::string& name, const Tensor& t) {
  const ir::ValueId v = tracer_->lift(t, role, name);
  // Tied to an earlier one, or lifted already (the random stream, by the
  // first draw)?
  if (std::find(persistent_ids_.begin(), persistent_ids_.end(), v) == persistent_ids_.end()) {
    cap_->persistent.emplace_back(name, t);
    persistent_ids_.push_back(v);
  }
  return v;
}

ir::ValueId ForwardTrace::hyper(const std::string& name) {
  hyper_ids_.push_back(builder().input(ir::InputRole::hyper, name, ir::Type{DType::f64, {}}));
  cap_->hyper_names.push_back(name);
  return hyper_ids_.back();
}

Tensor ForwardTrace::data(const ir::Type& type) {
  Tensor t = tracer_->data_input(fmt::format("input.{}", data_ids_.size()), type);
  data_ids_.push_back(t.impl()->value);
  return t;
}

CapturedStep ForwardTrace::finish() {
  CapturedStep& out = *cap_;
  ir::Graph& g = out.joint.graph;
  tracer_->finish_mutations();
  // The random stream's state, when the function drew from it.
  if (tracer_->rng_seed() != ir::kNoValue) {
    const detail::RngState& rng = detail::rng_state();
    persistent(ir::InputRole::rng, g.input_name(tracer_->rng_seed()), rng.seed);
    persistent(ir::InputRole::rng, g.input_name(tracer_->rng_offset()), rng.offset);
  }
  for (ir::ValueId v : g.inputs) {
    InputSource s{g.input_role(v)};
    const std::vector<ir::ValueId>& ids = s.role == ir::InputRole::data    ? data_ids_
                                          : s.role == ir::InputRole::hyper ? hyper_ids_
                                                                           : persistent_ids_;
    s.index = size_t(std::find(ids.begin(), ids.end(), v) - ids.begin());
    WS_CHECK(s.index < ids.size()) << "no source for input " << g.input_name(v);
    out.sources.push_back(s);
  }
  out.joint.forward_end = g.size();
  collect_index_checks(out);
  after_stage(g, "forward");
  return std::move(out);
}

CapturedStep trace_forward(nn::Module& model, const optim::Optimizer* opt, const LossFn& loss_fn,
                           const std::vector<ir::Type>& data_types, const SourceLoc& loc,
                           bool loss_output) {
  ForwardTrace trace;
  ir::Graph& g = trace.graph();
  capture::Tracer& tracer = trace.tracer();

  // Inputs, parameters first: params, buffers, optimizer state, hypers, data.
  const nn::NamedTensors params = model.named_parameters();
  for (auto& [name, t] : params) trace.persistent(ir::InputRole::param, name, t);
  for (auto& [name, t] : opt ? opt->params() : nn::NamedTensors{}) {
    bool found = false;
    for (auto& [n2, t2] : params) found = found || t2.impl() == t.impl();
    if (!found)
      throw Error(
          fmt::format("the optimizer updates '{}', which is not a parameter of the model "
                      "being compiled",
                      name));
  }
  for (auto& [name, t] : model.named_buffers()) trace.persistent(ir::InputRole::buffer, name, t);
  for (auto& [name, t] : opt ? opt->state() : nn::NamedTensors{})
    trace.persistent(ir::InputRole::opt_state, name, t);
  for (const std::string& h : opt ? opt->spec().hyper_names : std::vector<std::string>{})
    trace.hyper(h);
  std::vector<Tensor> data;
  for (const ir::Type& t : data_types) data.push_back(trace.data(t));

  Tensor loss;
  {
    capture::TraceScope scope(tracer);
    loss = loss_fn(data);
  }
  const char* what = loss_output ? "the loss function" : "the compiled function";
  if (!loss.defined() || !loss.is_traced() || loss.impl()->tracer != &tracer)
    throw Error(
        fmt::format("{} must return a tensor computed from its inputs or the model's parameters{}",
                    what, at(loc)));
  if (loss_output && (loss.dim() != 0 || !is_floating(loss.dtype())))
    throw Error(fmt::format("the loss function must return a 0-d floating-point tensor, got {}{}",
                            loss.str(), at(g.node(loss.impl()->value).loc)));
  const ir::ValueId loss_id = loss.impl()->value;
  g.outputs.push_back(loss_output
                          ? ir::Output{ir::OutputRole::loss, loss_id, ir::kNoValue, "loss"}
                          : ir::Output{ir::OutputRole::user, loss_id, ir::kNoValue, "output"});
  return trace.finish();
}

const InputSource& CapturedStep::source(ir::ValueId v) const {
  const int i = joint.graph.input_index(v);
  WS_CHECK(i >= 0) << "%" << v << " is not an input of the joint graph";
  return sources[size_t(i)];
}

const InputSource& CapturedStep::source(const std::string& name) const {
  const ir::Graph& g = joint.graph;
  size_t i = 0;
  while (i < g.inputs.size() && g.input_name(g.inputs[i]) != name) ++i;
  WS_CHECK(i < g.inputs.size()) << "no input named " << name << " in the joint graph";
  return sources[i];
}

void check_indices(const std::vector<IndexCheck>& checks, const std::vector<Tensor>& data,
                   const char* who) {
  for (const IndexCheck& c : checks) {
    const Tensor& t = data[c.data_index];
    const int64_t* v = t.data<int64_t>();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i)
      if ((v[i] < 0 || v[i] >= c.bound) && v[i] != c.ignored)
        throw Error(
            fmt::format("{}: argument {} ({}) holds {} {} at position {}, outside [0, {}){}", who,
                        c.data_index, t.str(), c.what, v[i], i, c.bound, at(c.loc)));
  }
}

optim::UpdateGroup update_group(const nn::Module& model, const optim::Optimizer& opt) {
  const nn::NamedTensors params = model.named_parameters();
  optim::UpdateGroup out{opt.spec(), {}};
  for (const auto& [name, t] : opt.params()) {
    size_t j = 0;
    while (j < params.size() && params[j].second.impl() != t.impl()) ++j;
    WS_CHECK(j < params.size()) << "optimizer parameter " << name << " is not the model's";
    out.params.push_back(j);
  }
  return out;
}

CapturedStep capture_step(nn::Module& model, optim::Optimizer& opt, const LossFn& loss_fn,
                          const std::vector<ir::Type>& data_types, const SourceLoc& loc,
                          bool guard_nonfinite) {
  CapturedStep out = trace_forward(model, &opt, loss_fn, data_types, loc);
  append_step(out, {update_group(model, opt)}, {.guard_nonfinite = guard_nonfinite});
  return out;
}

}  // namespace ws::step
