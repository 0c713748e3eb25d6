#include <fmt/format.h>

#include "wholestep/optim.hpp"

namespace ws::optim {

Optimizer::Optimizer(const nn::Module& model) : params_(model.named_parameters()) {
  if (params_.empty()) throw Error("optimizer: the model has no parameters");
}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0)) throw Error(fmt::format("set_lr({}): the learning rate must be >= 0", lr));
  lr_ = lr;
}

void Optimizer::add_state(const std::string& slot) {
  for (auto& [name, p] : params_)
    state_.emplace_back(name + "." + slot, Tensor::zeros(p.shape(), p.dtype()));
}

SGD::SGD(const nn::Module& model, SgdOptions o) : Optimizer(model), opts_(o) {
  set_lr(o.lr);
  if (o.momentum < 0 || o.weight_decay < 0 || o.dampening < 0 || o.dampening > 1)
    throw Error(
        fmt::format("SGD: momentum {} and weight_decay {} must be >= 0, dampening {} in [0, 1]",
                    o.momentum, o.weight_decay, o.dampening));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw Error("SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
  // State is interleaved per parameter: param-major, slot-minor.
  if (o.momentum > 0) add_state("momentum_buffer");
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
}

UpdateSpec SGD::spec() const {
  UpdateSpec s;
  s.kind = "sgd";
  s.momentum = opts_.momentum > 0;
  s.nesterov = opts_.nesterov;
  s.weight_decay = opts_.weight_decay > 0;
  if (s.momentum) s.state_slots = {"momentum_buffer"};
  for_each_hyper([&](const char* name, double) { s.hyper_names.push_back(name); });
  return s;
}

void SGD::hyper_values(std::span<double> out) const {
  size_t i = 0;
  for_each_hyper([&](const char* name, double v) {
    WS_CHECK(i < out.size()) << "hyper_values: no slot for " << name;
    out[i++] = v;
  });
  WS_CHECK(i == out.size()) << "hyper_values: " << out.size() << " slots for " << i << " values";
}

void SGD::set_momentum(double m) {
  if ((m > 0) != (opts_.momentum > 0) || m < 0)
    throw Error(
        fmt::format("SGD::set_momentum({}): momentum was {} at construction; it cannot change "
                    "between zero and non-zero (the compiled step would need a momentum "
                    "buffer). Construct SGD with the momentum you need",
                    m, opts_.momentum));
  opts_.momentum = m;
}

void SGD::set_weight_decay(double wd) {
  if ((wd > 0) != (opts_.weight_decay > 0) || wd < 0)
    throw Error(
        fmt::format("SGD::set_weight_decay({}): weight decay was {} at construction; it "
                    "cannot change between zero and non-zero",
                    wd, opts_.weight_decay));
  opts_.weight_decay = wd;
}

}  // namespace ws::optim
