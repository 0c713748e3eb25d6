// What `train` runs on the held-out data: the evaluation after epochs and at
// the end (ws::models::Evaluator, on the data the flags name), and gpt's
// generated sample (--sample).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "options.hpp"
#include "train_log.hpp"
#include "wholestep/wholestep.hpp"

namespace cli {

// The held-out evaluation of a run (ws::models::Evaluator): the
// Fashion-MNIST test set (loss and accuracy) or the text's last 10% (loss).
// Random data has none.
class HeldOut {
 public:
  // The held-out data is read here, before training, so a broken test set
  // stops nothing.
  HeldOut(const Common& c, const ws::models::Spec& spec, ws::models::Model& model);
  bool enabled() const { return eval_.has_value(); }
  // The metrics' name for the held-out part: "test" or "val".
  const char* split() const { return val_ ? "val" : "test"; }
  const std::optional<ws::data::ByteText>& val() const { return val_; }

  // A stop asked between two batches ends it (Interrupted).
  ws::models::EvalResult run();

 private:
  std::optional<ws::data::ByteText> val_;
  std::optional<ws::models::Evaluator> eval_;
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
