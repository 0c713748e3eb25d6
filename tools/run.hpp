// What a run trains on: the batches of a model's data, step by step (the
// model and optimizer come from make_setup in options.hpp). In a
// data-parallel run every rank draws the same global batch, the model's
// batch times the ranks, and takes its own rows of it (ws::data::shard).
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

// `spec` with its batch the global one: the model's (per-rank) batch times
// the ranks of the process group.
ws::models::Spec global_spec(ws::models::Spec spec);
// This rank's rows of a global batch (all of it in a group of one).
std::vector<ws::Tensor> rank_rows(const std::vector<ws::Tensor>& global);

// The training batches of a model, step by step: Fashion-MNIST epochs,
// windows of a text, or random data; this rank's part of each global batch.
class BatchSource {
 public:
  BatchSource(const Common& c, const ws::models::Spec& spec);
  // Global batches per epoch, the last short one dropped (0: no epochs).
  int64_t epoch_steps() const { return fm_ ? fm_->size() / global_.batch : 0; }
  std::vector<ws::Tensor> get(int64_t step);

 private:
  const Common& c_;
  ws::models::Spec global_;
  std::optional<ws::data::FashionMnist> fm_;
  std::optional<ws::data::ByteText> text_;
  std::vector<std::vector<int64_t>> order_;
  std::optional<int64_t> epoch_;
};

}  // namespace cli
