// The wholestep command line: train a reference model, compare the modes,
// print the compiled graphs.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "wholestep/wholestep.hpp"

namespace {

struct Common {
  std::string model = "mlp";
  std::string data_dir = ws::data::kFashionMnistDir;
  uint64_t seed = 0;
  double lr = 0.05, momentum = 0.9, weight_decay = 0;
  int threads = 0;
};

void add_common(CLI::App* app, Common& c) {
  app->add_option("--model", c.model, "reference model")->capture_default_str();
  app->add_option("--data", c.data_dir, "Fashion-MNIST directory")->capture_default_str();
  app->add_option("--seed", c.seed, "initialization and shuffle seed")->capture_default_str();
  app->add_option("--lr", c.lr, "SGD learning rate")->capture_default_str();
  app->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  app->add_option("--weight-decay", c.weight_decay, "SGD weight decay")->capture_default_str();
  app->add_option("--threads", c.threads, "threads (0: all cores)")->capture_default_str();
}

ws::TrainSetup make_setup(const Common& c) {
  ws::manual_seed(c.seed);
  ws::TrainSetup s;
  auto model = ws::models::make(ws::models::spec(c.model));
  ws::models::Mlp* m = model.get();
  s.opt = std::make_unique<ws::optim::SGD>(
      *model,
      ws::optim::SgdOptions{.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay});
  s.loss_fn = [m](const std::vector<ws::Tensor>& d) {
    return ws::nn::cross_entropy(m->forward(d[0]), d[1]);
  };
  s.model = std::move(model);
  return s;
}

double accuracy(ws::models::Mlp& model, const ws::data::FashionMnist& test) {
  int64_t correct = 0;
  for (const ws::data::Batch& b : test.batches(1000, 0)) {
    ws::Tensor logits = model.forward(b.images);
    const float* z = logits.data<float>();
    const int64_t* y = b.labels.data<int64_t>();
    const int64_t n = logits.size(0), k = logits.size(1);
    for (int64_t i = 0; i < n; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < k; ++j)
        if (z[i * k + j] > z[i * k + best]) best = j;
      correct += best == y[i];
    }
  }
  return double(correct) / double(test.size());
}

int train(const Common& c, int epochs, const std::string& mode, int64_t max_steps) {
  ws::data::FashionMnist train_set("train", c.data_dir), test_set("test", c.data_dir);
  ws::TrainSetup s = make_setup(c);
  auto& model = static_cast<ws::models::Mlp&>(*s.model);
  const int64_t batch = ws::models::spec(c.model).batch;
  ws::TrainStep step(model, *s.opt, s.loss_fn, {.mode = ws::parse_mode(mode)});
  fmt::print(
      "training {} on Fashion-MNIST: {} epoch(s), batch {}, SGD lr {} momentum {}, mode {}\n",
      c.model, epochs, batch, c.lr, c.momentum, mode);
  auto t0 = std::chrono::steady_clock::now();
  int64_t steps = 0;
  double loss = 0;
  for (int e = 0; e < epochs; ++e) {
    for (const ws::data::Batch& b :
         train_set.batches(batch, c.seed + uint64_t(e), /*drop_last=*/true)) {
      ws::StepResult r = step(b.images, b.labels);
      loss = r.loss;
      if (++steps % 50 == 0 || steps == 1) {
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fmt::print("step {:5d}  epoch {}  loss {:.4f}  {:.1f} steps/s\n", steps, e + 1, loss,
                   double(steps) / secs);
      }
      if (max_steps > 0 && steps >= max_steps) break;
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("trained {} steps in {:.1f} s ({:.2f} ms/step), final loss {:.4f}, traces {}\n", steps,
             secs, 1000 * secs / double(steps), loss, step.traces());
  fmt::print("test accuracy: {:.4f}\n", accuracy(model, test_set));
  return 0;
}

int compare(const Common& c, int64_t steps, int64_t warmup, bool no_alias_rows) {
  ws::data::FashionMnist train_set("train", c.data_dir);
  const int64_t batch = ws::models::spec(c.model).batch;
  std::vector<std::vector<ws::Tensor>> batches;
  for (const ws::data::Batch& b : train_set.batches(batch, c.seed, true)) {
    if (int64_t(batches.size()) >= steps + warmup) break;
    batches.push_back({b.images, b.labels});
  }
  std::vector<ws::CompareConfig> configs = {
      {ws::StepMode::interpret}, {ws::StepMode::three_graph}, {ws::StepMode::single_graph}};
  if (no_alias_rows) {
    configs.push_back({ws::StepMode::three_graph, false});
    configs.push_back({ws::StepMode::single_graph, false});
  }
  fmt::print(
      "comparing modes on {} (batch {}, SGD momentum): {} timed steps after {} warm-up, "
      "round robin, median ms/step; max diff is parameters vs interpret after the last step\n",
      c.model, batch, steps, warmup);
  auto rows = ws::compare_modes([&] { return make_setup(c); }, configs, batches, warmup);
  fmt::print("{}", ws::format_comparison(rows));
  return 0;
}

int dump(const Common& c, const std::string& mode) {
  ws::TrainSetup s = make_setup(c);
  const ws::models::Spec spec = ws::models::spec(c.model);
  ws::TrainStep step(*s.model, *s.opt, s.loss_fn, {.mode = ws::parse_mode(mode)});
  step(ws::Tensor::zeros({spec.batch, spec.sizes[0]}),
       ws::Tensor::zeros({spec.batch}, ws::DType::i64));
  fmt::print("{}\n{}", step.graphs_text(), step.programs_text());
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

  auto* tr = app.add_subcommand("train", "train a model on Fashion-MNIST and report test accuracy");
  add_common(tr, c);
  tr->add_option("--epochs", epochs, "epochs")->capture_default_str();
  tr->add_option("--mode", mode, "interpret | three_graph | single_graph")->capture_default_str();
  tr->add_option("--max-steps", max_steps, "stop after this many steps (0: no limit)");

  auto* cmp =
      app.add_subcommand("compare", "train in every mode and compare time, memory, agreement");
  add_common(cmp, c);
  cmp->add_option("--steps", steps, "timed steps")->capture_default_str();
  cmp->add_option("--warmup", warmup, "untimed first steps")->capture_default_str();
  cmp->add_flag("--no-alias-rows", no_alias_rows, "also run the compiled modes with aliasing off");

  auto* dp = app.add_subcommand("dump", "print the compiled graphs and programs");
  add_common(dp, c);
  dp->add_option("--mode", mode, "interpret | three_graph | single_graph")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    ws::set_num_threads(c.threads);
    if (tr->parsed()) return train(c, epochs, mode, max_steps);
    if (cmp->parsed()) return compare(c, steps, warmup, no_alias_rows);
    if (dp->parsed()) return dump(c, mode);
  } catch (const ws::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
