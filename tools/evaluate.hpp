// What `train` runs on the held-out data: the evaluation after epochs and at
// the end, and gpt's generated sample (--sample).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "options.hpp"
#include "train_log.hpp"
#include "wholestep/wholestep.hpp"

namespace cli {

// The held-out evaluation of a run: the Fashion-MNIST test set (loss and
// accuracy) or 20 batches of windows of the text's last 10% (loss), through
// a forward compiled once that shares the trained parameters' storage.
// Random data has none.
class Evaluator {
 public:
  struct Result {
    double loss = 0;
    std::optional<double> accuracy;
  };

  // The held-out data is read here, before training, so a broken test set
  // stops nothing.
  Evaluator(const Common& c, const ws::models::Spec& spec, ws::models::Model& model);
  bool enabled() const { return test_ || val_; }
  // The metrics' name for the held-out part: "test" or "val".
  const char* split() const { return test_ ? "test" : "val"; }
  const std::optional<ws::data::ByteText>& val() const { return val_; }

  Result run() {
    return test_ ? classify() : Result{.loss = text_loss(), .accuracy = std::nullopt};
  }

 private:
  // Mean cross-entropy (in f64 from the logits) and accuracy over the test set.
  Result classify();
  // The mean loss over 20 batches of the validation text.
  double text_loss();

  ws::models::Spec spec_;
  ws::models::Model& model_;
  std::optional<ws::data::FashionMnist> test_;
  std::optional<ws::data::ByteText> val_;
  std::optional<ws::Forward> fwd_;
};

// --sample: what to generate and how.
struct SampleRequest {
  int64_t bytes = 0;
  double temperature = 0;             // 0: the likeliest byte; > 0: drawn, seeded by `seed`
  std::optional<std::string> prompt;  // default: from the validation text
  uint64_t seed = 0;
};

// --sample: text the trained model generates after a prompt (--prompt, or
// from the validation text), printed and written to the metrics. The prompt
// is printed (and flushed) first; a stop asked while generating ends it
// between two bytes (Interrupted, after `phase` says how far it got).
void print_sample(ws::models::Model& model, const SampleRequest& f, const ws::data::ByteText& val,
                  int64_t step, MetricsLog& metrics, std::string& phase);

}  // namespace cli
