// Running a graph every way a test compares: the interpreter (run after
// run, updates fed on) and lowered programs, fused or not; random inputs of
// a graph's types. Shared by the pass goldens and the fuse tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>

#include "exec/interpreter.hpp"
#include "exec/program.hpp"
#include "lower/lower.hpp"
#include "lower/pipeline.hpp"
#include "lowered_program.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::testing {

// Inputs of g's types: floats near 1 (positive, so logs and roots are
// defined), integers zero.
inline std::vector<Tensor> inputs_for(const ir::Graph& g, uint64_t seed = 1) {
  std::vector<Tensor> in;
  manual_seed(seed);
  for (ir::ValueId v : g.inputs) {
    const ir::Type& t = g.type(v);
    if (is_floating(t.dtype))
      in.push_back(randn(t.shape, 1.0, 0.25, t.dtype));
    else
      in.push_back(Tensor::zeros(t.shape, t.dtype));
  }
  return in;
}

// Runs g lowered (fused or not) `runs` times on copies of `in`, updates
// written into their inputs; an update's result is its input afterwards.
inline std::vector<Tensor> run_lowered(const ir::Graph& g, const std::vector<Tensor>& in, bool fuse,
                                       int runs) {
  LoweredRun lr(g, in, {.fuse = fuse});
  lr.run(runs);
  return lr.results();
}

// The interpreter run `runs` times, each run's updates fed to the next.
inline std::vector<Tensor> interpret_runs(const ir::Graph& g, std::vector<Tensor> in, int runs) {
  std::vector<Tensor> out;
  for (int r = 0; r < runs; ++r) {
    out = exec::interpret(g, in);
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (g.outputs[i].role == ir::OutputRole::update)
        in[size_t(g.input_index(g.outputs[i].aliased_input))] = out[i];
  }
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (g.outputs[i].role == ir::OutputRole::update)
      out[i] = in[size_t(g.input_index(g.outputs[i].aliased_input))];
  return out;
}

// Every way of running g gives the same bits: the interpreter on g and on
// its fused form, and programs with fusion on and off, over `runs` runs.
inline void expect_same_everywhere(const ir::Graph& g, const std::vector<Tensor>& in,
                                   int runs = 3) {
  const std::vector<Tensor> want = interpret_runs(g, in, runs);
  const ir::Graph fused = lower::run_passes(g, lower::graph_passes({}));
  const std::vector<std::vector<Tensor>> got = {interpret_runs(fused, in, runs),
                                                run_lowered(g, in, true, runs),
                                                run_lowered(g, in, false, runs)};
  const char* names[] = {"interpreted fused graph", "fused program", "unfused program"};
  for (size_t k = 0; k < got.size(); ++k)
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(std::string(names[k]) + ", output " + g.outputs[i].name);
      const std::vector<double> w = want[i].to_vector(), r = got[k][i].to_vector();
      ASSERT_EQ(w.size(), r.size());
      for (size_t j = 0; j < w.size(); ++j)
        ASSERT_TRUE(r[j] == w[j] || (std::isnan(r[j]) && std::isnan(w[j])))
            << "element " << j << ": " << r[j] << " against " << w[j];
    }
}

}  // namespace ws::testing
