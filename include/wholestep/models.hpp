// The reference models, defined once and used by tests, benchmarks, examples
// and the command line.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "wholestep/nn.hpp"

namespace ws::models {

// Linear layers of the given widths with ReLU between them; the input is
// flattened to [B, sizes[0]].
class Mlp : public nn::Module {
 public:
  explicit Mlp(const std::vector<int64_t>& sizes);
  Tensor forward(const Tensor& x);
  std::vector<std::shared_ptr<nn::Linear>> layers;
};

// A model ready to train: its batch shape and a loss over (input, labels).
struct Spec {
  std::string name;
  std::vector<int64_t> sizes;  // for Mlp
  int64_t batch = 0;
};

// "mlp": 784-512-512-10, batch 128. Throws ws::Error for unknown names.
Spec spec(const std::string& name);
std::unique_ptr<Mlp> make(const Spec& s);

}  // namespace ws::models
