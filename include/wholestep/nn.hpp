// Modules, layers and losses, in the spirit of PyTorch's C++ frontend.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wholestep/tensor.hpp"

namespace ws::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A Module owns parameters and buffers and has child modules. Children
// registered by reference (members of the parent) are not owned; a Module is
// therefore neither copyable nor movable.
class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M>
  M& register_module(const std::string& name, M& m) {
    add_child(name, &m, nullptr);
    return m;
  }
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m.get(), m);
    return m;
  }

  // Recursive, in registration order, named by module path ("fc1.weight").
  // A tensor registered under two names (tied) is listed once, first name.
  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

 private:
  void add_child(const std::string& name, Module* m, std::shared_ptr<Module> owned);
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;
  NamedTensors params_, buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::vector<std::shared_ptr<Module>> owned_;
  bool training_ = true;
};

// A module with one input and one output: what Sequential chains.
class Layer : public Module {
 public:
  virtual Tensor forward(const Tensor& x, Loc loc = Loc::current()) = 0;
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) { return forward(x, loc); }
};

// y = x Wᵀ + b, with W stored [out, in] and PyTorch's default initialization:
// W and b uniform in ±1/sqrt(in).
class Linear : public Layer {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias;
  int64_t in_features, out_features;
};

// 2-d convolution over NCHW input, as torch.nn.Conv2d: weight
// [out, in/groups, k, k] and bias uniform in ±1/sqrt(in/groups·k·k).
struct Conv2dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};
class Conv2d : public Layer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions opts = {});
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size;
  Conv2dOptions opts;
};

// Batch normalization over [N, C, H, W] per channel, as torch.nn.BatchNorm2d.
// Training: batch statistics (biased variance) normalize, and the running
// statistics are updated in place, running = (1 - momentum)·running +
// momentum·batch, with the unbiased batch variance. Eval: running statistics.
class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias, running_mean, running_var;
  int64_t channels;
  double eps, momentum;
};

// Normalization over the last dim, with an affine weight (1) and bias (0).
class LayerNorm : public Layer {
 public:
  explicit LayerNorm(int64_t features, double eps = 1e-5);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias;
  int64_t features;
  double eps;
};

// A lookup table [num, dim] initialized N(0, 1); i64 indices [...] -> [..., dim].
class Embedding : public Layer {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices, Loc loc = Loc::current()) override;
  Tensor weight;
  int64_t num_embeddings, embedding_dim;
};

// Zeroes elements with probability p in training and scales the rest by
// 1/(1-p); the identity in eval. Masks come from the counter-based stream.
class Dropout : public Layer {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  double p;
};

// GELU, exact (erf) or with PyTorch's tanh approximation.
class GELU : public Layer {
 public:
  explicit GELU(bool tanh_approximation = false) : tanh_approximation(tanh_approximation) {}
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  bool tanh_approximation;
};

class ReLU : public Layer {
 public:
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
};

// Mean over the spatial dims: [N, C, H, W] -> [N, C].
class GlobalAvgPool2d : public Layer {
 public:
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
};

// Layers applied in order; children are named "0", "1", ...
class Sequential : public Layer {
 public:
  Sequential() = default;
  Sequential& add(std::shared_ptr<Layer> layer);
  template <class L, class... A>
  Sequential& emplace(A&&... args) {
    return add(std::make_shared<L>(std::forward<A>(args)...));
  }
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  size_t size() const { return layers_.size(); }
  Layer& operator[](size_t i) { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

// Multi-head self-attention over [B, T, D] with a causal mask (position t
// attends to positions <= t): one Linear(D, 3D) projection to queries, keys
// and values, softmax(q kᵀ / sqrt(D/heads)) v per head, and an output
// Linear(D, D); dropout on the attention weights.
class CausalSelfAttention : public Layer {
 public:
  CausalSelfAttention(int64_t d_model, int64_t heads, double dropout = 0.0);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Linear qkv, proj;
  Dropout attn_dropout;
  int64_t d_model, heads;
};

// Mean over the batch of -log softmax(logits)[label]; logits [N, C], labels
// i64 [N]. A label outside [0, C) is an error naming it (checked at the
// step boundary in a compiled step).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, Loc loc = Loc::current());

// Functional forms. Softmaxes and normalizations are numerically stable
// (the max is subtracted; variance from centered values).
Tensor log_softmax(const Tensor& x, int64_t axis = -1, Loc loc = Loc::current());
Tensor softmax(const Tensor& x, int64_t axis = -1, Loc loc = Loc::current());
Tensor gelu(const Tensor& x, bool tanh_approximation = false, Loc loc = Loc::current());
// x normalized over its last dim, then x·weight + bias (either may be undefined).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5,
                  Loc loc = Loc::current());
// As BatchNorm2d::forward; running statistics are updated when training.
Tensor batch_norm(const Tensor& x, Tensor& running_mean, Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5,
                  Loc loc = Loc::current());
Tensor dropout(const Tensor& x, double p, bool training, Loc loc = Loc::current());
// scores [..., T, S] with entries above the diagonal (s > t) set to -inf.
Tensor causal_mask(const Tensor& scores, Loc loc = Loc::current());

}  // namespace ws::nn
