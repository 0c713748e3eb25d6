// The C++ nn API as a frontend of the step layer (step_source.hpp).
#include "step/step_source.hpp"

namespace ws::step {
namespace {

class ModuleSource final : public StepSource {
 public:
  ModuleSource(nn::Module& model, optim::Optimizer& opt, LossFn loss_fn)
      : model_(model), opt_(opt), loss_fn_(std::move(loss_fn)) {}

  CapturedStep trace(const std::vector<ir::Type>& data_types, const SourceLoc& loc) override {
    return trace_forward(model_, &opt_, loss_fn_, data_types, loc);
  }
  std::vector<optim::UpdateGroup> update_groups() const override {
    return {update_group(model_, opt_)};
  }
  void hyper_values(std::span<double> out) const override { opt_.hyper_values(out); }
  void advance() override { opt_.advance(); }
  int64_t step_count() const override { return opt_.step_count(); }

 private:
  nn::Module& model_;
  optim::Optimizer& opt_;
  LossFn loss_fn_;
};

// Puts a module in eval mode for a scope, restoring every submodule's mode.
class EvalScope {
 public:
  explicit EvalScope(nn::Module& m) {
    collect(m);
    m.eval();
  }
  // train() recurses into children; replaying the parent-first order restores
  // a child whose mode differed from its parent's.
  ~EvalScope() {
    for (auto& [mod, training] : modes_) mod->train(training);
  }

 private:
  void collect(nn::Module& m) {
    modes_.emplace_back(&m, m.is_training());
    for (auto& [name, c] : m.named_children()) collect(*c);
  }
  std::vector<std::pair<nn::Module*, bool>> modes_;
};

class ModuleForwardSource final : public ForwardSource {
 public:
  ModuleForwardSource(nn::Module& model, LossFn fn) : model_(model), fn_(std::move(fn)) {}

  CapturedStep trace(const std::vector<ir::Type>& data_types, const SourceLoc& loc) override {
    EvalScope eval(model_);
    return trace_forward(model_, nullptr, fn_, data_types, loc, /*loss_output=*/false);
  }

 private:
  nn::Module& model_;
  LossFn fn_;
};

}  // namespace

std::unique_ptr<ForwardSource> module_forward_source(nn::Module& model, LossFn fn) {
  return std::make_unique<ModuleForwardSource>(model, std::move(fn));
}

std::unique_ptr<StepSource> module_source(nn::Module& model, optim::Optimizer& opt,
                                          LossFn loss_fn) {
  return std::make_unique<ModuleSource>(model, opt, std::move(loss_fn));
}

}  // namespace ws::step
