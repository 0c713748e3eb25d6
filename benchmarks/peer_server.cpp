// The wholestep side of the PyTorch comparison (benchmarks/pytorch_compare.py).
//
// Builds every reference model as step_bench does (SGD lr 0.01 momentum 0.9
// for the sgd models, Adam lr 1e-3 for adam, AdamW lr 1e-3 with its default
// weight decay 0.01 for adamw; the batch ws::models::random_batch(spec, 0)),
// one compiled TrainStep per (model, mode) for three_graph and single_graph,
// each run once before it answers, then answers one command per line on
// stdin. Every answer ends with a line "ok" or "error <message>".
//
//   info                          backend_info() lines, then "threads N"
//   models                        "model <name> batch=... optimizer=... lr=...": one per model
//   params <model>                "param <name> <shape>", "buffer <name> <shape>", "total <n>"
//   run <model> <mode> <steps>    "times <ms> ...", "flops <per step>", "loss <last>"
//   profile <model> <mode> <steps>
//                                 "step_ms", "contraction_ms", "kernel <name> <calls> <ms> <flops>"
//   export <model> <file> <steps> a fresh model (dropout 0, seed 0), its parameters, buffers and
//                                 batch written to <file>; then "loss <mode> <l1> ..." for both
//                                 modes, each from the same initial values over <steps> steps
//   quit
//
// Run: build/benchmarks/peer_server [--threads N] [--models mlp,cnn,mlp:adam]
// ("<model>:<optimizer>" runs a model with another optimizer than its own).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "wholestep/wholestep.hpp"

namespace {

const std::vector<ws::StepMode> kModes = {ws::StepMode::three_graph, ws::StepMode::single_graph};

// A model by name; "<model>:<optimizer>" (mlp:adam) runs it with another
// optimizer than its own.
ws::models::Spec model_spec(const std::string& name) {
  const size_t colon = name.find(':');
  ws::models::Spec spec = ws::models::spec(name.substr(0, colon));
  if (colon != std::string::npos) {
    spec.optimizer = name.substr(colon + 1);
    if (spec.optimizer != "sgd" && spec.optimizer != "adam" && spec.optimizer != "adamw")
      throw ws::Error(fmt::format("model '{}': unknown optimizer '{}' (sgd, adam or adamw)", name,
                                  spec.optimizer));
  }
  return spec;
}

// The benchmark optimizer of a model: step_bench's choice, with AdamW's own
// default weight decay.
std::unique_ptr<ws::optim::Optimizer> make_optimizer(const ws::models::Spec& spec,
                                                     ws::nn::Module& model) {
  if (spec.optimizer == "sgd")
    return std::make_unique<ws::optim::SGD>(model,
                                            ws::optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  if (spec.optimizer == "adamw") {
    ws::optim::AdamOptions o = ws::optim::AdamW::defaults();
    o.lr = 1e-3;
    return std::make_unique<ws::optim::AdamW>(model, o);
  }
  return std::make_unique<ws::optim::Adam>(model, ws::optim::AdamOptions{.lr = 1e-3});
}

// "lr=0.01 momentum=0.9 weight_decay=0": the optimizer's hyperparameters.
std::string optimizer_text(const ws::optim::Optimizer& opt) {
  if (auto* a = dynamic_cast<const ws::optim::Adam*>(&opt))
    return fmt::format("lr={} beta1={} beta2={} eps={} weight_decay={}", a->lr(),
                       a->options().beta1, a->options().beta2, a->options().eps,
                       a->options().weight_decay);
  auto& s = dynamic_cast<const ws::optim::SGD&>(opt);
  return fmt::format("lr={} momentum={} weight_decay={} dampening={} nesterov={}", s.lr(),
                     s.options().momentum, s.options().weight_decay, s.options().dampening,
                     int(s.options().nesterov));
}

// One model with its optimizer, batch and a compiled step per mode. The modes
// share the model, so each one's steps continue the same training run.
struct Entry {
  std::string label;  // the name it was asked for ("mlp:adam")
  ws::models::Spec spec;
  std::unique_ptr<ws::models::Model> model;
  std::unique_ptr<ws::optim::Optimizer> opt;
  std::vector<ws::Tensor> batch;
  std::map<ws::StepMode, ws::TrainStep> steps;
};

Entry make_entry(const std::string& name) {
  Entry e;
  ws::manual_seed(0);
  e.label = name;
  e.spec = model_spec(name);
  e.model = ws::models::make(e.spec);
  e.opt = make_optimizer(e.spec, *e.model);
  e.batch = ws::models::random_batch(e.spec, 0);
  for (ws::StepMode mode : kModes) {
    ws::TrainStep step(*e.model, *e.opt, ws::models::loss_fn(*e.model), {.mode = mode});
    step.run(e.batch);  // trace and compile before anything is timed
    e.steps.emplace(mode, std::move(step));
  }
  return e;
}

std::string shape_text(const ws::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.shape(), ","));
}

