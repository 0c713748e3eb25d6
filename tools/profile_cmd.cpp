// `wholestep profile`: where a compiled step's time goes. Each kernel
// implementation's share of the step (TrainStep::profile), the time by
// program, then the contractions alone; with --data-parallel, what the
// collectives cost; --trace writes the last step as a Chrome trace.
#include <algorithm>
#include <chrono>
#include <limits>

#include <fmt/format.h>

#include "commands.hpp"
#include "dist/collectives.hpp"
#include "group.hpp"
#include "run.hpp"

namespace cli {
namespace {

class ProfileCommand : public Command {
 public:
  ProfileCommand(CLI::App& parent, Common& c)
      : Command(parent, "profile", "time every kernel of a compiled step", c) {
    add_integer(app_, "--steps", steps_, "profiled steps", 1)->capture_default_str();
    add_integer(app_, "--top", top_, "kernels listed", 1)->capture_default_str();
    app_->add_option("--trace", trace_, "write the last step as Chrome trace JSON to this file");
  }

  void check(const Common& c) override {
    require_count("--steps", steps_, 1);
    require_at_most("--steps", steps_, std::numeric_limits<int>::max());  // StepProfile's int
    require_count("--top", top_, 1);
    if (c.step.mode == ws::StepMode::interpret)
      throw UsageError("--mode interpret: profile times compiled modes");
    if (!trace_.empty()) check_output_file("--trace", trace_);
  }

  int run(const Common& c) override {
    ws::TrainSetup s = make_setup(c);
    ws::TrainStep step(*s.model, *s.opt, s.loss_fn, c.step);
    // This rank's part of a global batch (all of it in one process).
    const std::vector<ws::Tensor> batch =
        rank_rows(ws::models::random_batch(global_spec(ws::models::spec(c.model)), 0));
    auto t0 = std::chrono::steady_clock::now();
    const ws::StepResult r = step.run(batch);  // traces, compiles and runs one step
    const double first_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    step.run(batch);
    const ws::dist::CommCounters comm = ws::dist::counters();
    const ws::StepProfile p = step.profile(batch, int(steps_));
    double total = 0;
    for (const ws::KernelTime& k : p.kernels) total += k.ms;
    fmt::print(
        "{} {} ({} steps): {:.2f} ms/step median, {} kernels, {:.2f} GFLOP/step; first call "
        "(trace, compile, one step) {:.0f} ms\n",
        c.model, ws::mode_name(c.step.mode), p.steps, p.step_ms, r.counters.kernels,
        double(r.counters.flops) * 1e-9, first_ms);
    // The name column fits the longest listed name (fused kernels are named
    // by their ops).
    size_t width = 6;
    for (size_t i = 0; i < p.kernels.size() && int(i) < top_; ++i)
      width = std::max(width, p.kernels[i].name.size());
    fmt::print("{:<{}} {:>10} {:>10} {:>7} {:>9}\n", "kernel", width, "calls/step", "ms/step",
               "share", "GFLOP/s");
    for (size_t i = 0; i < p.kernels.size() && int(i) < top_; ++i) {
      const ws::KernelTime& k = p.kernels[i];
      const double ms = k.ms / double(p.steps);
      fmt::print("{:<{}} {:>10} {:>10.3f} {:>6.1f}% {:>9}\n", k.name, width, k.calls / p.steps, ms,
                 100 * k.ms / total,
                 k.flops ? fmt::format("{:.1f}", double(k.flops) / ms * 1e-6) : std::string("-"));
    }
    std::string by_program;
    for (const auto& [name, ms] : p.program_ms)
      by_program += fmt::format("{}{} {:.3f} ms", by_program.empty() ? "" : ", ", name, ms);
    fmt::print("kernel time by program: {}\n", by_program);
    fmt::print(
        "layout conversions a step: {} weight and {} other reorders inside oneDNN's products and "
        "convolutions, {} transposes\n",
        p.weight_reorders, p.other_reorders, p.transposes);
    fmt::print("contractions alone: {:.2f} ms ({:.1f} GFLOP/s); step / contractions = {:.2f}\n",
               p.contraction_ms, double(r.counters.flops) / p.contraction_ms * 1e-6,
               p.step_ms / p.contraction_ms);
    const ws::StepFloor floor = step.floor(batch, int(steps_));
    fmt::print(
        "floor (the contractions as oneDNN primitives alone, in the layouts they pick): {:.2f} "
        "ms; step / floor = {:.2f}\n",
        floor.ms, p.step_ms / floor.ms);
    if (c.step.data_parallel) {
      // The profiled steps' collectives, per step (the contractions alone
      // run none).
      const ws::dist::CommCounters& now = ws::dist::counters();
      const double busy = (now.busy_ms - comm.busy_ms) / double(p.steps),
                   wait = (now.wait_ms - comm.wait_ms) / double(p.steps);
      fmt::print(
          "communication, global batch {}: {} collectives/step, {:.3f} MB/step, {:.3f} ms in "
          "flight, {:.3f} ms waited{}\n",
          batch_text(ws::models::spec(c.model).batch), r.counters.collectives,
          double(r.counters.comm_bytes) * 1e-6, busy, wait,
          busy > 0 ? fmt::format(", {:.1f}% hidden behind compute", 100 * (1 - wait / busy))
                   : std::string());
    }
    if (!trace_.empty() && leads()) {
      write_text_file(trace_, ws::chrome_trace(p), "profile");
      const int64_t collectives =
          std::count_if(p.last_step.begin(), p.last_step.end(),
                        [](const ws::KernelEvent& e) { return e.program.starts_with("comm"); });
      fmt::print("trace of the last step ({} kernels{}): {} (chrome://tracing or Perfetto)\n",
                 int64_t(p.last_step.size()) - collectives,
                 collectives ? fmt::format(", {} collectives", collectives) : std::string(),
                 trace_);
    }
    return 0;
  }

 private:
  int64_t steps_ = 20;
  std::string trace_;
  int top_ = 12;
};

}  // namespace

std::unique_ptr<Command> make_profile_command(CLI::App& app, Common& c) {
  return std::make_unique<ProfileCommand>(app, c);
}

}  // namespace cli
