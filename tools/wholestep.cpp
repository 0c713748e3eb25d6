// The wholestep command line: train a reference model, compare the modes,
// print the compiled graphs. The shared flags and every check made before
// work starts are in options.hpp.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <new>
#include <optional>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "wholestep/wholestep.hpp"

namespace {

using namespace cli;
using nlohmann::json;
using ws::models::DataKind;

// The training batches of a model, step by step: Fashion-MNIST epochs,
// windows of a text, or random data.
class BatchSource {
 public:
  BatchSource(const Common& c, const ws::models::Spec& spec) : c_(c), spec_(spec) {
    if (spec.data == DataKind::fashion_mnist) {
      fm_.emplace("train", c.data_dir);
      if (fm_->size() < spec.batch)
        throw UsageError(
            fmt::format("--data {}: the training set holds {} examples, fewer than one batch of {}",
                        c.data_dir, fm_->size(), spec.batch));
    } else if (spec.data == DataKind::text) {
      text_.emplace(ws::data::ByteText(c.text).split("train"));
    }
  }
  // Batches per epoch (0: no epochs).
  int64_t epoch_steps() const { return fm_ ? fm_->size() / spec_.batch : 0; }
  std::vector<ws::Tensor> get(int64_t step) {
    if (fm_) {
      const int64_t epoch = step / epoch_steps(), i = step % epoch_steps();
      if (!epoch_ || *epoch_ != epoch) {
        order_ = fm_->epoch_indices(spec_.batch, c_.seed + uint64_t(epoch), /*drop_last=*/true);
        epoch_ = epoch;
      }
      ws::data::Batch b = fm_->batch(order_[size_t(i)]);
      return {b.images, b.labels};
    }
    if (text_) {
      ws::data::TextBatch b = text_->sample(spec_.batch, spec_.gpt.context, c_.seed, step);
      return {b.inputs, b.targets};
    }
    return ws::models::random_batch(spec_, c_.seed * 1000003 + uint64_t(step));
  }

 private:
  const Common& c_;
  ws::models::Spec spec_;
  std::optional<ws::data::FashionMnist> fm_;
  std::optional<ws::data::ByteText> text_;
  std::vector<std::vector<int64_t>> order_;
  std::optional<int64_t> epoch_;
};

// Test accuracy through a compiled inference graph that shares the trained
// parameters' storage.
double accuracy(ws::models::Model& model, const ws::data::FashionMnist& test) {
  ws::Forward fwd = ws::compile_forward(model, [&](const ws::Tensor& x) { return model(x); });
  int64_t correct = 0;
  for (const ws::data::Batch& b : test.batches(500, 0)) {
    ws::Tensor logits = fwd(b.images);
    const float* z = logits.data<float>();
    const int64_t* y = b.labels.data<int64_t>();
    const int64_t n = logits.size(0), k = logits.size(1);
    for (int64_t i = 0; i < n; ++i)
      correct += std::max_element(z + i * k, z + (i + 1) * k) - (z + i * k) == y[i];
  }
  return double(correct) / double(test.size());
}

// Mean held-out loss over `batches` windows of the text's last 10%.
double validation_loss(ws::models::Model& model, const Common& c, const ws::models::Spec& spec,
                       int batches) {
  ws::data::ByteText val = ws::data::ByteText(c.text).split("val");
  ws::Forward fwd = ws::compile_forward(
      model, [&](const ws::Tensor& x, const ws::Tensor& y) { return model.loss(x, y); });
  double total = 0;
  for (int i = 0; i < batches; ++i) {
    ws::data::TextBatch b = val.sample(spec.batch, spec.gpt.context, 12345, i);
    total += fwd(b.inputs, b.targets).item();
  }
  return total / batches;
}

// The signal that asked `train` to stop (SIGINT, SIGTERM), or 0.
std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) {
  g_stop_signal = sig;
  ::signal(sig, SIG_DFL);  // a second one stops at once
}

// The configuration a checkpoint keeps, so a resumed run continues exactly
// as it was set up.
json run_config(const Common& c, const TrainFlags& f, int64_t steps) {
  return {{"model", c.model},
          {"optimizer", optimizer_name(c)},
          {"lr", learning_rate(c)},
          {"momentum", c.momentum},
          {"weight_decay", c.weight_decay},
          {"max_grad_norm", c.max_grad_norm},
          {"schedule", c.schedule},
          {"seed", c.seed},
          {"mode", f.mode},
          {"memory_budget", c.memory_budget},
          {"steps", steps},
          {"data", c.data_dir},
          {"text", c.text}};
}

