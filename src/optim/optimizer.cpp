#include <cmath>

#include <fmt/format.h>

#include "wholestep/optim.hpp"

namespace ws::optim {

Optimizer::Optimizer(const nn::Module& model) : params_(model.named_parameters()) {
  if (params_.empty()) throw Error("optimizer: the model has no parameters");
}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0) || !std::isfinite(lr))
    throw Error(fmt::format("set_lr({}): the learning rate must be a finite number >= 0", lr));
  lr_ = lr;
}

void Optimizer::set_step_count(int64_t steps) {
  if (steps < 0) throw Error(fmt::format("set_step_count({}): must be >= 0", steps));
  step_ = steps;
}

void Optimizer::add_state(const std::vector<std::string>& slots) {
  for (auto& [name, p] : params_)  // param-major, slot-minor
    for (const std::string& slot : slots)
      state_.emplace_back(name + "." + slot, Tensor::zeros(p.shape(), p.dtype()));
}

void Optimizer::add_global_state(const std::string& slot) {
  state_.emplace_back(slot, Tensor::zeros({}, DType::f32));
}

void Optimizer::set_max_grad_norm(double m) {
  if (!(m >= 0) || !std::isfinite(m) || (step_ > 0 && (m > 0) != (max_grad_norm_ > 0)))
    throw Error(
        fmt::format("set_max_grad_norm({}): must be a finite number >= 0, and cannot switch "
                    "clipping on or off after the "
                    "first step (it was {}); choose it at construction",
                    m, max_grad_norm_));
  max_grad_norm_ = m;
}

SGD::SGD(const nn::Module& model, SgdOptions o) : Optimizer(model), opts_(o) {
  set_lr(o.lr);
  set_max_grad_norm(o.max_grad_norm);
  if (!(o.momentum >= 0) || !(o.weight_decay >= 0) || !(o.dampening >= 0) || o.dampening > 1 ||
      !std::isfinite(o.momentum) || !std::isfinite(o.weight_decay))
    throw Error(
        fmt::format("SGD: momentum {} and weight_decay {} must be >= 0, dampening {} in [0, 1]",
                    o.momentum, o.weight_decay, o.dampening));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw Error("SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
  if (o.momentum > 0) add_state({"momentum_buffer"});
}

// The hyperparameters in graph-input order, as (name, value): the one place
// that order is written, for both spec() and hyper_values().
template <class F>
void SGD::for_each_hyper(F&& f) const {
  f("lr", lr_);
  if (opts_.momentum > 0) {
    f("momentum", opts_.momentum);
    // The buffer starts at zero, so a first-step factor of 1 makes buf = d,
    // exactly PyTorch's first step.
    f("dampening_factor", step_ == 0 ? 1.0 : 1.0 - opts_.dampening);
  }
  if (opts_.weight_decay > 0) f("weight_decay", opts_.weight_decay);
  clip_hyper(f);
}

UpdateSpec SGD::spec() const {
  UpdateSpec s;
  s.kind = "sgd";
  s.momentum = opts_.momentum > 0;
  s.nesterov = opts_.nesterov;
  s.weight_decay = opts_.weight_decay > 0;
  s.clip = max_grad_norm_ > 0;
  if (s.momentum) s.state_slots = {"momentum_buffer"};
  for_each_hyper([&](const char* name, double) { s.hyper_names.push_back(name); });
  return s;
}

namespace {
template <class Walk>
void write_hypers(Walk&& walk, std::span<double> out) {
  size_t i = 0;
  walk([&](const char* name, double v) {
    WS_CHECK(i < out.size()) << "hyper_values: no slot for " << name;
    out[i++] = v;
  });
  WS_CHECK(i == out.size()) << "hyper_values: " << out.size() << " slots for " << i << " values";
}
}  // namespace

void SGD::hyper_values(std::span<double> out) const {
  write_hypers([&](auto&& f) { for_each_hyper(f); }, out);
}

void Optimizer::set_structural(const std::string& setter, const char* what, double& value, double v,
                               const char* consequence) {
  if (!std::isfinite(v) || v < 0)
    throw Error(fmt::format("{}({}): {} must be a finite number >= 0", setter, v, what));
  if ((v > 0) != (value > 0))
    throw Error(
        fmt::format("{}({}): {} was {} at construction; it cannot change between zero "
                    "and non-zero{}",
                    setter, v, what, value, consequence));
  value = v;
}

void SGD::set_momentum(double m) {
  set_structural("SGD::set_momentum", "momentum", opts_.momentum, m,
                 " (the compiled step would need a momentum buffer). Construct SGD with the "
                 "momentum you need");
}

void SGD::set_weight_decay(double wd) {
  set_structural("SGD::set_weight_decay", "weight decay", opts_.weight_decay, wd);
}

Adam::Adam(const nn::Module& model, AdamOptions o, bool decoupled)
    : Optimizer(model), opts_(o), decoupled_(decoupled) {
  set_lr(o.lr);
  set_max_grad_norm(o.max_grad_norm);
  const char* name = decoupled ? "AdamW" : "Adam";
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1))
    throw Error(fmt::format("{}: betas ({}, {}) must be in [0, 1)", name, o.beta1, o.beta2));
  if (!(o.eps >= 0) || !(o.weight_decay >= 0) || !std::isfinite(o.eps) ||
      !std::isfinite(o.weight_decay))
    throw Error(fmt::format("{}: eps {} and weight_decay {} must be finite numbers >= 0", name,
                            o.eps, o.weight_decay));
  add_state(spec().state_slots);
  add_global_state("step");
}

template <class F>
void Adam::for_each_hyper(F&& f) const {
  f("lr", lr_);
  f("beta1", opts_.beta1);
  f("beta2", opts_.beta2);
  f("eps", opts_.eps);
  if (opts_.weight_decay > 0) f("weight_decay", opts_.weight_decay);
  clip_hyper(f);
}

UpdateSpec Adam::spec() const {
  UpdateSpec s;
  s.kind = decoupled_ ? "adamw" : "adam";
  s.weight_decay = opts_.weight_decay > 0;
  s.amsgrad = opts_.amsgrad;
  s.clip = max_grad_norm_ > 0;
  s.state_slots = {"exp_avg", "exp_avg_sq"};
  if (opts_.amsgrad) s.state_slots.push_back("max_exp_avg_sq");
  s.global_slots = {"step"};
  for_each_hyper([&](const char* name, double) { s.hyper_names.push_back(name); });
  return s;
}

void Adam::hyper_values(std::span<double> out) const {
  write_hypers([&](auto&& f) { for_each_hyper(f); }, out);
}

void Adam::set_weight_decay(double wd) {
  set_structural(decoupled_ ? "AdamW::set_weight_decay" : "Adam::set_weight_decay", "weight decay",
                 opts_.weight_decay, wd);
}

}  // namespace ws::optim
