// Held-out evaluation (wholestep/evaluate.hpp): a labelled set's mean
// cross-entropy and accuracy from the logits, or a text's mean loss over
// fixed windows.
#include "wholestep/evaluate.hpp"

#include <algorithm>
#include <cmath>

#include "wholestep/error.hpp"

namespace ws::models {

Evaluator::Evaluator(Model& model, data::FashionMnist test)
    : model_(model), test_(std::move(test)) {
  if (test_->size() == 0) throw Error("Evaluator: the test set holds no examples");
}

Evaluator::Evaluator(Model& model, data::ByteText text, int64_t batch, int64_t context)
    : model_(model), text_(std::move(text)), batch_(batch), context_(context) {}

std::optional<EvalResult> Evaluator::run(const std::function<bool()>& stop) {
  return test_ ? classify(stop) : text_loss(stop);
}

std::optional<EvalResult> Evaluator::classify(const std::function<bool()>& stop) {
  if (!fwd_) fwd_.emplace(compile_forward(model_, [&m = model_](const Tensor& x) { return m(x); }));
  int64_t correct = 0;
  double loss = 0;
  for (const data::Batch& b : test_->batches(500, 0)) {
    if (stop && stop()) return std::nullopt;
    Tensor logits = (*fwd_)(b.images);
    const float* z = logits.data<float>();
    const int64_t* y = b.labels.data<int64_t>();
    const int64_t n = logits.size(0), k = logits.size(1);
    for (int64_t i = 0; i < n; ++i, z += k) {
      const float* top = std::max_element(z, z + k);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += std::exp(double(z[j]) - double(*top));
      loss += double(*top) + std::log(sum) - double(z[y[i]]);
      correct += top - z == y[i];
    }
  }
  const double n = double(test_->size());
  return EvalResult{.loss = loss / n, .accuracy = double(correct) / n};
}

std::optional<EvalResult> Evaluator::text_loss(const std::function<bool()>& stop) {
  if (!fwd_)
    fwd_.emplace(compile_forward(
        model_, [&m = model_](const Tensor& x, const Tensor& y) { return m.loss(x, y); }));
  const int batches = 20;
  double total = 0;
  for (int i = 0; i < batches; ++i) {
    if (stop && stop()) return std::nullopt;
    data::TextBatch b = text_->sample(batch_, context_, 12345, i);
    total += (*fwd_)(b.inputs, b.targets).item();
  }
  return EvalResult{.loss = total / batches, .accuracy = std::nullopt};
}

}  // namespace ws::models