// --resume: the run's configuration comes from the checkpoint. A flag given
// on the command line with another value is a usage error (the run would
// not continue as it was); --steps may extend or shorten the run, and
// --data and --text may point to where the same data now lives.
void adopt_config(CLI::App* tr, const std::string& resume, Common& c, TrainFlags& f) {
  ws::CheckpointState st;
  json cfg;
  try {
    st = ws::read_checkpoint_state(resume);
    cfg = json::parse(st.user_json).at("config");
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("--resume {}: no training configuration in the checkpoint ({})",
                                 resume, e.what()));
  } catch (const ws::Error& e) {
    throw UsageError(fmt::format("--resume {}: {}", resume, e.what()));
  }
  auto given = [&](const char* flag) { return tr->get_option(flag)->count() > 0; };
  auto take = [&](const char* flag, const char* key, auto& field) {
    using T = std::decay_t<decltype(field)>;
    T saved;
    try {
      saved = cfg.at(key).get<T>();
    } catch (const json::exception& e) {
      throw UsageError(
          fmt::format("--resume {}: the saved configuration's '{}': {}", resume, key, e.what()));
    }
    if (given(flag) && !(field == saved))
      throw UsageError(fmt::format(
          "{} {} differs from the checkpoint's {} ({}); a resumed run keeps its configuration",
          flag, json(field).dump(), json(saved).dump(), st.path));
    field = saved;
  };
  take("--model", "model", c.model);
  take("--seed", "seed", c.seed);
  take("--momentum", "momentum", c.momentum);
  take("--weight-decay", "weight_decay", c.weight_decay);
  take("--max-grad-norm", "max_grad_norm", c.max_grad_norm);
  take("--schedule", "schedule", c.schedule);
  take("--memory-budget", "memory_budget", c.memory_budget);
  take("--mode", "mode", f.mode);
  std::string opt = c.optimizer.value_or("");
  double lr = c.lr.value_or(0);
  take("--optimizer", "optimizer", opt);
  take("--lr", "lr", lr);
  c.optimizer = opt;
  c.lr = lr;
  if (!given("--steps")) f.steps = cfg.value("steps", int64_t(0));
  if (!given("--data")) c.data_dir = cfg.value("data", c.data_dir);
  if (!given("--text")) c.text = cfg.value("text", c.text);
  f.resume = st.path;
}

