#include "run.hpp"

#include <fmt/format.h>

namespace cli {

using ws::models::DataKind;

std::vector<ws::Tensor> random_step_batch(const ws::models::Spec& spec, uint64_t seed,
                                          int64_t step) {
  return ws::models::random_batch(spec, seed * 1000003 + uint64_t(step));
}

BatchSource::BatchSource(const Common& c, const ws::models::Spec& spec) : c_(c), spec_(spec) {
  // Data that cannot be read is a usage error: nothing has run yet.
  if (spec.data == DataKind::fashion_mnist) {
    fm_.emplace(read_data("--data", c.data_dir,
                          [&] { return ws::data::FashionMnist("train", c.data_dir); }));
    if (fm_->size() < spec.batch)
      throw UsageError(
          fmt::format("--data {}: the training set holds {} examples, fewer than one batch of {}",
                      c.data_dir, fm_->size(), spec.batch));
  } else if (spec.data == DataKind::text) {
    text_.emplace(
        read_data("--text", c.text, [&] { return ws::data::ByteText(c.text).split("train"); }));
  }
}

std::vector<ws::Tensor> BatchSource::get(int64_t step) {
  if (fm_) {
    const int64_t epoch = step / epoch_steps(), i = step % epoch_steps();
    if (!epoch_ || *epoch_ != epoch) {
      order_ = fm_->epoch_indices(spec_.batch, c_.seed + uint64_t(epoch), /*drop_last=*/true);
      epoch_ = epoch;
    }
    ws::data::Batch b = fm_->batch(order_[size_t(i)]);
    return {b.images, b.labels};
  }
  if (text_) {
    ws::data::TextBatch b = text_->sample(spec_.batch, spec_.gpt.context, c_.seed, step);
    return {b.inputs, b.targets};
  }
  return random_step_batch(spec_, c_.seed, step);
}

}  // namespace cli
