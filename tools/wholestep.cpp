// The wholestep command line: train a reference model, compare the modes,
// print the compiled graphs, run lowering passes over IR text. The shared
// flags and every check made before work starts are in options.hpp; train,
// check, graph and opt are in their own files (commands.hpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <new>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "run.hpp"
#include "stop.hpp"
#include "wholestep/wholestep.hpp"

namespace {

using namespace cli;

int compare(const Common& c, int64_t steps, int64_t warmup, bool no_alias_rows, bool unfused_rows,
            bool save_all_rows) {
  const ws::models::Spec spec = ws::models::spec(c.model);
  BatchSource source(c, spec);
  std::vector<ws::CompareConfig> configs = {
      {ws::StepMode::interpret}, {ws::StepMode::three_graph}, {ws::StepMode::single_graph}};
  if (no_alias_rows) {
    configs.push_back({ws::StepMode::three_graph, false});
    configs.push_back({ws::StepMode::single_graph, false});
  }
  if (unfused_rows) {
    configs.push_back({ws::StepMode::three_graph, true, false});
    configs.push_back({ws::StepMode::single_graph, true, false});
  }
  if (save_all_rows) {
    configs.push_back({ws::StepMode::three_graph, true, true, false});
    configs.push_back({ws::StepMode::single_graph, true, true, false});
  }
  for (ws::CompareConfig& config : configs) config.memory_budget = c.memory_budget;
  fmt::print(
      "comparing modes on {} (batch {}, {}): {} timed steps after {} warm-up, round robin, "
      "median ms/step; max diff is parameters and buffers vs interpret after the last step\n",
      c.model, spec.batch, optimizer_name(c), steps, warmup);
  auto rows = ws::compare_modes([&] { return make_setup(c); }, configs,
                                [&](int64_t i) { return source.get(i); }, steps + warmup, warmup);
  fmt::print("{}", ws::format_comparison(rows));
  return 0;
}

// Where a step's time goes: each kernel implementation's share, then the
// contractions alone.
int profile(const Common& c, int64_t steps, const std::string& mode, int top,
            const std::string& trace, bool no_fuse) {
  ws::TrainSetup s = make_setup(c);
  ws::TrainStep step(
      *s.model, *s.opt, s.loss_fn,
      {.mode = ws::parse_mode(mode), .fuse = !no_fuse, .memory_budget = c.memory_budget});
  const std::vector<ws::Tensor> batch = ws::models::random_batch(ws::models::spec(c.model), 0);
  auto t0 = std::chrono::steady_clock::now();
  const ws::StepResult r = step.run(batch);  // traces, compiles and runs one step
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  step.run(batch);
  const ws::StepProfile p = step.profile(batch, int(steps));
  double total = 0;
  for (const ws::KernelTime& k : p.kernels) total += k.ms;
  fmt::print(
      "{} {} ({} steps): {:.2f} ms/step median, {} kernels, {:.2f} GFLOP/step; first call "
      "(trace, compile, one step) {:.0f} ms\n",
      c.model, mode, p.steps, p.step_ms, r.counters.kernels, double(r.counters.flops) * 1e-9,
      first_ms);
  // The name column fits the longest listed name (fused kernels are named by
  // their ops).
  size_t width = 6;
  for (size_t i = 0; i < p.kernels.size() && int(i) < top; ++i)
    width = std::max(width, p.kernels[i].name.size());
  fmt::print("{:<{}} {:>10} {:>10} {:>7} {:>9}\n", "kernel", width, "calls/step", "ms/step",
             "share", "GFLOP/s");
  for (size_t i = 0; i < p.kernels.size() && int(i) < top; ++i) {
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
  fmt::print("contractions alone: {:.2f} ms ({:.1f} GFLOP/s); step / contractions = {:.2f}\n",
             p.contraction_ms, double(r.counters.flops) / p.contraction_ms * 1e-6,
             p.step_ms / p.contraction_ms);
  if (!trace.empty()) {
    write_text_file(trace, ws::chrome_trace(p), "profile");
    fmt::print("trace of the last step ({} kernels): {} (chrome://tracing or Perfetto)\n",
               p.last_step.size(), trace);
  }
  return 0;
}

int dump(const Common& c, const std::string& mode, bool explain, const std::string& dot,
         bool save_all) {
  ws::TrainSetup s = make_setup(c);
  ws::TrainStep step(
      *s.model, *s.opt, s.loss_fn,
      {.mode = ws::parse_mode(mode), .recompute = !save_all, .memory_budget = c.memory_budget});
  step.run(ws::models::random_batch(ws::models::spec(c.model), 0));
  if ((explain || !dot.empty()) && step.partition_report().empty())
    throw ws::Error(
        fmt::format("dump: --explain and --dot describe how a compiled step is partitioned; "
                    "--mode {} interprets the step graph unpartitioned",
                    mode));
  if (!dot.empty()) {
    write_text_file(dot, step.partition_dot(), "dump");
    fmt::print("wrote {} (render: dot -Tpng {} -o step.png)\n", dot, dot);
  }
  if (explain) {
    fmt::print("{}", step.partition_report());
    return 0;
  }
  if (dot.empty()) fmt::print("{}\n{}", step.graphs_text(), step.programs_text());
  return 0;
}

// What to lower when memory runs out ("; lower --batch ..."), from the
// command that ran, or "".
std::string memory_hint(const std::vector<std::unique_ptr<Command>>& commands) {
  for (const auto& cmd : commands)
    if (cmd->parsed()) return cmd->memory_hint();
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wholestep: compile a whole training step into one graph"};
  app.require_subcommand(1);
  Common c;
  int64_t steps = 20, warmup = 3;
  std::string mode = "single_graph";
  bool no_alias_rows = false;

  // train, check, graph, opt: each in its own file (commands.hpp).
  const std::vector<std::unique_ptr<Command>> commands = add_commands(app, c);

  auto* cmp =
      app.add_subcommand("compare", "train in every mode and compare time, memory, agreement");
  add_common(cmp, c);
  add_integer(cmp, "--steps", steps, "timed steps", 1)->capture_default_str();
  add_integer(cmp, "--warmup", warmup, "untimed first steps", 0)->capture_default_str();
  cmp->add_flag("--no-alias-rows", no_alias_rows, "also run the compiled modes with aliasing off");
  bool unfused_rows = false, no_fuse = false, save_all_rows = false;
  cmp->add_flag("--unfused-rows", unfused_rows, "also run the compiled modes without fusion");
  cmp->add_flag("--save-all-rows", save_all_rows,
                "also run both modes keeping every value the backward reads (no recomputation)");

  int top = 12;
  auto* pr = app.add_subcommand("profile", "time every kernel of a compiled step");
  add_common(pr, c);
  add_integer(pr, "--steps", steps, "profiled steps", 1)->capture_default_str();
  pr->add_option("--mode", mode, "three_graph | single_graph")->capture_default_str();
  add_integer(pr, "--top", top, "kernels listed", 1)->capture_default_str();
  std::string trace;
  pr->add_option("--trace", trace, "write the last step as Chrome trace JSON to this file");
  pr->add_flag("--no-fuse", no_fuse, "one kernel per op (for comparison)");

  app.add_subcommand("info", "print the CPU, threads and the instruction set of each backend");

  auto* dp = app.add_subcommand("dump", "print the compiled graphs and programs");
  add_common(dp, c);
  dp->add_option("--mode", mode, "interpret | three_graph | single_graph")->capture_default_str();
  bool explain = false, save_all = false;
  std::string dot;
  dp->add_flag("--explain", explain,
               "what the forward keeps for the backward, what the backward recomputes, and why");
  dp->add_option("--dot", dot, "write the partitioned step as Graphviz DOT to this file");
  dp->add_flag("--save-all", save_all,
               "keep every forward value the backward reads (no recomputation)");

  app.set_version_flag("--version",
                       [] { return "wholestep " WS_VERSION "\n" + ws::backend_info(); });

  // Every failure is one line on stderr: usage errors (a flag, a file, a
  // data set that cannot work) exit 2, other errors 1, a bug in wholestep
  // 70 with a request to report it.
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
      fmt::print(stderr, "error: {} (see --help)\n", e.what());
      return 2;
    }
    // SIGINT and SIGTERM stop every command promptly, with 130 or 143 and
    // a line saying where (stop.hpp); train stops between steps and saves.
    install_stop_handlers("checking the flags, files and data");
    for (CLI::App* sub : app.get_subcommands())
      if (sub->parsed()) check_no_empty_values(sub);
    for (CLI::App* sub : {cmp, pr, dp})
      if (sub->parsed()) check_common(sub, c);
    if (cmp->parsed()) {
      require_count("--steps", steps, 1);
      require_count("--warmup", warmup, 0);
      // compare runs --steps + --warmup steps, which must be a count too.
      if (steps > std::numeric_limits<int64_t>::max() - warmup)
        throw UsageError(fmt::format("--steps {} with --warmup {}: more than {} steps in all",
                                     steps, warmup, std::numeric_limits<int64_t>::max()));
      check_data(cmp, c);
    }
    if (pr->parsed()) {
      require_count("--steps", steps, 1);
      require_at_most("--steps", steps, std::numeric_limits<int>::max());  // StepProfile's int
      require_count("--top", top, 1);
      if (mode == "interpret") throw UsageError("--mode interpret: profile times compiled modes");
      if (!trace.empty()) check_output_file("--trace", trace);
    }
    if (dp->parsed() && !dot.empty()) check_output_file("--dot", dot);
    if (pr->parsed() || dp->parsed()) check_mode(mode);
    for (const auto& cmd : commands)
      if (cmd->parsed()) {
        if (cmd->takes_common()) {
          cmd->adopt(c);
          check_common(cmd->app(), c);
        }
        cmd->check(c);
      }

    set_phase(fmt::format("running {}", app.get_subcommands().front()->get_name()));
    ws::set_num_threads(c.threads);
    bool backend_lines = !dp->parsed();
    for (const auto& cmd : commands)
      if (cmd->parsed()) backend_lines = cmd->prints_backend_info();
    if (backend_lines) fmt::print("{}", ws::backend_info());  // what runs, before any figure
    if (cmp->parsed()) return compare(c, steps, warmup, no_alias_rows, unfused_rows, save_all_rows);
    if (pr->parsed()) return profile(c, steps, mode, top, trace, no_fuse);
    if (dp->parsed()) return dump(c, mode, explain, dot, save_all);
    for (const auto& cmd : commands)
      if (cmd->parsed()) return cmd->run(c);
  } catch (const UsageError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const ws::OutOfMemory& e) {
    // The user's sizes, not a bug: how much was asked for, and what to lower.
    fmt::print(stderr, "error: {} ({:.1f} GiB){}\n", e.what(), double(e.bytes()) / double(1 << 30),
               memory_hint(commands));
    return 1;
  } catch (const ws::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (const ws::InternalError& e) {
    fmt::print(stderr,
               "internal error: {}\nThis is a bug in wholestep, not in your input; please report "
               "it with the command line that caused it.\n",
               e.what());
    return 70;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "error: out of memory{}\n", memory_hint(commands));
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
