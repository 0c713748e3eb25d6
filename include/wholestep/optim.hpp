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
  std::string kind;  // "sgd", "adam" or "adamw"
  bool momentum = false, nesterov = false, weight_decay = false;
  bool amsgrad = false;
  bool maximize = false;  // ascend: the gradient is negated first
  // Global-norm gradient clipping before the update, by the hyperparameter
  // "max_grad_norm", of every group's gradients together (the step's: at
  // most one group of a step clips).
  bool clip = false;
  // With clip: a step whose gradients' norm is inf or NaN updates no
  // parameter and no optimizer state (StepResult::skipped; buffers and the
  // random stream move on), as torch's clip_grad_norm_ with
  // error_if_nonfinite raises before the optimizer steps.
  bool skip_nonfinite_norm = false;
  std::vector<std::string> state_slots;   // per-parameter state, e.g. "momentum_buffer"
  std::vector<std::string> global_slots;  // 0-d state shared by all parameters ("step")
  std::vector<std::string> hyper_names;   // 0-d inputs, in order
  friend bool operator==(const UpdateSpec&, const UpdateSpec&) = default;
};

// Adam's step count and bias corrections: one 0-d "step" shared by every
// parameter (a global slot, the C++ optimizers), or each parameter's own
// (a state slot named "step", first: PyTorch's optimizers keep one per
// parameter). The update reads whichever the spec names.
inline constexpr const char* kStepSlot = "step";

// A parameter group: parameters updated by one rule with one set of
// hyperparameters (PyTorch's param_groups). `params` are indices among the
// step's param inputs, in the optimizer's order.
struct UpdateGroup {
  UpdateSpec spec;
  std::vector<size_t> params;
  friend bool operator==(const UpdateGroup&, const UpdateGroup&) = default;
};

class Optimizer {
 public:
  explicit Optimizer(const nn::Module& model);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const nn::NamedTensors& params() const { return params_; }
  // State tensors in parameter order, slot order within a parameter, named
  // "<param>.<slot>" ("fc1.weight.momentum_buffer"); then the global slots
  // (0-d f32, named by the slot: "step").
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
  // Restores the step count (loading a checkpoint); must be >= 0.
  void set_step_count(int64_t steps);

  // Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_
  // before each step: all gradients are scaled by min(1, max_norm / (norm +
  // 1e-6)), a NaN norm making them NaN as torch's clamp does; the norm is
  // StepResult::grad_norm. 0 turns it off; like other structural options it
  // may change between steps but not between zero and non-zero once
  // compiled.
  void set_max_grad_norm(double max_norm);
  double max_grad_norm() const { return max_grad_norm_; }

 protected:
  // Zero state for every parameter, param-major: p0.slot0, p0.slot1, p1...
  void add_state(const std::vector<std::string>& slots);
  void add_global_state(const std::string& slot);
  // Sets a hyperparameter whose being zero or not is baked into the graph
  // (which terms exist): any change that keeps that is allowed; `setter` and
  // `what` name it in the error, `consequence` ends the message.
  static void set_structural(const std::string& setter, const char* what, double& value, double v,
                             const char* consequence = "");
  // Appends the clipping hyperparameter (when on) to a for_each_hyper walk.
  template <class F>
  void clip_hyper(F&& f) const {
    if (max_grad_norm_ > 0) f("max_grad_norm", max_grad_norm_);
  }
  nn::NamedTensors params_, state_;
  double lr_ = 0;
  int64_t step_ = 0;
  double max_grad_norm_ = 0;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  double max_grad_norm = 0;  // global-norm clipping; 0: off
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

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  double max_grad_norm = 0;  // global-norm clipping; 0: off
};

// PyTorch's Adam (decoupled = false: weight decay added to the gradient) and
// AdamW (decoupled = true: p ← p·(1 - lr·wd) before the update). State per
// parameter: exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad); the step
// count is 0-d state the graph advances, and the bias corrections 1 - β^t are
// computed from it in the graph.
class Adam : public Optimizer {
 public:
  Adam(const nn::Module& model, AdamOptions opts, bool decoupled_weight_decay = false);
  UpdateSpec spec() const override;
  void hyper_values(std::span<double> out) const override;
  const AdamOptions& options() const { return opts_; }
  void set_weight_decay(double wd);

 private:
  template <class F>
  void for_each_hyper(F&& f) const;
  AdamOptions opts_;
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  // PyTorch's AdamW default weight decay is 0.01.
  static AdamOptions defaults() {
    AdamOptions o;
    o.weight_decay = 0.01;
    return o;
  }
  AdamW(const nn::Module& model, AdamOptions opts = defaults()) : Adam(model, opts, true) {}
};

}  // namespace ws::optim
