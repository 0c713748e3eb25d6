// TrainStep::profile: real steps with every kernel timed, then the
// contractions alone, summed by kernel implementation.
#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

#include "dist/collectives.hpp"
#include "exec/dnnl_backend.hpp"
#include "exec/floor.hpp"
#include "exec/threads.hpp"
#include "step/train_step_impl.hpp"

namespace ws {

StepProfile TrainStep::profile(const std::vector<Tensor>& data, int steps, Loc sloc) {
  Impl& m = *impl_;
  if (m.opts.mode == StepMode::interpret)
    throw Error(
        fmt::format("profile: the interpret mode runs no kernels to time; use "
                    "three_graph or single_graph{}",
                    at(SourceLoc::from(sloc))));
  if (m.opts.accumulate > 1)
    throw Error(fmt::format(
        "profile: step option accumulate={} alternates two compiled graphs over a cycle, and "
        "profile times one step graph run again and again; profile a step compiled with "
        "accumulate=1{}",
        m.opts.accumulate, at(SourceLoc::from(sloc))));
  if (steps < 1)
    throw Error(fmt::format("profile: steps must be at least 1, got {}{}", steps,
                            at(SourceLoc::from(sloc))));
  const exec::OpenMpCountKept kept;
  step::Compiled& c = m.lookup(data, sloc);
  exec::set_team(exec::num_threads());  // kernels timed on the whole pool, never a probe's
  step::StepTiming timing;
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
  // The last step's collectives (data parallel), for its timeline.
  std::vector<dist::CommEvent> comm;
  struct Recording {
    ~Recording() { dist::record_comm_events(nullptr); }
  } recording;
  for (int s = 0; s < steps; ++s) {
    m.prepare(c, data);
    if (s == steps - 1) dist::record_comm_events(&comm);
    timing.origin = clock::now();
    step::run_programs(c, data, &timing);
    step_ms.push_back(ms_since(timing.origin));
    m.source->advance();
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
      if (kern.backend) {
        t.flops += kern.backend->flops();
        const exec::BackendOp::Reorders r = kern.backend->reorders();
        prof.weight_reorders += r.weights;
        prof.other_reorders += r.other;
      }
      if (kern.op == ir::Op::transpose) ++prof.transposes;
      prof.last_step.push_back({exec::kernel_label(kern), std::string(ir::op_name(kern.op)),
                                prog.name, kern.loc.str(), timing.start_ns[p][k] * 1e-6,
                                timing.ns[p][k] * 1e-6});
    }
  }
  // Each collective from its start to its observed completion, on tracks
  // of their own ("communication", "communication 2" for one that overlaps
  // it, ...): slices of one track must not overlap.
  std::vector<double> lane_end;
  for (const dist::CommEvent& e : comm) {
    const double start = std::chrono::duration<double, std::milli>(e.start - timing.origin).count(),
                 ms = std::chrono::duration<double, std::milli>(e.done - e.start).count();
    size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > start) ++lane;
    if (lane == lane_end.size()) lane_end.push_back(0);
    lane_end[lane] = start + ms;
    prof.last_step.push_back(
        {fmt::format("all_reduce {:.3f} MB", double(e.bytes) * 1e-6), "all_reduce",
         lane ? fmt::format("communication {}", lane + 1) : std::string("communication"), "", start,
         ms});
  }
  for (auto& [name, t] : by_name) prof.kernels.push_back(t);
  std::sort(prof.kernels.begin(), prof.kernels.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return prof;
}

StepFloor TrainStep::floor(const std::vector<Tensor>& data, int rounds, Loc sloc) {
  Impl& m = *impl_;
  if (m.opts.mode == StepMode::interpret)
    throw Error(
        fmt::format("floor: the interpret mode compiles no graphs to measure; use three_graph or "
                    "single_graph{}",
                    at(SourceLoc::from(sloc))));
  if (rounds < 1)
    throw Error(fmt::format("floor: rounds must be at least 1, got {}{}", rounds,
                            at(SourceLoc::from(sloc))));
  const exec::OpenMpCountKept kept;
  const step::Compiled& c = m.lookup(data, sloc);
  StepFloor f;
  f.parts = exec::measure_floor(c.graphs, rounds);
  for (const FloorPart& p : f.parts) f.ms += p.ms;
  return f;
}

}  // namespace ws
