// TrainStep: the pipeline of DESIGN.md in one place, and the per-call runner.
//
//   capture   trace loss_fn once per input signature -> forward graph
//   autograd  joint graph (loss and every parameter's gradient)
//   optim     update nodes appended; updates alias their inputs
//   partition one step graph, or forward / backward / optimizer graphs
//   lower     each graph to a Program
//   exec      bind persistent storage once; per call bind data and run
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "capture/tensor_impl.hpp"
#include "exec/dnnl_backend.hpp"
#include "exec/interpreter.hpp"
#include "exec/kernels.hpp"
#include "exec/program.hpp"
#include "exec/team_chooser.hpp"
#include "ir/dot.hpp"
#include "ir/text.hpp"
#include "lower/lower.hpp"
#include "partition/explain.hpp"
#include "step/capture_step.hpp"
#include "step/signature_cache.hpp"

namespace ws {

const char* mode_name(StepMode m) {
  switch (m) {
    case StepMode::interpret: return "interpret";
    case StepMode::three_graph: return "three_graph";
    case StepMode::single_graph: return "single_graph";
  }
  return "?";
}

StepMode parse_mode(const std::string& s) {
  for (StepMode m : {StepMode::interpret, StepMode::three_graph, StepMode::single_graph})
    if (s == mode_name(m)) return m;
  throw Error(
      fmt::format("unknown step mode '{}': expected interpret, three_graph or single_graph", s));
}

void set_num_threads(int n) { exec::set_num_threads(n); }
int num_threads() { return exec::num_threads(); }

std::string backend_info() {
  std::string cpu = "unknown CPU";
  if (std::FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "model name", 10) == 0) {
        const char* v = std::strchr(line, ':');
        cpu = v ? std::string(v + 2) : cpu;
        if (!cpu.empty() && cpu.back() == '\n') cpu.pop_back();
        break;
      }
    std::fclose(f);
  }
  return fmt::format(
      "cpu: {}\nthreads: {} (one OpenMP pool for oneDNN and our loops{})\n"
      "matrix products and convolutions: {}\nloop kernels: {}\n",
      cpu, exec::num_threads(), exec::threads_note().empty() ? "" : "; " + exec::threads_note(),
      exec::backend_isa(), exec::loop_isa());
}

namespace {

enum class Bind { persistent, hyper, data, owned };

// What one input of a graph or Program reads.
struct Binding {
  Bind kind;
  size_t index = 0;     // data argument, hyper number or persistent entry (InputSource)
  void* ptr = nullptr;  // Programs: persistent and owned storage
};

// Storage the step owns: values between graphs, the loss, and (aliasing off)
// its own copy of the persistent state. A value passed between graphs is
// found by its name, the same in its producer and every consumer
// (partition.hpp).
struct Owned {
  struct Buffer {
    std::shared_ptr<detail::Storage> storage;
    bool interface = false;  // a value between graphs (saved or a gradient)
  };
  std::map<std::string, Buffer> by_name;
  void* get(const std::string& name, size_t bytes, bool interface = false) {
    Buffer& b = by_name[name];
    if (!b.storage) b.storage = std::make_shared<detail::Storage>(bytes);
    WS_CHECK(b.storage->bytes == bytes) << name << " bound with two sizes";
    b.interface = b.interface || interface;
    return b.storage->data;
  }
};

struct Copy {
  void* user;
  void* own;
  size_t bytes;
};

struct Compiled {
  // three_graph: the joint graph and what its forward saves, for the
  // partition report and picture (made when asked for).
  std::optional<std::pair<partition::JointGraph, partition::RematPlan>> partition;
  std::vector<ir::Graph> graphs;
  std::vector<ir::Graph> lowered;  // the graphs as their Programs run them (fused)
  ir::Graph step_graph;            // interpret
  std::vector<exec::Executable> programs;
  // Per Program (interpret: of the step graph), what each input reads.
  std::vector<std::vector<Binding>> inputs;
  std::vector<Tensor> persistent;  // interpret: the persistent entries (Binding::index)
  Owned owned;
  std::vector<step::IndexCheck> index_checks;
  std::vector<Copy> shadows;  // aliasing off
  float* loss = nullptr;
  const uint8_t* finite = nullptr;  // NonFinite::skip: the step's verdict
  StepCounters counters;
  // The team its steps run on (StepOptions::adapt_threads): its own, since
  // another signature's steps take another time.
  exec::TeamChooser team{exec::num_threads()};
};

}  // namespace

