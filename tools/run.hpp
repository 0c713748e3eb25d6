// What a run trains: the model and optimizer the flags ask for, and the
// batches it trains on, step by step.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "options.hpp"
#include "wholestep/wholestep.hpp"

namespace cli {

// The model and optimizer of `c`, initialized from its seed.
ws::TrainSetup make_setup(const Common& c);

// The training batches of a model, step by step: Fashion-MNIST epochs,
// windows of a text, or random data.
class BatchSource {
 public:
  BatchSource(const Common& c, const ws::models::Spec& spec);
  // Batches per epoch (0: no epochs).
  int64_t epoch_steps() const { return fm_ ? fm_->size() / spec_.batch : 0; }
  std::vector<ws::Tensor> get(int64_t step);

 private:
  const Common& c_;
  ws::models::Spec spec_;
  std::optional<ws::data::FashionMnist> fm_;
  std::optional<ws::data::ByteText> text_;
  std::vector<std::vector<int64_t>> order_;
  std::optional<int64_t> epoch_;
};

}  // namespace cli
