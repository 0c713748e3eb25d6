// Held-out evaluation of a reference model: its loss (and a classifier's
// accuracy) on data it does not train on, as a training run reports it
// after epochs and at the end.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "wholestep/data.hpp"
#include "wholestep/models.hpp"
#include "wholestep/step.hpp"

namespace ws::models {

struct EvalResult {
  double loss = 0;                 // mean cross-entropy
  std::optional<double> accuracy;  // a classifier's: the fraction whose top logit is the label
};

// Evaluates `model` through a forward compiled at the first run (eval mode:
// BatchNorm's running statistics, no dropout) that shares the model's
// storage, so each run sees the parameters as trained so far, with no copy.
class Evaluator {
 public:
  // A classifier (mlp, cnn) on a labelled set: the cross-entropy (in f64 from
  // the logits) and the accuracy over every example, in batches of 500. An
  // empty set throws ws::Error.
  Evaluator(Model& model, data::FashionMnist test);
  // A language model (gpt) on a held-out text: the mean of Model::loss over
  // 20 batches of `batch` windows of `context` bytes, drawn with a fixed
  // seed (the same windows every run).
  Evaluator(Model& model, data::ByteText text, int64_t batch, int64_t context);

  // The model evaluated as it is now. `stop` (when set) is asked before each
  // batch: true ends the evaluation there, and nothing is returned.
  std::optional<EvalResult> run(const std::function<bool()>& stop = {});

 private:
  std::optional<EvalResult> classify(const std::function<bool()>& stop);
  std::optional<EvalResult> text_loss(const std::function<bool()>& stop);

  Model& model_;
  std::optional<data::FashionMnist> test_;
  std::optional<data::ByteText> text_;
  int64_t batch_ = 0, context_ = 0;
  std::optional<Forward> fwd_;
};

}  // namespace ws::models