struct TrainStep::Impl {
  nn::Module& model;
  optim::Optimizer& opt;
  LossFn loss_fn;
  StepOptions opts;
  step::SignatureCache<Compiled> cache;
  std::vector<float> hypers;
  std::vector<double> hyper_scratch;

  Impl(nn::Module& m, optim::Optimizer& o, LossFn f, StepOptions s)
      : model(m),
        opt(o),
        loss_fn(std::move(f)),
        opts(s),
        cache("train step", {s.max_cached, s.recompile_warning}) {
    // Sized once: compiled programs keep pointers into it.
    hypers.assign(opt.spec().hyper_names.size(), 0.0f);
    hyper_scratch.assign(hypers.size(), 0.0);
  }

  Compiled& lookup(const std::vector<Tensor>& data, Loc sloc);
  // Checks the batch's indices and writes the hyperparameters for one step.
  void prepare(Compiled& c, const std::vector<Tensor>& data);
  std::unique_ptr<Compiled> compile(const std::vector<ir::Type>& types, const SourceLoc& loc);
  // What the input `name` in `role` of a graph made from `cap` reads, with
  // the storage a Program binds now (persistent, hyper and owned).
  Binding bind_input(Compiled& c, const step::CapturedStep& cap, ir::InputRole role,
                     const std::string& name, size_t bytes);
  // Binds a Program's inputs (data per step) and outputs.
  void bind_program(Compiled& c, exec::Executable& exe, const step::CapturedStep& cap);
};

std::unique_ptr<Compiled> TrainStep::Impl::compile(const std::vector<ir::Type>& types,
                                                   const SourceLoc& loc) {
  step::CapturedStep cap =
      step::capture_step(model, opt, loss_fn, types, loc, opts.on_nonfinite == NonFinite::skip);
  auto c = std::make_unique<Compiled>();
  c->index_checks = cap.index_checks;
  for (auto& [name, t] : cap.persistent) c->counters.persistent_bytes += int64_t(t.nbytes());
  WS_CHECK(hypers.size() == cap.hyper_names.size()) << "the optimizer's hyperparameters changed";

  if (opts.mode == StepMode::interpret) {
    for (auto& [name, t] : cap.persistent) c->persistent.push_back(t);
    c->step_graph = partition::single_graph(cap.joint);
    step::after_stage(c->step_graph, "step");
    c->graphs = {c->step_graph};
    const ir::Graph& g = c->step_graph;
    c->inputs.emplace_back();
    for (ir::ValueId v : g.inputs)
      c->inputs.back().push_back(
          bind_input(*c, cap, g.input_role(v), g.input_name(v), g.type(v).bytes()));
    c->counters.graphs = 1;
    for (const ir::Node& n : c->step_graph.nodes) {
      c->counters.kernels += n.op != ir::Op::input;
      if (n.op == ir::Op::matmul || ir::op_info(n.op).category == ir::OpCategory::convolution) {
        std::vector<ir::Type> in;
        for (ir::ValueId a : n.args) in.push_back(c->step_graph.type(a));
        c->counters.flops += exec::backend_flops(n.op, n.attrs, in, n.type);
      }
    }
    for (const ir::Output& o : c->step_graph.outputs)
      if (o.role == ir::OutputRole::update)
        c->counters.bytes_copied += int64_t(c->step_graph.type(o.value).bytes());
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
    c->programs.emplace_back(lower::lower(g, {.fuse = opts.fuse}, &c->lowered.back()));
    bind_program(*c, c->programs.back(), cap);
  }
  c->partition.emplace(std::move(cap.joint), std::move(plan));
  StepCounters& k = c->counters;
  k.graphs = int64_t(c->programs.size());
  for (const exec::Executable& e : c->programs) {
    k.kernels += int64_t(e.program().kernels.size());
    k.bytes_copied += e.program().copy_bytes;
    k.arena_bytes += e.program().arena_bytes;
    k.flops += e.program().flops;
  }
  for (const Copy& s : c->shadows) k.bytes_copied += 2 * int64_t(s.bytes);
  for (auto& [name, b] : c->owned.by_name)
    if (b.interface) k.interface_bytes += int64_t(b.storage->bytes);
  int64_t shadow_bytes = 0;
  for (const Copy& s : c->shadows) shadow_bytes += int64_t(s.bytes);
  k.peak_bytes = k.persistent_bytes + k.interface_bytes + k.arena_bytes + shadow_bytes;
  return c;
}

