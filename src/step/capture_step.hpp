// Capture of a training step into its joint graph: trace the loss function,
// differentiate, append the optimizer update. The result says what every
// input of the joint graph is bound to (InputSource); nothing after this
// reads Modules or Tensors except through it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "partition/partition.hpp"
#include "wholestep/step.hpp"

namespace ws::ir {
class Builder;
}

namespace ws::step {

// An i64 data argument used as indices: every value must be in [0, bound).
struct IndexCheck {
  size_t data_index = 0;
  int64_t bound = 0;
  std::string what;  // "embedding index", "label"
  // A value allowed besides [0, bound) (a loss's ignore_index: the graph
  // selects another index where the argument holds it).
  std::optional<int64_t> ignored;
  SourceLoc loc;  // the user's line that indexes with it
};

// What an input of the joint graph is bound to: its role, and its place in
// what the role reads (recorded as capture lifts it; the input's name is
// only for display).
struct InputSource {
  ir::InputRole role = ir::InputRole::data;
  // data: the argument; hyper: the optimizer's hyperparameter (hyper_names);
  // param, buffer, opt_state, rng: the `persistent` entry.
  size_t index = 0;
};

struct CapturedStep {
  partition::JointGraph joint;
  // Tensors behind persistent inputs, with their input names (params,
  // buffers, state, the random stream).
  std::vector<std::pair<std::string, Tensor>> persistent;
  std::vector<std::string> hyper_names;  // hyper inputs, in optimizer order
  std::vector<InputSource> sources;      // per input of joint.graph, in its order
  std::vector<IndexCheck> index_checks;
  // Entries of `persistent` each rank holds its own of (ZeRO's shards):
  // never broadcast.
  std::vector<size_t> rank_local;

  // The source of joint input `v`.
  const InputSource& source(ir::ValueId v) const;
  // The source of the input named `name` of a graph made from the joint
  // graph: partitioned and lowered graphs keep the joint inputs, and an
  // input's name identifies it within a graph (ir/verify.cpp).
  const InputSource& source(const std::string& name) const;
};

// Checks data arguments against `checks` before a step runs, so an index
// out of range is reported with its argument, position and the user's line
// instead of failing inside a kernel.
void check_indices(const std::vector<IndexCheck>& checks, const std::vector<Tensor>& data,
                   const char* who);

// The forward graph alone: inputs params, buffers, optimizer state and
// hypers (when `opt` is given), data; outputs the loss (a 0-d float; or,
// with `loss_output` false, any tensor as a user output "output"), then the
// mutations of buffers and of the random stream.
CapturedStep trace_forward(nn::Module& model, const optim::Optimizer* opt, const LossFn& loss_fn,
                           const std::vector<ir::Type>& data_types, const SourceLoc& loc,
                           bool loss_output = true);

// The name of the bool output that says whether a guarded step's loss and
// gradients were all finite (capture_step with guard_nonfinite).
inline constexpr const char* kFiniteOutput = "finite";

// Makes the forward graph of `cap` the joint graph: the backward of the
// loss with respect to every param input, then each group's updates as its
// spec describes, over the param inputs it names. The opt_state inputs are
// group after group, each param-major (a parameter's slots together) then
// the group's global slots; the hyper inputs group after group.
// `opts.guard_nonfinite` as for capture_step. Knows nothing of Modules: every
// frontend goes through it (step_source.hpp).
class OptimizerShards;
struct Accumulation;
struct JointOptions {
  bool guard_nonfinite = false;
  // Gradients and loss averaged over the process group in the graph
  // (reduce_gradients.hpp), in buckets of at most bucket_bytes.
  bool data_parallel = false;
  int64_t bucket_bytes = 0;
  // Data parallel with the optimizer state sharded over the ranks (ZeRO
  // stage 1, zero.hpp), kept here.
  OptimizerShards* zero = nullptr;
  // StepOptions::accumulate > 1 (accumulate.hpp): the gradient sums, and
  // which of the two graphs this is. `update`: the update reads each
  // gradient plus its sum, and the sums are set to zero. Otherwise the
  // graph adds each gradient into its sum and updates nothing else but
  // buffers and the random stream (the optimizer's state and
  // hyperparameters are not inputs).
  Accumulation* accumulation = nullptr;
  bool update = true;
};
void append_step(CapturedStep& cap, const std::vector<optim::UpdateGroup>& groups,
                 const JointOptions& opts);

// Each update group's state and hyper inputs of the joint graph, as
// append_step lays them out: per parameter (in the group's order) its
// state slots, then the group's global slots; its hyperparameters.
struct GroupInputs {
  std::vector<std::vector<ir::ValueId>> state;  // [parameter][slot]
  std::vector<ir::ValueId> globals, hypers;
};
std::vector<GroupInputs> group_inputs(const ir::Graph& g,
                                      const std::vector<optim::UpdateGroup>& groups);

// The name of the f32[] output that holds the 2-norm of all the gradients
// together, before clipping, when the step clips (UpdateSpec::clip).
inline constexpr const char* kGradNormOutput = "grad_norm";

// A step's global-norm clipping: the max_grad_norm hyper input of the one
// update group whose spec clips (none: no group clips; two are an error),
// and whether a non-finite norm keeps the update from being applied.
struct StepClip {
  ir::ValueId max_norm = ir::kNoValue;
  bool skip_nonfinite = false;  // UpdateSpec::skip_nonfinite_norm
};
StepClip step_clip(const std::vector<optim::UpdateGroup>& groups,
                   const std::vector<GroupInputs>& inputs);
// Clips `grads` together by `clip` (optim::clip_by_global_norm; `sharded`:
// each rank holds its part of them) and records their norm as the output
// kGradNormOutput. Returns the norm, or kNoValue (nothing done) when the
// step does not clip.
ir::ValueId append_clip(ir::Builder& b, const StepClip& clip, std::vector<ir::ValueId>& grads,
                        bool sharded);

// 0 when `loss` and every gradient are finite, NaN otherwise (in the
// loss's dtype): the non-finite guard's probe.
ir::ValueId nonfinite_probe(ir::Builder& b, ir::ValueId loss,
                            const std::vector<ir::ValueId>& grads);

// `opt` as one update group: its spec, and for each of its parameters its
// index among `model`'s (the param inputs trace_forward makes).
optim::UpdateGroup update_group(const nn::Module& model, const optim::Optimizer& opt);

// The joint graph: forward, backward, and `opt`'s updates. With
// `guard_nonfinite`, every update output (parameters, optimizer state,
// buffers, the random stream) becomes select(finite, new, old), where
// `finite` (also an output, kFiniteOutput) is whether the loss and every
// gradient element are finite: a step with an inf or a NaN writes back what
// it read.
CapturedStep capture_step(nn::Module& model, optim::Optimizer& opt, const LossFn& loss_fn,
                          const std::vector<ir::Type>& data_types, const SourceLoc& loc,
                          bool guard_nonfinite = false);

// Writes `g` as text to $WS_DUMP/<index>-<stage>.ir when WS_DUMP is set, and
// verifies it when verification is on.
void after_stage(const ir::Graph& g, const std::string& stage);

}  // namespace ws::step
