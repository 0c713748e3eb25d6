// Optimizers. An optimizer owns its state tensors (created at construction,
// before any trace) and the current hyperparameter values. The compiled step
// reads both as graph inputs, so changing the learning rate never recompiles;
// only the optimizer's structure (which terms exist) is baked into the graph.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "wholestep/nn.hpp"

namespace ws::optim {

// What the compiled graph depends on: the update rule and which terms exist.
// Hyperparameter values are not part of it.
struct UpdateSpec {
  std::string kind;  // "sgd"
  bool momentum = false, nesterov = false, weight_decay = false;
  std::vector<std::string> state_slots;  // per-parameter state, e.g. "momentum_buffer"
  std::vector<std::string> hyper_names;  // 0-d inputs, in order
  friend bool operator==(const UpdateSpec&, const UpdateSpec&) = default;
};

class Optimizer {
 public:
  explicit Optimizer(const nn::Module& model);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const nn::NamedTensors& params() const { return params_; }
  // State tensors in parameter order, slot order within a parameter, named
  // "<param>.<slot>" ("fc1.weight.momentum_buffer").
  const nn::NamedTensors& state() const { return state_; }
  virtual UpdateSpec spec() const = 0;
  // Writes the hyperparameter values for the next step, in spec().hyper_names
  // order, into `out` (sized to match). Called every step: no allocation.
  virtual void hyper_values(std::span<double> out) const = 0;

  double lr() const { return lr_; }
  void set_lr(double lr);
  // Steps taken so far; the compiled step advances it.
  int64_t step_count() const { return step_; }
  void advance() { ++step_; }

 protected:
  void add_state(const std::string& slot);
  nn::NamedTensors params_, state_;
  double lr_ = 0;
  int64_t step_ = 0;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// PyTorch's SGD: d = g + wd·p; buf = momentum·buf + (1 - dampening)·d (buf = d
// on the first step); d = nesterov ? d + momentum·buf : buf; p -= lr·d.
class SGD : public Optimizer {
 public:
  SGD(const nn::Module& model, SgdOptions opts);
  UpdateSpec spec() const override;
  void hyper_values(std::span<double> out) const override;
  const SgdOptions& options() const { return opts_; }
  // Momentum and weight decay may change between steps, but not between zero
  // and non-zero: that would change the graph (which terms exist).
  void set_momentum(double m);
  void set_weight_decay(double wd);

 private:
  template <class F>
  void for_each_hyper(F&& f) const;
  SgdOptions opts_;
};

}  // namespace ws::optim
