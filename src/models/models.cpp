#include "wholestep/models.hpp"

#include <fmt/format.h>

namespace ws::models {

Mlp::Mlp(const std::vector<int64_t>& sizes) {
  if (sizes.size() < 2) throw Error("Mlp needs at least an input and an output width");
  for (size_t i = 0; i + 1 < sizes.size(); ++i)
    layers.push_back(register_module(fmt::format("fc{}", i + 1),
                                     std::make_shared<nn::Linear>(sizes[i], sizes[i + 1])));
}

Tensor Mlp::forward(const Tensor& x) {
  Tensor h = x.dim() == 2 ? x : x.reshape({x.size(0), x.numel() / x.size(0)});
  for (size_t i = 0; i < layers.size(); ++i) {
    h = (*layers[i])(h);
    if (i + 1 < layers.size()) h = relu(h);
  }
  return h;
}

Spec spec(const std::string& name) {
  if (name == "mlp") return Spec{"mlp", {784, 512, 512, 10}, 128};
  throw Error(fmt::format("unknown model '{}': this build knows 'mlp'", name));
}

std::unique_ptr<Mlp> make(const Spec& s) { return std::make_unique<Mlp>(s.sizes); }

}  // namespace ws::models
