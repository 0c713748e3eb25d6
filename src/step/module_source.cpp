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
  optim::UpdateSpec update_spec() const override { return opt_.spec(); }
  std::vector<size_t> optimizer_params() const override {
    return step::optimizer_params(model_, opt_);
  }
  void hyper_values(std::span<double> out) const override { opt_.hyper_values(out); }
  void advance() override { opt_.advance(); }
  int64_t step_count() const override { return opt_.step_count(); }

 private:
  nn::Module& model_;
  optim::Optimizer& opt_;
  LossFn loss_fn_;
};

}  // namespace

std::unique_ptr<StepSource> module_source(nn::Module& model, optim::Optimizer& opt,
                                          LossFn loss_fn) {
  return std::make_unique<ModuleSource>(model, opt, std::move(loss_fn));
}

}  // namespace ws::step
