// TrainStep: construction, its options, and one step per call (the pieces
// it runs are described in train_step_impl.hpp).
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "exec/interpreter.hpp"
#include "exec/threads.hpp"
#include "step/data_parallel.hpp"
#include "step/train_step_impl.hpp"

namespace ws {

namespace {

const StepOptions& checked(const StepOptions& o) {
  try {
    check_step_options(o);
  } catch (const Error& e) {
    throw Error(fmt::format("TrainStep: {}", e.what()));
  }
  return o;
}

}  // namespace

TrainStep::Impl::Impl(std::unique_ptr<step::StepSource> src, StepOptions s)
    : source(std::move(src)), opts(s), cache("train step", {s.max_cached, s.recompile_warning}) {
  if (opts.data_parallel) dist::init();
  if (opts.zero) zero = std::make_unique<step::OptimizerShards>();
  // Sized once: compiled programs keep pointers into it.
  size_t n = 0;
  for (const optim::UpdateGroup& group : source->update_groups())
    n += group.spec.hyper_names.size();
  hypers.assign(n, 0.0);
}

TrainStep::TrainStep(nn::Module& model, optim::Optimizer& opt, LossFn fn, StepOptions opts)
    : TrainStep(step::module_source(model, opt, std::move(fn)), opts) {}
TrainStep::TrainStep(std::unique_ptr<step::StepSource> source, StepOptions opts)
    : impl_(std::make_unique<Impl>(std::move(source), checked(opts))) {}
TrainStep step::StepFactory::train_step(std::unique_ptr<StepSource> source, StepOptions opts) {
  return TrainStep(std::move(source), opts);
}
TrainStep::~TrainStep() = default;
TrainStep::TrainStep(TrainStep&&) noexcept = default;
TrainStep& TrainStep::operator=(TrainStep&&) noexcept = default;

const StepOptions& TrainStep::options() const { return impl_->opts; }
int64_t TrainStep::traces() const { return impl_->cache.traces(); }
size_t TrainStep::cached() const { return impl_->cache.size(); }
void TrainStep::clear_cache() { impl_->cache.clear(); }

step::Compiled& TrainStep::Impl::lookup(const std::vector<Tensor>& data, Loc sloc) {
  step::Compiled& c =
      cache.lookup(data, sloc, [this](const std::vector<ir::Type>& types, const SourceLoc& loc) {
        return compile(types, loc);
      });
  // Whole again (gather_optimizer_state): this step continues from them.
  if (zero) zero->take_over();
  return c;
}

void TrainStep::gather_optimizer_state() {
  if (impl_->zero) impl_->zero->gather();
}

void TrainStep::Impl::prepare(step::Compiled& c, const std::vector<Tensor>& data) {
  step::check_indices(c.index_checks, data, "train step");
  source->hyper_values(hypers);
}

void step::run_programs(Compiled& c, const std::vector<Tensor>& data, StepTiming* t) {
  for (const Copy& s : c.shadows) std::memcpy(s.own, s.user, s.bytes);
  for (size_t p = 0; p < c.programs.size(); ++p) {
    for (size_t i = 0; i < c.inputs[p].size(); ++i)
      if (c.inputs[p][i].kind == Bind::data)
        c.programs[p].bind_input(i, data[c.inputs[p][i].index].impl()->storage->data);
    if (t)
      c.programs[p].run_timed(t->origin, t->start_ns[p], t->ns[p]);
    else
      c.programs[p].run();
  }
  for (const Copy& s : c.shadows) std::memcpy(s.user, s.own, s.bytes);
}

namespace {

// One step of the interpret mode: the step graph on reference kernels, its
// updates copied into the persistent tensors.
void interpret_step(step::Compiled& c, const std::vector<Tensor>& data,
                    const std::vector<double>& hypers, bool detect_anomaly, StepResult& r) {
  const ir::Graph& g = c.step_graph;
  std::vector<Tensor> inputs;
  for (const step::Binding& b : c.inputs[0]) switch (b.kind) {
      case step::Bind::data: inputs.push_back(data.at(b.index)); break;
      case step::Bind::hyper: inputs.push_back(Tensor::scalar(hypers[b.index], DType::f64)); break;
      case step::Bind::persistent: inputs.push_back(c.persistent[b.index]); break;
      case step::Bind::owned:
        WS_CHECK(false) << "an interpreted step passes nothing between graphs";
    }
  exec::InterpretStats stats;
  std::vector<Tensor> outs = exec::interpret(g, inputs, &stats, detect_anomaly);
  c.counters.peak_bytes = c.counters.persistent_bytes + stats.peak_bytes;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const ir::Output& o = g.outputs[i];
    if (o.role == ir::OutputRole::loss) r.loss = outs[i].item();
    if (o.role == ir::OutputRole::user && o.name == step::kFiniteOutput)
      r.skipped = outs[i].item() == 0;
    if (o.role == ir::OutputRole::user && o.name == step::kGradNormOutput)
      r.grad_norm = outs[i].item();
    if (o.role == ir::OutputRole::update)
      inputs[size_t(g.input_index(o.aliased_input))].copy_(outs[i]);
  }
}

}  // namespace

