// TrainStep's compiled form and state, shared by the files that implement
// it. The step is the pipeline of docs/pipeline.md in one place (the layers
// and their contracts: docs/design.md):
//
//   capture   the frontend traces once per input signature -> forward graph
//             (step_source.hpp: the C++ nn API is one frontend)
//   autograd  joint graph (loss and every parameter's gradient)
//   optim     update nodes appended; updates alias their inputs
//   partition one step graph, or forward / backward / optimizer graphs
//   lower     each graph to a Program
//   exec      bind persistent storage once; per call bind data and run
//
// compile_step.cpp makes a signature's Compiled (capture to lower),
// bind_step.cpp binds its graphs' inputs and outputs, train_step.cpp runs
// a step, profile_step.cpp times one, inspect_step.cpp shows what was
// compiled; signature_cache.hpp keeps one Compiled per signature.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exec/program.hpp"
#include "exec/team_chooser.hpp"
#include "exec/threads.hpp"
#include "partition/min_cut.hpp"
#include "step/capture_step.hpp"
#include "step/signature_cache.hpp"
#include "step/step_source.hpp"
#include "step/zero.hpp"
#include "tensor/tensor_impl.hpp"
#include "wholestep/step.hpp"

namespace ws::step {

enum class Bind { persistent, hyper, data, owned };

// What one input of a graph or Program reads.
struct Binding {
  Bind kind;
  size_t index = 0;     // data argument, hyper number or persistent entry (InputSource)
  void* ptr = nullptr;  // Programs: what is bound once (persistent, hyper, owned)
};

// Storage the step owns: values between graphs, the loss, and (aliasing off)
// its own copy of the persistent state. A value passed between graphs is
// found by its name, the same in its producer and every consumer
// (partition.hpp).
struct Owned {
  struct Buffer {
    std::shared_ptr<detail::Storage> storage;
    bool interface = false;  // a value between graphs (saved or a gradient)
  };
  std::map<std::string, Buffer> by_name;
  void* get(const std::string& name, size_t bytes, bool interface = false);
};

// A 0-d floating-point output the step reads after it runs (the loss, the
// gradients' norm), in its own dtype: a float64 model's loss is not rounded.
struct ScalarOutput {
  const void* ptr = nullptr;
  DType dtype = DType::f32;
  double read() const {
    return dtype == DType::f64 ? *static_cast<const double*>(ptr) : *static_cast<const float*>(ptr);
  }
};

struct Copy {
  void* user;
  void* own;
  size_t bytes;
};

struct Compiled {
  // three_graph: the joint graph and what its forward saves, for the
  // partition report and picture (made when asked for).
  std::optional<std::pair<partition::JointGraph, partition::RematPlan>> partition;
  std::vector<ir::Graph> graphs;
  std::vector<ir::Graph> lowered;  // the graphs as their Programs run them (fused)
  ir::Graph step_graph;            // interpret
  std::vector<exec::Executable> programs;
  // Per Program (interpret: of the step graph), what each input reads.
  std::vector<std::vector<Binding>> inputs;
  std::vector<Tensor> persistent;  // interpret: the persistent entries (Binding::index)
  Owned owned;
  std::vector<step::IndexCheck> index_checks;
  std::vector<Copy> shadows;        // aliasing off
  ScalarOutput loss;                // f32, or f64 for a float64 loss
  const uint8_t* finite = nullptr;  // NonFinite::skip: the step's verdict
  ScalarOutput grad_norm;           // when the optimizer clips: the gradients' norm
  // UpdateSpec::skip_nonfinite_norm: a non-finite norm kept the update out.
  bool skip_nonfinite_norm = false;
  StepCounters counters;
  // StepOptions::accumulate > 1: this is the graph of a cycle's last call
  // (the update), and `summing` the one of the calls before it, compiled
  // from the same trace (accumulate.hpp).
  std::unique_ptr<Compiled> summing;
  // The team its steps run on (StepOptions::adapt_threads): its own, since
  // another signature's steps take another time.
  exec::TeamChooser team{exec::num_threads()};
};

// Kernel start times and durations of one step, [program][kernel], in
// nanoseconds from `origin`.
struct StepTiming {
  std::chrono::steady_clock::time_point origin;
  std::vector<std::vector<double>> start_ns, ns;
};

// One step of a compiled mode's Programs, each kernel timed when `t` is set.
void run_programs(Compiled& c, const std::vector<Tensor>& data, StepTiming* t);

}  // namespace ws::step

namespace ws {

struct TrainStep::Impl {
  std::unique_ptr<step::StepSource> source;
  StepOptions opts;
  step::SignatureCache<step::Compiled> cache;
  // The hyperparameters, f64 inputs: the update's scalars (1 - beta2, the
  // bias corrections) are computed in double and rounded once, as torch does.
  std::vector<double> hypers;
  // StepOptions::zero: this rank's parts of the optimizer state, for every
  // signature.
  std::unique_ptr<step::OptimizerShards> zero;

  Impl(std::unique_ptr<step::StepSource> src, StepOptions s);

  // One step (TrainStep::run, which ends the job when one rank of a
  // data-parallel step fails).
  StepResult run(const std::vector<Tensor>& data, Loc sloc);
  step::Compiled& lookup(const std::vector<Tensor>& data, Loc sloc);
  // Checks the batch's indices and writes the hyperparameters for one step.
  void prepare(step::Compiled& c, const std::vector<Tensor>& data);
  std::unique_ptr<step::Compiled> compile(const std::vector<ir::Type>& types, const SourceLoc& loc);
  // One graph's Compiled from the forward `cap` (compile's; `update`:
  // JointOptions::update).
  std::unique_ptr<step::Compiled> compile_graphs(step::CapturedStep cap, bool update);
  // What the input `name` in `role` of a graph made from `cap` reads, with
  // the storage a Program binds now (persistent, hyper and owned).
  step::Binding bind_input(step::Compiled& c, const step::CapturedStep& cap, ir::InputRole role,
                           const std::string& name, size_t bytes);
  // Binds a Program's inputs (data per step) and outputs.
  void bind_program(step::Compiled& c, exec::Executable& exe, const step::CapturedStep& cap);
};

}  // namespace ws
