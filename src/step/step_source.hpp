// The seam between a frontend and the step layer. A frontend traces its
// model's forward into a CapturedStep (inputs by role, each with its
// InputSource; the loss first among the outputs, then the buffers'
// mutations) and says how its optimizer's parameters map onto the graph's
// param inputs. Everything after that (append_step: the backward and the
// updates; partition, lowering, binding, the signature cache, running) is
// the step layer's, and knows no Module. The C++ nn API is one frontend
// (ModuleSource, module_source.cpp); docs/design.md says how to add one.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "step/accumulate.hpp"
#include "step/capture_step.hpp"
#include "wholestep/step.hpp"

namespace ws::step {

class StepSource {
 public:
  virtual ~StepSource() = default;
  // The forward graph for one input signature (once per signature; again
  // after the compiled step was evicted).
  virtual CapturedStep trace(const std::vector<ir::Type>& data_types, const SourceLoc& loc) = 0;
  // The optimizer's groups: each one's update rule and its parameters as
  // indices among the traced graph's param inputs. The same for every
  // signature; the traced graph's opt_state and hyper inputs follow them
  // (append_step).
  virtual std::vector<optim::UpdateGroup> update_groups() const = 0;
  // Writes this step's hyperparameters, group after group, each in its
  // spec's hyper_names order.
  // Called before every step: no allocation.
  virtual void hyper_values(std::span<double> out) const = 0;
  // A step's update was applied (not skipped as non-finite).
  virtual void advance() = 0;
  // Updates applied so far.
  virtual int64_t step_count() const = 0;
  // StepOptions::accumulate: the gradient sums and the cycle's position,
  // shared by every signature the step compiles (accumulate.hpp). Kept
  // here by default; a frontend that makes several TrainSteps train one
  // model together (one per key) returns one they share.
  virtual Accumulation& accumulation() { return accumulation_; }

 private:
  Accumulation accumulation_;
};

// A frontend's inference function: traced once per input signature into a
// graph whose first output (role user) is the result, with no mutation.
class ForwardSource {
 public:
  virtual ~ForwardSource() = default;
  virtual CapturedStep trace(const std::vector<ir::Type>& data_types, const SourceLoc& loc) = 0;
};

// The C++ frontend: a Module, its Optimizer and a loss function.
std::unique_ptr<StepSource> module_source(nn::Module& model, optim::Optimizer& opt, LossFn loss_fn);

// `fn` over `model`, traced with every module in eval mode.
std::unique_ptr<ForwardSource> module_forward_source(nn::Module& model, LossFn fn);

// A compiled training step, or a compiled forward, from any frontend.
struct StepFactory {
  static TrainStep train_step(std::unique_ptr<StepSource> source, StepOptions opts);
  static Forward forward(std::unique_ptr<ForwardSource> source);
};

}  // namespace ws::step
