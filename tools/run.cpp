#include "run.hpp"

#include <fmt/format.h>

#include "group.hpp"
#include "wholestep/dist.hpp"

namespace cli {

using ws::models::DataKind;

std::vector<ws::Tensor> random_step_batch(const ws::models::Spec& spec, uint64_t seed,
                                          int64_t step) {
  return ws::models::random_batch(spec, seed * 1000003 + uint64_t(step));
}

ws::models::Spec global_spec(ws::models::Spec spec) {
  spec.batch *= ws::dist::world_size();
  return spec;
}

std::vector<ws::Tensor> rank_rows(const std::vector<ws::Tensor>& global) {
  std::vector<ws::Tensor> out;
  for (const ws::Tensor& t : global) {
    const ws::data::Shard s =
        ws::data::shard(t.shape()[0], ws::dist::rank(), ws::dist::world_size());
    out.push_back(ws::slice(t, 0, s.begin, s.end));  // the tensor itself when whole
  }
  return out;
}

BatchSource::BatchSource(const Common& c, const ws::models::Spec& spec)
    : c_(c), global_(global_spec(spec)) {
  // Data that cannot be read is a usage error: nothing has run yet.
  if (spec.data == DataKind::fashion_mnist) {
    fm_.emplace(read_data("--data", c.data_dir,
                          [&] { return ws::data::FashionMnist("train", c.data_dir); }));
    if (fm_->size() < global_.batch)
      throw UsageError(
          fmt::format("--data {}: the training set holds {} examples, fewer than one batch of {}",
                      c.data_dir, fm_->size(), batch_text(spec.batch)));
  } else if (spec.data == DataKind::text) {
    text_.emplace(
        read_data("--text", c.text, [&] { return ws::data::ByteText(c.text).split("train"); }));
  }
}

std::vector<ws::Tensor> BatchSource::get(int64_t step) {
  if (fm_) {
    // Every rank shuffles the epoch alike (the same seed) and reads its own
    // part of each global batch.
    const int64_t epoch = step / epoch_steps(), i = step % epoch_steps();
    if (!epoch_ || *epoch_ != epoch) {
      order_ = fm_->epoch_indices(global_.batch, c_.seed + uint64_t(epoch), /*drop_last=*/true);
      epoch_ = epoch;
    }
    const std::vector<int64_t>& global = order_[size_t(i)];
    const ws::data::Shard s =
        ws::data::shard(int64_t(global.size()), ws::dist::rank(), ws::dist::world_size());
    ws::data::Batch b = fm_->batch(std::span(global).subspan(size_t(s.begin), size_t(s.size())));
    return {b.images, b.labels};
  }
  if (text_) {
    ws::data::TextBatch b = text_->sample(global_.batch, global_.gpt.context, c_.seed, step);
    return rank_rows({b.inputs, b.targets});
  }
  return rank_rows(random_step_batch(global_, c_.seed, step));
}

}  // namespace cli
