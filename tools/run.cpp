#include "run.hpp"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

namespace cli {

using ws::models::DataKind;

ws::TrainSetup make_setup(const Common& c) {
  ws::manual_seed(c.seed);
  const ws::models::Spec spec = ws::models::spec(c.model);
  ws::TrainSetup s;
  auto model = ws::models::make(spec);
  const std::string opt = optimizer_name(c);
  if (opt == "sgd") {
    s.opt = std::make_unique<ws::optim::SGD>(
        *model, ws::optim::SgdOptions{.lr = learning_rate(c),
                                      .momentum = c.momentum,
                                      .weight_decay = std::max(c.weight_decay, 0.0),
                                      .max_grad_norm = c.max_grad_norm});
  } else if (opt == "adam" || opt == "adamw") {
    ws::optim::AdamOptions o{.lr = learning_rate(c), .max_grad_norm = c.max_grad_norm};
    o.weight_decay = c.weight_decay >= 0 ? c.weight_decay : (opt == "adamw" ? 0.01 : 0.0);
    s.opt = std::make_unique<ws::optim::Adam>(*model, o, opt == "adamw");
  } else {
    throw ws::Error(fmt::format("unknown optimizer '{}': expected sgd, adam or adamw", opt));
  }
  s.loss_fn = ws::models::loss_fn(*model);
  s.model = std::move(model);
  return s;
}

BatchSource::BatchSource(const Common& c, const ws::models::Spec& spec) : c_(c), spec_(spec) {
  if (spec.data == DataKind::fashion_mnist) {
    fm_.emplace("train", c.data_dir);
    if (fm_->size() < spec.batch)
      throw UsageError(
          fmt::format("--data {}: the training set holds {} examples, fewer than one batch of {}",
                      c.data_dir, fm_->size(), spec.batch));
  } else if (spec.data == DataKind::text) {
    text_.emplace(ws::data::ByteText(c.text).split("train"));
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
  return ws::models::random_batch(spec_, c_.seed * 1000003 + uint64_t(step));
}

}  // namespace cli