Binding TrainStep::Impl::bind_input(Compiled& c, const step::CapturedStep& cap, ir::InputRole role,
                                    const std::string& name, size_t bytes) {
  switch (role) {
    case ir::InputRole::param:
    case ir::InputRole::buffer:
    case ir::InputRole::opt_state:
    case ir::InputRole::rng: {
      const size_t index = cap.source(name).index;
      void* ptr = cap.persistent[index].second.impl()->storage->data;
      for (const Copy& s : c.shadows)
        if (s.user == ptr) ptr = s.own;
      return {Bind::persistent, index, ptr};
    }
    case ir::InputRole::hyper: {
      const size_t index = cap.source(name).index;
      return {Bind::hyper, index, &hypers[index]};
    }
    case ir::InputRole::data: return {Bind::data, cap.source(name).index};
    case ir::InputRole::saved:
    case ir::InputRole::grad: return {Bind::owned, 0, c.owned.get(name, bytes, true)};
  }
  WS_CHECK(false) << "input " << name << " has an invalid role";
  return {Bind::owned};
}

void TrainStep::Impl::bind_program(Compiled& c, exec::Executable& exe,
                                   const step::CapturedStep& cap) {
  const exec::Program& p = exe.program();
  std::vector<Binding> binds;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const exec::ProgramInput& in = p.inputs[i];
    binds.push_back(bind_input(c, cap, in.role, in.name, in.type.bytes()));
    if (binds.back().ptr) exe.bind_input(i, binds.back().ptr);
  }
  c.inputs.push_back(std::move(binds));
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const exec::ProgramOutput& o = p.outputs[i];
    if (o.role == ir::OutputRole::update) continue;
    const bool interface = o.role == ir::OutputRole::saved || o.role == ir::OutputRole::grad;
    void* ptr =
        c.owned.get(o.role == ir::OutputRole::loss ? "loss" : o.name, o.type.bytes(), interface);
    if (o.role == ir::OutputRole::loss) c.loss = static_cast<float*>(ptr);
    if (o.role == ir::OutputRole::user && o.name == step::kFiniteOutput)
      c.finite = static_cast<const uint8_t*>(ptr);
    exe.bind_output(i, ptr);
  }
}

namespace {

const StepOptions& checked(const StepOptions& o) {
  if (o.detect_anomaly && o.mode != StepMode::interpret)
    throw Error(
        fmt::format("TrainStep: detect_anomaly checks every value of the interpreted "
                    "step graph; it needs mode interpret, not {}",
                    mode_name(o.mode)));
  if (o.max_cached < 0)
    throw Error(
        fmt::format("TrainStep: max_cached must be >= 0 (0: no limit); got {}", o.max_cached));
  if (!(o.memory_budget >= 0) || !std::isfinite(o.memory_budget))
    throw Error(fmt::format(
        "TrainStep: memory_budget must be 0 (none), a fraction in (0, 1] or bytes above 1; got {}",
        o.memory_budget));
  return o;
}

}  // namespace

TrainStep::TrainStep(nn::Module& model, optim::Optimizer& opt, LossFn fn, StepOptions opts)
    : impl_(std::make_unique<Impl>(model, opt, std::move(fn), checked(opts))) {}
TrainStep::~TrainStep() = default;
TrainStep::TrainStep(TrainStep&&) noexcept = default;
TrainStep& TrainStep::operator=(TrainStep&&) noexcept = default;

const StepOptions& TrainStep::options() const { return impl_->opts; }
int64_t TrainStep::traces() const { return impl_->cache.traces(); }
size_t TrainStep::cached() const { return impl_->cache.size(); }
void TrainStep::clear_cache() { impl_->cache.clear(); }

std::string TrainStep::graphs_text() const {
  std::string s;
  if (const Compiled* c = impl_->cache.last())
    for (const ir::Graph& g : c->lowered.empty() ? c->graphs : c->lowered)
      s += ir::print(g, {.locations = false});
  return s;
}

