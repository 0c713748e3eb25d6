// Step benchmarks: each reference model trained in each mode on a fixed
// random batch. Run: build/benchmarks/step_bench --benchmark_repetitions=5
// Google Benchmark runs each configuration's steps back to back; for a
// same-run, round-robin comparison use `wholestep compare`.
#include <benchmark/benchmark.h>

#include "wholestep/wholestep.hpp"

namespace {

void BM_Step(benchmark::State& state) {
  const std::string name = ws::models::names()[size_t(state.range(0))];
  const auto mode = ws::StepMode(state.range(1));
  const bool aliasing = state.range(2);
  ws::manual_seed(0);
  const ws::models::Spec spec = ws::models::spec(name);
  auto model = ws::models::make(spec);
  std::unique_ptr<ws::optim::Optimizer> opt;
  if (spec.optimizer == "sgd")
    opt = std::make_unique<ws::optim::SGD>(*model,
                                           ws::optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  else
    opt = std::make_unique<ws::optim::Adam>(*model, ws::optim::AdamOptions{.lr = 1e-3},
                                            spec.optimizer == "adamw");
  ws::TrainStep step(*model, *opt, ws::models::loss_fn(*model),
                     {.mode = mode, .aliasing = aliasing});
  const std::vector<ws::Tensor> batch = ws::models::random_batch(spec, 0);
  step.run(batch);  // trace and compile outside the timed loop
  for (auto _ : state) benchmark::DoNotOptimize(step.run(batch).loss);
  state.SetLabel(name + " " + ws::mode_name(mode) + (aliasing ? "" : " no-alias"));
}

void Configs(benchmark::internal::Benchmark* b) {
  for (int model = 0; model < int(ws::models::names().size()); ++model) {
    for (auto mode : {ws::StepMode::single_graph, ws::StepMode::three_graph})
      for (int aliasing : {1, 0}) b->Args({model, int(mode), aliasing});
    b->Args({model, int(ws::StepMode::interpret), 1});
  }
}

BENCHMARK(BM_Step)->Apply(Configs)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
