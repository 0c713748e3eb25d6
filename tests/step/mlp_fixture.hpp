// A small MLP training setup shared by the step tests.
#pragma once

#include <vector>

#include "wholestep/wholestep.hpp"

namespace ws::testing {

struct SmallMlp {
  static constexpr int64_t kIn = 12, kClasses = 5, kBatch = 8;
  explicit SmallMlp(uint64_t seed, optim::SgdOptions sgd = {.lr = 0.1, .momentum = 0.9}) {
    manual_seed(seed);
    model = std::make_unique<models::Mlp>(std::vector<int64_t>{kIn, 16, 16, kClasses});
    opt = std::make_unique<optim::SGD>(*model, sgd);
  }
  LossFn loss_fn() {
    models::Mlp* m = model.get();
    return [m](const std::vector<Tensor>& d) { return nn::cross_entropy(m->forward(d[0]), d[1]); };
  }
  std::unique_ptr<models::Mlp> model;
  std::unique_ptr<optim::SGD> opt;
};

// `n` batches of random inputs and labels, the same for a given seed.
inline std::vector<std::vector<Tensor>> random_batches(int n, uint64_t seed) {
  manual_seed(seed);
  std::vector<std::vector<Tensor>> out;
  for (int i = 0; i < n; ++i) {
    Tensor x = randn({SmallMlp::kBatch, SmallMlp::kIn});
    std::vector<double> u =
        rand_uniform({SmallMlp::kBatch}, 0, double(SmallMlp::kClasses)).to_vector();
    std::vector<int64_t> y;
    for (double v : u) y.push_back(std::min<int64_t>(int64_t(v), SmallMlp::kClasses - 1));
    out.push_back({x, Tensor::from_vector(y, {SmallMlp::kBatch})});
  }
  return out;
}

}  // namespace ws::testing