std::string TrainStep::partition_report() const {
  const Compiled* c = impl_->cache.last();
  if (!c || !c->partition) return {};
  const auto& [joint, plan] = *c->partition;
  return partition::explain(joint, plan);
}

std::string TrainStep::partition_dot() const {
  const Compiled* c = impl_->cache.last();
  if (!c || !c->partition) return {};
  const auto& [joint, plan] = *c->partition;
  return partition::to_dot(joint, plan);
}

std::string TrainStep::graph_dot(GraphStage stage) const {
  const Compiled* c = impl_->cache.last();
  if (!c || !c->partition) return {};
  // The whole picture (inputs, outputs, legend), where partition_dot keeps
  // to the computed values; the joint graph with what the plan saves and
  // recomputes marked, the others in clusters when there are three.
  if (stage == GraphStage::joint)
    return partition::to_dot(c->partition->first, c->partition->second, ir::DotOptions{});
  std::vector<ir::DotGraph> graphs;
  for (const ir::Graph& g : stage == GraphStage::lowered ? c->lowered : c->graphs)
    graphs.push_back({&g, c->graphs.size() > 1, {}});
  return ir::to_dot(graphs);
}

std::string TrainStep::programs_text() const {
  std::string s;
  if (const Compiled* c = impl_->cache.last())
    for (const exec::Executable& e : c->programs) s += e.program().str();
  return s;
}

Compiled& TrainStep::Impl::lookup(const std::vector<Tensor>& data, Loc sloc) {
  return cache.lookup(data, sloc, [this](const std::vector<ir::Type>& types, const SourceLoc& loc) {
    return compile(types, loc);
  });
}

// Kernel start times and durations of one step, [program][kernel], in
// nanoseconds from `origin`.
struct StepTiming {
  std::chrono::steady_clock::time_point origin;
  std::vector<std::vector<double>> start_ns, ns;
};

