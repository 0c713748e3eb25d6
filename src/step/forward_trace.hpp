// A forward graph being traced, as any frontend builds one: its inputs by
// role with their sources, its outputs, and its mutations (buffers assigned,
// the random stream drawn). The C++ nn API traces through it with Tensor
// operations (trace_forward); another frontend appends nodes to its builder.
#pragma once

#include <memory>
#include <string>

#include "capture/tracer.hpp"
#include "step/capture_step.hpp"

namespace ws::step {

class ForwardTrace {
 public:
  ForwardTrace();

  capture::Tracer& tracer() { return *tracer_; }
  ir::Builder& builder() { return tracer_->builder(); }
  ir::Graph& graph() { return cap_->joint.graph; }

  // A parameter, buffer or optimizer-state input bound to `t`'s storage;
  // tensors sharing storage (tied parameters) map to one input.
  ir::ValueId persistent(ir::InputRole role, const std::string& name, const Tensor& t);
  // A 0-d f32 hyperparameter input, the next in the optimizer's order.
  ir::ValueId hyper(const std::string& name);
  // The next data argument, as a traced tensor ("input.N").
  Tensor data(const ir::Type& type);
  ir::ValueId data_value(const ir::Type& type) { return data(type).impl()->value; }

  // Appends the outputs for the mutations (buffers assigned, the random
  // stream's advance), records every input's source and the index checks,
  // and verifies the graph: the trace is over.
  CapturedStep finish();

 private:
  std::unique_ptr<CapturedStep> cap_;  // the tracer keeps a reference to its graph
  std::unique_ptr<capture::Tracer> tracer_;
  std::vector<ir::ValueId> persistent_ids_, hyper_ids_, data_ids_;
};

}  // namespace ws::step