StepResult TrainStep::run(const std::vector<Tensor>& data, Loc sloc) {
  exec::require_outside_parallel("a training step");
  if (!impl_->opts.data_parallel || dist::world_size() == 1) return impl_->run(data, sloc);
  // One rank that cannot go on would leave the others waiting in a
  // collective forever: it ends the job, unless every rank fails alike.
  try {
    return impl_->run(data, sloc);
  } catch (const dist::GroupError&) {
    throw;
  } catch (const std::exception& e) {
    dist::abort_job(fmt::format("error: {} (this rank ends the job: the other ranks would wait "
                                "for it)",
                                e.what()),
                    1);
  }
}

StepResult TrainStep::Impl::run(const std::vector<Tensor>& data, Loc sloc) {
  Impl& m = *this;
  const int64_t traces = m.cache.traces();
  step::Accumulation& acc = m.source->accumulation();
  // The cycle's last call updates; the others sum (accumulate.hpp).
  const bool last = acc.calls + 1 >= m.opts.accumulate;
  step::Compiled& compiled = m.lookup(data, sloc);
  step::Compiled& c = last ? compiled : *compiled.summing;
  m.prepare(c, data);

  StepResult r;
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  };
  const dist::CommCounters comm = dist::counters();
  const clock::time_point start = clock::now();
  r.threads = m.opts.adapt_threads ? c.team.team_for_step(seconds(start)) : exec::num_threads();
  exec::set_team(r.threads);
  if (m.opts.mode == StepMode::interpret) {
    interpret_step(c, data, m.hypers, m.opts.detect_anomaly, r);
  } else {
    step::run_programs(c, data, nullptr);
    r.loss = c.loss.read();
    r.skipped = c.finite && *c.finite == 0;
    if (c.grad_norm.ptr) r.grad_norm = c.grad_norm.read();
  }
  // NonFinite::skip: nothing was written, as if the call had not been made
  // (the cycle stays where it was).
  const bool guarded = r.skipped;
  // The clipping's guard kept the update out (UpdateSpec::skip_nonfinite_norm);
  // the cycle ends, its sums set to zero.
  if (c.skip_nonfinite_norm && r.grad_norm && !std::isfinite(*r.grad_norm)) r.skipped = true;
  if (!guarded) acc.calls = last ? 0 : acc.calls + 1;
  r.accumulated = acc.calls;
  r.updated = last && !r.skipped;
  const clock::time_point end = clock::now();
  if (m.opts.adapt_threads && m.cache.traces() == traces)  // a step that compiled says nothing
    c.team.ran(r.threads, std::chrono::duration<double>(end - start).count(), seconds(end));
  r.comm_ms = dist::counters().busy_ms - comm.busy_ms;
  r.comm_wait_ms = dist::counters().wait_ms - comm.wait_ms;
  if (r.updated) m.source->advance();
  r.step = m.source->step_count();
  r.counters = c.counters;
  if (m.opts.on_nonfinite == NonFinite::error && !std::isfinite(r.loss)) {
    const std::string what =
        last ? "the step's update has been applied"
             : fmt::format(
                   "its gradients have been added to those summed for the next update "
                   "(call {} of {}: accumulate={})",
                   r.accumulated, m.opts.accumulate, m.opts.accumulate);
    throw Error(fmt::format(
        "step {}: the loss is {}; {}. Lower the learning rate or check the data, or skip such "
        "steps (StepOptions::on_nonfinite = NonFinite::skip){}",
        r.step, std::isnan(r.loss) ? std::string("NaN") : fmt::format("{}", r.loss), what,
        at(SourceLoc::from(sloc))));
  }
  return r;
}

}  // namespace ws
