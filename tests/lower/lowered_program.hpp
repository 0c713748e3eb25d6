// A graph's lowered program bound to copies of given inputs: what the pass
// goldens, the fuse tests and the differential tester's bisection run.
// Free of the test framework, so a program of the project can use it.
#pragma once

#include <vector>

#include "exec/program.hpp"
#include "lower/lower.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::testing {

class LoweredRun {
 public:
  LoweredRun(const ir::Graph& g, const std::vector<Tensor>& in, const lower::LowerOptions& opts)
      : g_(g), e_(lower::lower(g, opts)) {
    for (const Tensor& t : in) args_.push_back(t.clone());
    for (size_t i = 0; i < args_.size(); ++i) e_.bind_input(i, args_[i].impl()->storage->data);
    out_.resize(g.outputs.size());
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const ir::Output& o = g.outputs[i];
      if (o.role == ir::OutputRole::update) continue;
      out_[i] = Tensor::zeros(g.type(o.value).shape, g.type(o.value).dtype);
      e_.bind_output(i, out_[i].impl()->storage->data);
    }
  }

  void run(int runs = 1) {
    for (int r = 0; r < runs; ++r) e_.run();
  }

  // Output i after the runs: an update's result is its input's storage.
  const Tensor& result(size_t i) const {
    const ir::Output& o = g_.outputs[i];
    return o.role == ir::OutputRole::update ? args_[size_t(g_.input_index(o.aliased_input))]
                                            : out_[i];
  }
  std::vector<Tensor> results() const {
    std::vector<Tensor> r;
    for (size_t i = 0; i < g_.outputs.size(); ++i) r.push_back(result(i));
    return r;
  }

  const exec::Program& program() const { return e_.program(); }

 private:
  const ir::Graph& g_;
  exec::Executable e_;
  std::vector<Tensor> args_, out_;
};

}  // namespace ws::testing
