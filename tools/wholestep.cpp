// The wholestep command line: train a reference model, compare the modes,
// print the compiled graphs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "wholestep/wholestep.hpp"

namespace {

using ws::models::DataKind;

struct Common {
  std::string model = "mlp";
  std::string data_dir = ws::data::kFashionMnistDir;
  std::string text = ws::data::kDefaultTextFile;
  uint64_t seed = 0;
  std::optional<std::string> optimizer;
  std::optional<double> lr;
  double momentum = 0.9, weight_decay = -1, max_grad_norm = 0;
  std::string schedule = "cosine";
  int threads = 0;
  double memory_budget = 0;
};

void add_common(CLI::App* app, Common& c) {
  app->add_option("--model", c.model, "reference model: mlp, tiny_mlp, cnn or gpt")
      ->capture_default_str();
  app->add_option("--data", c.data_dir, "Fashion-MNIST directory")->capture_default_str();
  app->add_option("--text", c.text, "text file for gpt (bytes)")->capture_default_str();
  app->add_option("--seed", c.seed, "initialization, shuffle and dropout seed")
      ->capture_default_str();
  app->add_option("--optimizer", c.optimizer, "sgd | adam | adamw (default: the model's)");
  app->add_option("--lr", c.lr, "learning rate (default: the model's)");
  app->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  app->add_option("--weight-decay", c.weight_decay, "weight decay (default: 0; AdamW 0.01)");
  app->add_option("--max-grad-norm", c.max_grad_norm, "global-norm gradient clipping (0: off)")
      ->capture_default_str();
  app->add_option("--threads", c.threads, "threads (0: all cores)")->capture_default_str();
  app->add_option("--memory-budget", c.memory_budget,
                  "forward values kept for the backward: a fraction in (0, 1] of keeping all, "
                  "or bytes; the backward recomputes the rest (0: none)")
      ->capture_default_str();
  app->add_option("--schedule", c.schedule,
                  "learning rate schedule: cosine (decay to 0 over the run) or constant")
      ->capture_default_str();
}

std::string optimizer_name(const Common& c) {
  return c.optimizer.value_or(ws::models::spec(c.model).optimizer);
}
double learning_rate(const Common& c) { return c.lr.value_or(ws::models::spec(c.model).lr); }

ws::TrainSetup make_setup(const Common& c) {
  ws::manual_seed(c.seed);
  const ws::models::Spec spec = ws::models::spec(c.model);
  ws::TrainSetup s;
  auto model = ws::models::make(spec);
  const std::string opt = optimizer_name(c);
  if (opt == "sgd") {
    s.opt = std::make_unique<ws::optim::SGD>(
        *model, ws::optim::SgdOptions{.lr = learning_rate(c),
                                      .momentum = c.momentum,
                                      .weight_decay = std::max(c.weight_decay, 0.0),
                                      .max_grad_norm = c.max_grad_norm});
  } else if (opt == "adam" || opt == "adamw") {
    ws::optim::AdamOptions o{.lr = learning_rate(c), .max_grad_norm = c.max_grad_norm};
    o.weight_decay = c.weight_decay >= 0 ? c.weight_decay : (opt == "adamw" ? 0.01 : 0.0);
    s.opt = std::make_unique<ws::optim::Adam>(*model, o, opt == "adamw");
  } else {
    throw ws::Error(fmt::format("unknown optimizer '{}': expected sgd, adam or adamw", opt));
  }
  s.loss_fn = ws::models::loss_fn(*model);
  s.model = std::move(model);
  return s;
}

// The training batches of a model, step by step: Fashion-MNIST epochs,
// windows of a text, or random data.
class BatchSource {
 public:
  BatchSource(const Common& c, const ws::models::Spec& spec) : c_(c), spec_(spec) {
    if (spec.data == DataKind::fashion_mnist)
      fm_.emplace("train", c.data_dir);
    else if (spec.data == DataKind::text)
      text_.emplace(ws::data::ByteText(c.text).split("train"));
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

int train(const Common& c, int epochs, int64_t steps, const std::string& mode) {
  const ws::models::Spec spec = ws::models::spec(c.model);
  BatchSource source(c, spec);
  if (steps <= 0) steps = source.epoch_steps() > 0 ? epochs * source.epoch_steps() : 300;
  ws::TrainSetup s = make_setup(c);
  ws::TrainStep step(*s.model, *s.opt, s.loss_fn,
                     {.mode = ws::parse_mode(mode), .memory_budget = c.memory_budget});
  const char* data = spec.data == DataKind::fashion_mnist ? "Fashion-MNIST"
                     : spec.data == DataKind::text        ? c.text.c_str()
                                                          : "random data";
  fmt::print("training {} on {}: {} steps, batch {}, {} lr {} ({}), mode {}\n", c.model, data,
             steps, spec.batch, optimizer_name(c), learning_rate(c), c.schedule, mode);
  auto t0 = std::chrono::steady_clock::now();
  double first = 0, loss = 0, recent = 0;
  int64_t recent_n = 0;
  const int64_t window = 20;
  if (c.schedule != "cosine" && c.schedule != "constant")
    throw ws::Error(fmt::format("unknown schedule '{}': expected cosine or constant", c.schedule));
  for (int64_t i = 0; i < steps; ++i) {
    // The learning rate is a graph input: changing it never recompiles.
    if (c.schedule == "cosine")
      s.opt->set_lr(learning_rate(c) * 0.5 * (1 + std::cos(M_PI * double(i) / double(steps))));
    ws::StepResult r = step.run(source.get(i));
    loss = r.loss;
    if (i == 0) first = loss;
    if (i >= steps - window) recent += loss, ++recent_n;
    if ((i + 1) % 50 == 0 || i == 0) {
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::string epoch =
          source.epoch_steps() > 0 ? fmt::format("  epoch {}", i / source.epoch_steps() + 1) : "";
      fmt::print("step {:5d}{}  loss {:.4f}  {:.1f} steps/s\n", i + 1, epoch, loss,
                 double(i + 1) / secs);
      std::fflush(stdout);
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("trained {} steps in {:.1f} s ({:.2f} ms/step), traces {}\n", steps, secs,
             1000 * secs / double(steps), step.traces());
  fmt::print("loss: first step {:.4f}, mean of the last {} steps {:.4f} ({:.2f}x lower)\n", first,
             recent_n, recent / double(recent_n), first / (recent / double(recent_n)));
  auto& model = static_cast<ws::models::Model&>(*s.model);
  if (spec.data == DataKind::fashion_mnist)
    fmt::print("test accuracy: {:.4f}\n",
               accuracy(model, ws::data::FashionMnist("test", c.data_dir)));
  if (spec.data == DataKind::text)
    fmt::print("validation loss (last 10% of the text, eval mode): {:.4f}\n",
               validation_loss(model, c, spec, 20));
  return 0;
}

int compare(const Common& c, int64_t steps, int64_t warmup, bool no_alias_rows, bool unfused_rows,
            bool save_all_rows) {
  const ws::models::Spec spec = ws::models::spec(c.model);
  BatchSource source(c, spec);
  std::vector<std::vector<ws::Tensor>> batches;
  for (int64_t i = 0; i < steps + warmup; ++i) batches.push_back(source.get(i));
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
  auto rows = ws::compare_modes([&] { return make_setup(c); }, configs, batches, warmup);
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
  fmt::print("contractions alone: {:.2f} ms ({:.1f} GFLOP/s); step / contractions = {:.2f}\n",
             p.contraction_ms, double(r.counters.flops) / p.contraction_ms * 1e-6,
             p.step_ms / p.contraction_ms);
  if (!trace.empty()) {
    std::ofstream out(trace);
    out << ws::chrome_trace(p);
    if (!out.flush())
      throw ws::Error(fmt::format("profile: cannot write the trace to '{}'", trace));
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
    std::FILE* f = std::fopen(dot.c_str(), "w");
    if (!f) throw ws::Error(fmt::format("dump: cannot write {}", dot));
    const std::string text = step.partition_dot();
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
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
  int epochs = 1;
  int64_t max_steps = 0, steps = 20, warmup = 3;
  std::string mode = "single_graph";
  bool no_alias_rows = false;

  auto* tr = app.add_subcommand(
      "train", "train a model (Fashion-MNIST: then test accuracy; gpt: then validation loss)");
  add_common(tr, c);
  tr->add_option("--epochs", epochs, "epochs (Fashion-MNIST models)")->capture_default_str();
  tr->add_option("--steps", max_steps, "steps (default: the epochs, or 300 for gpt)");
  tr->add_option("--mode", mode, "interpret | three_graph | single_graph")->capture_default_str();

  auto* cmp =
      app.add_subcommand("compare", "train in every mode and compare time, memory, agreement");
  add_common(cmp, c);
  cmp->add_option("--steps", steps, "timed steps")->capture_default_str();
  cmp->add_option("--warmup", warmup, "untimed first steps")->capture_default_str();
  cmp->add_flag("--no-alias-rows", no_alias_rows, "also run the compiled modes with aliasing off");
  bool unfused_rows = false, no_fuse = false, save_all_rows = false;
  cmp->add_flag("--unfused-rows", unfused_rows, "also run the compiled modes without fusion");
  cmp->add_flag("--save-all-rows", save_all_rows,
                "also run three_graph saving every value the backward reads (no recomputation)");

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

  app.set_version_flag("--version", [] { return "wholestep 0.1\n" + ws::backend_info(); });

  CLI11_PARSE(app, argc, argv);
  try {
    ws::set_num_threads(c.threads);
    if (!dp->parsed()) fmt::print("{}", ws::backend_info());  // what runs, before any figure
    if (tr->parsed()) return train(c, epochs, max_steps, mode);
    if (cmp->parsed()) return compare(c, steps, warmup, no_alias_rows, unfused_rows, save_all_rows);
    if (pr->parsed()) return profile(c, steps, mode, top, trace, no_fuse);
    if (dp->parsed()) return dump(c, mode, explain, dot, save_all);
  } catch (const ws::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