// One step of a compiled mode's Programs, each kernel timed when `t` is set.
void run_programs(Compiled& c, const std::vector<Tensor>& data, StepTiming* t) {
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

void TrainStep::Impl::prepare(Compiled& c, const std::vector<Tensor>& data) {
  step::check_indices(c.index_checks, data, "train step");
  opt.hyper_values(hyper_scratch);
  for (size_t i = 0; i < hypers.size(); ++i) hypers[i] = float(hyper_scratch[i]);
}

StepProfile TrainStep::profile(const std::vector<Tensor>& data, int steps, Loc sloc) {
  Impl& m = *impl_;
  if (m.opts.mode == StepMode::interpret)
    throw Error(
        fmt::format("profile: the interpret mode runs no kernels to time; use "
                    "three_graph or single_graph{}",
                    at(SourceLoc::from(sloc))));
  if (steps < 1)
    throw Error(fmt::format("profile: steps must be at least 1, got {}{}", steps,
                            at(SourceLoc::from(sloc))));
  Compiled& c = m.lookup(data, sloc);
  exec::set_team(exec::num_threads());  // kernels timed on the whole pool, never a probe's
  StepTiming timing;
  std::vector<std::vector<double>> total_ns;
  std::vector<std::vector<bool>> contraction;
  for (const exec::Executable& e : c.programs) {
    total_ns.emplace_back(e.program().kernels.size(), 0.0);
    timing.start_ns.push_back(total_ns.back());
    timing.ns.push_back(total_ns.back());
    contraction.emplace_back();
    for (const exec::Kernel& k : e.program().kernels) contraction.back().push_back(bool(k.backend));
  }
  using clock = std::chrono::steady_clock;
  auto ms_since = [](clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  };
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> step_ms, contraction_ms;
  for (int s = 0; s < steps; ++s) {
    m.prepare(c, data);
    timing.origin = clock::now();
    run_programs(c, data, &timing);
    step_ms.push_back(ms_since(timing.origin));
    m.opt.advance();
    for (size_t p = 0; p < total_ns.size(); ++p)
      for (size_t k = 0; k < total_ns[p].size(); ++k) total_ns[p][k] += timing.ns[p][k];
  }
  // The contractions alone, on the buffers the real steps left behind.
  for (int s = 0; s < steps; ++s) {
    const auto t0 = clock::now();
    for (size_t p = 0; p < c.programs.size(); ++p) c.programs[p].run_only(contraction[p]);
    contraction_ms.push_back(ms_since(t0));
  }
  StepProfile prof;
  prof.steps = steps;
  prof.step_ms = median(step_ms);
  prof.contraction_ms = median(contraction_ms);
  std::map<std::string, KernelTime> by_name;
  for (size_t p = 0; p < c.programs.size(); ++p) {
    const exec::Program& prog = c.programs[p].program();
    double ns = 0;
    for (double t : total_ns[p]) ns += t;
    prof.program_ms.emplace_back(prog.name, ns * 1e-6 / steps);
    for (size_t k = 0; k < prog.kernels.size(); ++k) {
      const exec::Kernel& kern = prog.kernels[k];
      KernelTime& t = by_name[exec::kernel_label(kern)];
      t.name = exec::kernel_label(kern);
      t.calls += steps;
      t.ms += total_ns[p][k] * 1e-6;
      if (kern.backend) t.flops += kern.backend->flops();
      prof.last_step.push_back({exec::kernel_label(kern), std::string(ir::op_name(kern.op)),
                                prog.name, kern.loc.str(), timing.start_ns[p][k] * 1e-6,
                                timing.ns[p][k] * 1e-6});
    }
  }
  for (auto& [name, t] : by_name) prof.kernels.push_back(t);
  std::sort(prof.kernels.begin(), prof.kernels.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return prof;
}

StepResult TrainStep::run(const std::vector<Tensor>& data, Loc sloc) {
  exec::require_outside_parallel("a training step");
  Impl& m = *impl_;
  const int64_t traces = m.cache.traces();
  Compiled& c = m.lookup(data, sloc);
  m.prepare(c, data);

  StepResult r;
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  };
  const clock::time_point start = clock::now();
  r.threads = m.opts.adapt_threads ? c.team.team_for_step(seconds(start)) : exec::num_threads();
  exec::set_team(r.threads);
  if (m.opts.mode == StepMode::interpret) {
    const ir::Graph& g = c.step_graph;
    std::vector<Tensor> inputs;
    for (const Binding& b : c.inputs[0]) switch (b.kind) {
        case Bind::data: inputs.push_back(data.at(b.index)); break;
        case Bind::hyper: inputs.push_back(Tensor::scalar(m.hypers[b.index])); break;
        case Bind::persistent: inputs.push_back(c.persistent[b.index]); break;
        case Bind::owned: WS_CHECK(false) << "an interpreted step passes nothing between graphs";
      }
    exec::InterpretStats stats;
    std::vector<Tensor> outs = exec::interpret(g, inputs, &stats, m.opts.detect_anomaly);
    c.counters.peak_bytes = c.counters.persistent_bytes + stats.peak_bytes;
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const ir::Output& o = g.outputs[i];
      if (o.role == ir::OutputRole::loss) r.loss = outs[i].item();
      if (o.role == ir::OutputRole::user && o.name == step::kFiniteOutput)
        r.skipped = outs[i].item() == 0;
      if (o.role == ir::OutputRole::update)
        inputs[size_t(g.input_index(o.aliased_input))].copy_(outs[i]);
    }
  } else {
    run_programs(c, data, nullptr);
    r.loss = *c.loss;
    r.skipped = c.finite && *c.finite == 0;
  }
  const clock::time_point end = clock::now();
  if (m.opts.adapt_threads && m.cache.traces() == traces)  // a step that compiled says nothing
    c.team.ran(r.threads, std::chrono::duration<double>(end - start).count(), seconds(end));
  if (!r.skipped) m.opt.advance();
  r.step = m.opt.step_count();
  r.counters = c.counters;
  if (m.opts.on_nonfinite == NonFinite::error && !std::isfinite(r.loss))
    throw Error(fmt::format(
        "step {}: the loss is {}; the step's update has been applied. Lower the learning rate or "
        "check the data, or skip such steps (StepOptions::on_nonfinite = NonFinite::skip){}",
        r.step, std::isnan(r.loss) ? std::string("NaN") : fmt::format("{}", r.loss),
        at(SourceLoc::from(sloc))));
  return r;
}

}  // namespace ws