// One line of key=value pairs: everything the PyTorch side needs to build the
// same model, optimizer and batch shapes.
std::string describe(const Entry& e) {
  const ws::models::Spec& s = e.spec;
  std::string line =
      fmt::format("model {} batch={} optimizer={} {} x={} y={}", e.label, s.batch, s.optimizer,
                  optimizer_text(*e.opt), e.batch[0].str(), e.batch[1].str());
  if (!s.sizes.empty()) line += fmt::format(" sizes={}", fmt::join(s.sizes, ","));
  if (s.data == ws::models::DataKind::text)
    line += fmt::format(
        " vocab={} context={} d_model={} heads={} layers={} mlp_ratio={} dropout={}", s.gpt.vocab,
        s.gpt.context, s.gpt.d_model, s.gpt.heads, s.gpt.layers, s.gpt.mlp_ratio, s.gpt.dropout);
  return line;
}

void print_params(const Entry& e) {
  int64_t total = 0;
  for (const auto& [name, t] : e.model->named_parameters()) {
    fmt::print("param {} {}\n", name, shape_text(t));
    total += t.numel();
  }
  for (const auto& [name, t] : e.model->named_buffers())
    fmt::print("buffer {} {}\n", name, shape_text(t));
  fmt::print("total {}\n", total);
}

void run_steps(Entry& e, ws::StepMode mode, int steps) {
  ws::TrainStep& step = e.steps.at(mode);
  std::vector<double> ms;
  ws::StepResult r;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    r = step.run(e.batch);
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  fmt::print("times {:.5f}\n", fmt::join(ms, " "));
  fmt::print("flops {}\n", r.counters.flops);
  fmt::print("loss {:.6f}\n", r.loss);
}

void profile_steps(Entry& e, ws::StepMode mode, int steps) {
  const ws::StepProfile p = e.steps.at(mode).profile(e.batch, steps);
  fmt::print("step_ms {:.5f}\ncontraction_ms {:.5f}\n", p.step_ms, p.contraction_ms);
  for (const ws::KernelTime& k : p.kernels)
    fmt::print("kernel {} {} {:.5f} {}\n", k.name, k.calls, k.ms, k.flops);
}

// Writes one tensor as a text header line "<kind> <name> <dtype> <shape>
// <bytes>" followed by its raw little-endian values.
void write_tensor(std::ofstream& out, const char* kind, const std::string& name,
                  const ws::Tensor& t) {
  out << fmt::format("{} {} {} {} {}\n", kind, name, ws::dtype_name(t.dtype()), shape_text(t),
                     t.nbytes());
  const char* data = t.dtype() == ws::DType::i64 ? reinterpret_cast<const char*>(t.data<int64_t>())
                                                 : reinterpret_cast<const char*>(t.data<float>());
  out.write(data, std::streamsize(t.nbytes()));
}

