// Step benchmarks: the reference MLP trained in each mode on fixed random
// batches. Run: build/benchmarks/step_bench --benchmark_repetitions=5
// Google Benchmark runs each mode's steps back to back; for a same-run,
// round-robin comparison use `wholestep compare`.
#include <benchmark/benchmark.h>

#include "wholestep/wholestep.hpp"

namespace {

void BM_MlpStep(benchmark::State& state) {
  const auto mode = ws::StepMode(state.range(0));
  const bool aliasing = state.range(1);
  ws::manual_seed(0);
  const ws::models::Spec spec = ws::models::spec("mlp");
  auto model = ws::models::make(spec);
  ws::optim::SGD opt(*model, {.lr = 0.01, .momentum = 0.9});
  auto* m = model.get();
  ws::TrainStep step = ws::compile_train_step(*model, opt,
                                              [m](const ws::Tensor& x, const ws::Tensor& y) {
                                                return ws::nn::cross_entropy(m->forward(x), y);
                                              },
                                              {.mode = mode, .aliasing = aliasing});
  ws::Tensor x = ws::randn({spec.batch, spec.sizes[0]});
  std::vector<int64_t> labels(size_t(spec.batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i % 10);
  ws::Tensor y = ws::Tensor::from_vector(labels, {spec.batch});
  step(x, y);  // trace and compile outside the timed loop
  for (auto _ : state) benchmark::DoNotOptimize(step(x, y).loss);
  state.SetLabel(std::string(ws::mode_name(mode)) + (aliasing ? "" : " no-alias"));
}

BENCHMARK(BM_MlpStep)
    ->Args({int(ws::StepMode::single_graph), 1})
    ->Args({int(ws::StepMode::three_graph), 1})
    ->Args({int(ws::StepMode::single_graph), 0})
    ->Args({int(ws::StepMode::three_graph), 0})
    ->Args({int(ws::StepMode::interpret), 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
