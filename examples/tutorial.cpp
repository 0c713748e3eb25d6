// The program of docs/tutorial.md (the page shows it between the ANCHOR
// lines; a test checks both agree and runs it): a model of your own trained
// by one compiled step per batch, then the execution modes compared and the
// gradients checked against finite differences.
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include <wholestep/wholestep.hpp>

// ANCHOR: model
struct Classifier : ws::nn::Module {
  ws::nn::Linear fc1{16, 64}, fc2{64, 4};
  ws::nn::LayerNorm norm{64};
  Classifier() {
    register_module("fc1", fc1);
    register_module("norm", norm);
    register_module("fc2", fc2);
  }
  ws::Tensor forward(const ws::Tensor& x) { return fc2(ws::nn::gelu(norm(fc1(x)))); }
};

// The loss of a batch {points, labels}.
ws::LossFn loss_of(Classifier& model) {
  return [&model](const std::vector<ws::Tensor>& batch) {
    return ws::nn::cross_entropy(model.forward(batch[0]), batch[1]);
  };
}
// ANCHOR_END: model

// ANCHOR: data
// Batch i: 64 points of 16 features, each labelled by which of 4 fixed
// random directions it projects onto most.
std::vector<ws::Tensor> batch(int64_t i) {
  std::mt19937 directions(7), points(static_cast<uint32_t>(i));
  std::normal_distribution<float> normal;
  std::vector<float> d(4 * 16), x(64 * 16);
  for (float& v : d) v = normal(directions);
  for (float& v : x) v = normal(points);
  std::vector<int64_t> y(64);
  for (int n = 0; n < 64; ++n) {
    float best = -1e30f;
    for (int k = 0; k < 4; ++k) {
      float dot = 0;
      for (int j = 0; j < 16; ++j) dot += d[k * 16 + j] * x[n * 16 + j];
      if (dot > best) best = dot, y[n] = k;
    }
  }
  return {ws::Tensor::from_vector(x, {64, 16}), ws::Tensor::from_vector(y, {64})};
}
// ANCHOR_END: data

int main() {
  // ANCHOR: train
  ws::manual_seed(0);  // the initial weights
  Classifier model;
  ws::optim::AdamW opt(model, {.lr = 3e-3, .weight_decay = 0.01});
  ws::TrainStep step = ws::compile_train_step(model, opt, loss_of(model));
  const int64_t steps = 300;
  for (int64_t i = 0; i < steps; ++i) {
    opt.set_lr(3e-3 * double(steps - i) / double(steps));  // an input of the step: no retrace
    ws::StepResult r = step.run(batch(i));                 // forward, backward and AdamW, in place
    if (r.step % 100 == 0 || r.step == 1)
      std::printf("step %3lld  loss %.4f\n", (long long)r.step, r.loss);
  }
  std::printf("traced %lld time(s)\n", (long long)step.traces());
  // ANCHOR_END: train

  // ANCHOR: evaluate
  ws::Forward predict =
      ws::compile_forward(model, [&](const ws::Tensor& x) { return model.forward(x); });
  int64_t correct = 0, total = 0;
  for (int64_t i = 1000; i < 1010; ++i) {  // batches not trained on
    const std::vector<ws::Tensor> b = batch(i);
    const std::vector<double> logits = predict(b[0]).to_vector(), labels = b[1].to_vector();
    for (size_t n = 0; n < labels.size(); ++n, ++total) {
      size_t best = 0;
      for (size_t k = 1; k < 4; ++k) best = logits[n * 4 + k] > logits[n * 4 + best] ? k : best;
      correct += double(best) == labels[n];
    }
  }
  std::printf("held-out accuracy %.3f\n", double(correct) / double(total));
  // ANCHOR_END: evaluate

  // ANCHOR: compare
  auto setup = [] {  // a model and optimizer for each mode, from the same seed
    ws::manual_seed(0);
    auto m = std::make_unique<Classifier>();
    auto o = std::make_unique<ws::optim::AdamW>(
        *m, ws::optim::AdamOptions{.lr = 3e-3, .weight_decay = 0.01});
    ws::LossFn loss = loss_of(*m);
    return ws::TrainSetup{std::move(m), std::move(o), loss};
  };
  const std::vector<ws::CompareRow> rows = ws::compare_modes(
      setup, {{ws::StepMode::interpret}, {ws::StepMode::three_graph}, {ws::StepMode::single_graph}},
      batch, /*steps=*/100, /*warmup_steps=*/10);
  std::printf("%s", ws::format_comparison(rows).c_str());
  // ANCHOR_END: compare

  // ANCHOR: gradcheck
  const ws::check::GradcheckResult g = ws::check::gradcheck(model, loss_of(model), batch(0));
  std::printf("gradcheck %s: %lld elements, largest error %.1e\n", g.ok ? "ok" : "FAILED",
              (long long)g.checked, g.max_abs_error);
  std::printf("%s", g.report.c_str());
  return g.ok ? 0 : 1;
  // ANCHOR_END: gradcheck
}