int train(const Common& c, const TrainFlags& f) {
  const ws::models::Spec spec = ws::models::spec(c.model);
  BatchSource source(c, spec);
  const int64_t steps =
      f.steps.value_or(source.epoch_steps() > 0 ? int64_t(f.epochs) * source.epoch_steps() : 300);
  ws::TrainSetup s = make_setup(c);
  ws::TrainStep step(
      *s.model, *s.opt, s.loss_fn,
      {.mode = ws::parse_mode(f.mode),
       .memory_budget = c.memory_budget,
       .on_nonfinite = f.skip_nonfinite ? ws::NonFinite::skip : ws::NonFinite::ignore});
  int64_t skipped = 0;
  // The test set is read before training, so a broken one stops nothing.
  std::optional<ws::data::FashionMnist> test;
  if (spec.data == DataKind::fashion_mnist) {
    test.emplace("test", c.data_dir);
    if (test->size() == 0)
      throw UsageError(fmt::format("--data {}: the test set holds no examples", c.data_dir));
  }
  // The data position: the step index of the run, which runs ahead of the
  // optimizer's step count when steps were skipped.
  int64_t start = 0;
  if (!f.resume.empty()) {
    const ws::CheckpointState st = ws::load_checkpoint(f.resume, *s.model, *s.opt);
    start = json::parse(st.user_json).at("data").value("step", st.step);
    fmt::print("resumed from {} at step {}\n", f.resume, start);
  }
  int64_t next = start;
  const int64_t end = std::min(steps, f.stop_after ? start + *f.stop_after : steps);
  const char* data = spec.data == DataKind::fashion_mnist ? "Fashion-MNIST"
                     : spec.data == DataKind::text        ? c.text.c_str()
                                                          : "random data";
  fmt::print("training {} on {}: {} steps, batch {}, {} lr {} ({}), mode {}\n", c.model, data,
             steps, spec.batch, optimizer_name(c), learning_rate(c), c.schedule, f.mode);
  auto save = [&] {
    if (f.save_dir.empty()) return std::string();
    const int64_t i = next;
    json user = {{"config", run_config(c, f, steps)},
                 {"data", {{"step", i}, {"shuffle_seed", c.seed}}}};
    if (source.epoch_steps() > 0) {
      user["data"]["epoch"] = i / source.epoch_steps();
      user["data"]["index"] = i % source.epoch_steps();
    }
    return ws::save_checkpoint(f.save_dir, *s.model, *s.opt, user.dump(), f.keep);
  };
  g_stop_signal = 0;
  ::signal(SIGINT, on_stop_signal);
  ::signal(SIGTERM, on_stop_signal);
  auto t0 = std::chrono::steady_clock::now();
  double first = 0, loss = 0, recent = 0;
  int64_t recent_n = 0;
  const int64_t window = 20;
  for (int64_t i = start; i < end; ++i) {
    // The learning rate is a graph input: changing it never recompiles.
    if (c.schedule == "cosine")
      s.opt->set_lr(learning_rate(c) * 0.5 * (1 + std::cos(M_PI * double(i) / double(steps))));
    ws::StepResult r = step.run(source.get(i));
    next = i + 1;
    if (r.skipped) {
      ++skipped;
      fmt::print(stderr, "step {}: the loss or a gradient is not finite (loss {}); skipped\n",
                 i + 1, std::isnan(r.loss) ? std::string("NaN") : fmt::format("{}", r.loss));
    } else {
      loss = r.loss;
      if (!std::isfinite(loss))
        throw ws::Error(fmt::format(
            "step {}: the loss is {}; training stops here (its update made the parameters "
            "non-finite{}). Lower --lr, check the data, or use --skip-nonfinite",
            i + 1, std::isnan(loss) ? std::string("NaN") : fmt::format("{}", loss),
            f.save_dir.empty() ? "" : "; the checkpoints saved so far are intact"));
      if (i == start) first = loss;
      if (i >= end - window) recent += loss, ++recent_n;
    }
    if ((i + 1) % 50 == 0 || i == start) {
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::string epoch =
          source.epoch_steps() > 0 ? fmt::format("  epoch {}", i / source.epoch_steps() + 1) : "";
      fmt::print("step {:5d}{}  loss {:.4f}  {:.1f} steps/s\n", i + 1, epoch, loss,
                 double(i + 1 - start) / secs);
      std::fflush(stdout);
    }
    if (const int sig = g_stop_signal.load()) {
      const std::string where = save();
      fmt::print(stderr, "stopped by {} after step {}{}\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                 i + 1, where.empty() ? "" : fmt::format("; saved {}", where));
      return 128 + sig;
    }
    if (f.save_every > 0 && (i + 1) % f.save_every == 0 && i + 1 < end) save();
  }
  if (const std::string where = save(); !where.empty()) fmt::print("saved {}\n", where);
  if (end < steps) {
    fmt::print("stopped after step {} of {} (--stop-after)\n", end, steps);
    return 0;
  }
  const int64_t ran = end - start;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("trained {} steps in {:.1f} s ({:.2f} ms/step), traces {}{}\n", ran, secs,
             1000 * secs / double(std::max<int64_t>(ran, 1)), step.traces(),
             skipped ? fmt::format(", {} skipped (not finite)", skipped) : "");
  if (recent_n > 0)
    fmt::print("loss: first step {:.4f}, mean of the last {} steps {:.4f} ({:.2f}x lower)\n", first,
               recent_n, recent / double(recent_n), first / (recent / double(recent_n)));
  auto& model = static_cast<ws::models::Model&>(*s.model);
  if (test) fmt::print("test accuracy: {:.4f}\n", accuracy(model, *test));
  if (spec.data == DataKind::text)
    fmt::print("validation loss (last 10% of the text, eval mode): {:.4f}\n",
               validation_loss(model, c, spec, 20));
  return 0;
}

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wholestep: compile a whole training step into one graph"};
  app.require_subcommand(1);
  Common c;
  TrainFlags f;
  int64_t steps = 20, warmup = 3;
  std::string mode = "single_graph";
  bool no_alias_rows = false;

  auto* tr = app.add_subcommand(
      "train", "train a model (Fashion-MNIST: then test accuracy; gpt: then validation loss)");
  add_common(tr, c);
  tr->add_option("--epochs", f.epochs, "epochs (Fashion-MNIST models)")->capture_default_str();
  tr->add_option("--steps", f.steps, "steps (default: the epochs, or 300 for gpt)");
  tr->add_option("--mode", f.mode, "interpret | three_graph | single_graph")->capture_default_str();
  tr->add_option("--save", f.save_dir,
                 "write checkpoints into this directory (checkpoint-<step>/: model.safetensors, "
                 "optimizer.safetensors, trainer_state.json) at the end, every --save-every "
                 "steps, and when stopped by SIGINT or SIGTERM");
  tr->add_option("--save-every", f.save_every, "steps between checkpoints (0: at the end only)")
      ->capture_default_str();
  tr->add_option("--keep", f.keep, "checkpoints kept, the newest (0: all)")->capture_default_str();
  tr->add_option("--resume", f.resume,
                 "continue the run saved in this checkpoint (or the newest in this directory), "
                 "with its configuration");
  tr->add_flag("--skip-nonfinite", f.skip_nonfinite,
               "skip a step whose loss or gradients are inf or NaN (parameters and state stay "
               "as they were); without it such a step stops training with an error");
  tr->add_option("--stop-after", f.stop_after,
                 "stop after this many steps of this run (saving when --save is given)");

  auto* cmp =
      app.add_subcommand("compare", "train in every mode and compare time, memory, agreement");
  add_common(cmp, c);
  cmp->add_option("--steps", steps, "timed steps")->capture_default_str();
  cmp->add_option("--warmup", warmup, "untimed first steps")->capture_default_str();
  cmp->add_flag("--no-alias-rows", no_alias_rows, "also run the compiled modes with aliasing off");
  bool unfused_rows = false, no_fuse = false, save_all_rows = false;
  cmp->add_flag("--unfused-rows", unfused_rows, "also run the compiled modes without fusion");
  cmp->add_flag("--save-all-rows", save_all_rows,
                "also run both modes keeping every value the backward reads (no recomputation)");

  int top = 12;
  auto* pr = app.add_subcommand("profile", "time every kernel of a compiled step");
  add_common(pr, c);
  pr->add_option("--steps", steps, "profiled steps")->capture_default_str();
  pr->add_option("--mode", mode, "three_graph | single_graph")->capture_default_str();
  pr->add_option("--top", top, "kernels listed")->capture_default_str();
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

  // check, graph: each in its own file (commands.hpp).
  const std::vector<std::unique_ptr<Command>> commands = add_commands(app, c);

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
    if (tr->parsed() && !f.resume.empty()) adopt_config(tr, f.resume, c, f);
    for (CLI::App* sub : {tr, cmp, pr, dp})
      if (sub->parsed()) check_common(sub, c);
    if (tr->parsed()) check_train(tr, c, f);
    if (cmp->parsed()) {
      require_count("--steps", steps, 1);
      require_count("--warmup", warmup, 0);
      check_data(cmp, c);
    }
    if (pr->parsed()) {
      require_count("--steps", steps, 1);
      require_count("--top", top, 1);
      if (mode == "interpret") throw UsageError("--mode interpret: profile times compiled modes");
      if (!trace.empty()) check_output_file("--trace", trace);
    }
    if (dp->parsed() && !dot.empty()) check_output_file("--dot", dot);
    if (pr->parsed() || dp->parsed()) check_mode(mode);
    for (const auto& cmd : commands)
      if (cmd->parsed()) {
        check_common(cmd->app(), c);
        cmd->check(c);
      }

    ws::set_num_threads(c.threads);
    if (!dp->parsed()) fmt::print("{}", ws::backend_info());  // what runs, before any figure
    if (tr->parsed()) return train(c, f);
    if (cmp->parsed()) return compare(c, steps, warmup, no_alias_rows, unfused_rows, save_all_rows);
    if (pr->parsed()) return profile(c, steps, mode, top, trace, no_fuse);
    if (dp->parsed()) return dump(c, mode, explain, dot, save_all);
    for (const auto& cmd : commands)
      if (cmd->parsed()) return cmd->run(c);
  } catch (const UsageError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
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
    fmt::print(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
