// A program using the installed wholestep: a small classifier of its own,
// compiled into one training step and trained on synthetic data. Prints the
// loss before and after; exit status 1 if it did not fall.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include <wholestep/wholestep.hpp>

namespace {

constexpr int64_t kFeatures = 8, kClasses = 4, kBatch = 64, kBatches = 4, kEpochs = 10;

struct Classifier : ws::nn::Module {
  ws::nn::Linear hidden{kFeatures, 32}, out{32, kClasses};
  Classifier() {
    register_module("hidden", hidden);
    register_module("out", out);
  }
  ws::Tensor forward(const ws::Tensor& x) { return out(ws::tanh(hidden(x))); }
};

struct Batch {
  ws::Tensor x, y;
};

// Random features; the class is the quadrant of the first two.
Batch synthetic_batch() {
  ws::Tensor x = ws::randn({kBatch, kFeatures});
  const float* v = x.data<float>();
  std::vector<int64_t> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) {
    labels[i] = (v[i * kFeatures] > 0) + 2 * (v[i * kFeatures + 1] > 0);
  }
  return {x, ws::Tensor::from_vector(labels, {kBatch})};
}

}  // namespace

int main() try {
  ws::manual_seed(0);
  Classifier model;
  ws::optim::Adam opt(model, {.lr = 1e-2});
  auto step = ws::compile_train_step(model, opt, [&](const ws::Tensor& x, const ws::Tensor& y) {
    return ws::nn::cross_entropy(model.forward(x), y);
  });
  std::vector<Batch> data;
  for (int64_t b = 0; b < kBatches; ++b) data.push_back(synthetic_batch());

  double first = 0, last = 0;  // mean loss over the batches of the first and last epochs
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    double sum = 0;
    for (const Batch& b : data) sum += step(b.x, b.y).loss;
    if (epoch == 0) first = sum / kBatches;
    last = sum / kBatches;
  }
  std::printf("consumer: loss %.4f -> %.4f in %lld steps\n", first, last,
              (long long)opt.step_count());
  if (!(last < first)) {
    std::fprintf(stderr, "consumer: the loss did not fall (%.4f -> %.4f)\n", first, last);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
