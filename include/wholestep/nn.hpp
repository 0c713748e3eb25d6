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

// y = x Wᵀ + b, with W stored [out, in] and PyTorch's default initialization:
// W and b uniform in ±1/sqrt(in).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x, Loc loc = Loc::current());
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) { return forward(x, loc); }
  Tensor weight, bias;
  int64_t in_features, out_features;
};

// Mean over the batch of -log softmax(logits)[label]; logits [N, C], labels
// i64 [N].
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, Loc loc = Loc::current());

// log softmax over the last axis, numerically stable.
Tensor log_softmax(const Tensor& x, Loc loc = Loc::current());

}  // namespace ws::nn