// The numerical check: a fresh model without dropout (so both sides compute
// the same function), written out with its batch, then trained from the same
// initial values in each mode.
void export_model(const std::string& name, const std::string& path, int steps) {
  ws::models::Spec spec = model_spec(name);
  spec.gpt.dropout = 0;
  const std::vector<ws::Tensor> batch = ws::models::random_batch(spec, 0);
  bool written = false;
  for (ws::StepMode mode : kModes) {
    ws::manual_seed(0);
    auto model = ws::models::make(spec);
    auto opt = make_optimizer(spec, *model);
    if (!written) {
      std::ofstream out(path, std::ios::binary);
      for (const auto& [n, t] : model->named_parameters()) write_tensor(out, "param", n, t);
      for (const auto& [n, t] : model->named_buffers()) write_tensor(out, "buffer", n, t);
      write_tensor(out, "input", "x", batch[0]);
      write_tensor(out, "input", "y", batch[1]);
      if (!out) throw ws::Error("cannot write " + path);
      written = true;
    }
    ws::TrainStep step(*model, *opt, ws::models::loss_fn(*model), {.mode = mode});
    std::vector<double> losses;
    for (int i = 0; i < steps; ++i) losses.push_back(step.run(batch).loss);
    fmt::print("loss {} {:.7g}\n", ws::mode_name(mode), fmt::join(losses, " "));
  }
}

// Answers one command line; returns false on "quit".
bool answer(std::map<std::string, Entry>& entries, const std::string& line) {
  std::istringstream in(line);
  std::string cmd, model, arg;
  in >> cmd >> model >> arg;
  int steps = 0;
  in >> steps;
  auto entry = [&]() -> Entry& {
    auto it = entries.find(model);
    if (it == entries.end()) throw ws::Error(fmt::format("model '{}' is not loaded", model));
    return it->second;
  };
  if (cmd == "quit") return false;
  if (cmd == "info") {
    std::string info = ws::backend_info();
    while (!info.empty() && info.back() == '\n') info.pop_back();
    fmt::print("{}\n", info);
    fmt::print("threads {}\n", ws::num_threads());
  } else if (cmd == "models") {
    for (const auto& [name, e] : entries) fmt::print("{}\n", describe(e));
  } else if (cmd == "params") {
    print_params(entry());
  } else if (cmd == "run" || cmd == "profile") {
    const ws::StepMode mode = ws::parse_mode(arg);
    if (mode == ws::StepMode::interpret || steps <= 0)
      throw ws::Error("expected: " + cmd + " <model> three_graph|single_graph <steps>");
    if (cmd == "run")
      run_steps(entry(), mode, steps);
    else
      profile_steps(entry(), mode, steps);
  } else if (cmd == "export") {
    if (arg.empty() || steps <= 0) throw ws::Error("expected: export <model> <file> <steps>");
    export_model(model, arg, steps);
  } else {
    throw ws::Error(fmt::format("unknown command '{}'", cmd));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wholestep side of the PyTorch eager comparison: answers commands on stdin"};
  int threads = 0;
  std::string models = "mlp,tiny_mlp,cnn,gpt";
  app.add_option("--threads", threads, "threads (0: all cores)")->capture_default_str();
  app.add_option("--models", models, "models to build, comma-separated")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::map<std::string, Entry> entries;
  try {
    ws::set_num_threads(threads);
    std::istringstream list(models);
    for (std::string name; std::getline(list, name, ',');)
      if (!name.empty()) entries.emplace(name, make_entry(name));
  } catch (const std::exception& e) {
    fmt::print(stderr, "peer_server: {}\n", e.what());
    return 1;
  }
  fmt::print("ready\n");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    bool more = true;
    try {
      more = answer(entries, line);
      fmt::print("ok\n");
    } catch (const std::exception& e) {
      std::string msg = e.what();
      std::replace(msg.begin(), msg.end(), '\n', ' ');
      fmt::print("error {}\n", msg);
    }
    std::fflush(stdout);
    if (!more) break;
  }
  return 0;
}
