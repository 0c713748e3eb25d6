// What a run trains on: the batches of a model's data, step by step (the
// model and optimizer come from make_setup in options.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "options.hpp"
#include "wholestep/wholestep.hpp"

namespace cli {

// The random batch of step `step` of a run seeded with `seed` (tiny_mlp's
// data, and what `check` trains the modes on).
std::vector<ws::Tensor> random_step_batch(const ws::models::Spec& spec, uint64_t seed,
                                          int64_t step);

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
