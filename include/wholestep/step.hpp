// Compiling a whole training step: forward, backward and the optimizer
// update, run per call with parameters updated where they live.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "wholestep/floor.hpp"
#include "wholestep/nn.hpp"
#include "wholestep/optim.hpp"
#include "wholestep/step_options.hpp"
#include "wholestep/tensor.hpp"

namespace ws {

// What a picture of the compiled step shows (TrainStep::graph_dot).
enum class GraphStage {
  joint,        // as traced and differentiated: forward, backward and updates in one
                // graph, what the forward keeps for the backward marked
  partitioned,  // the graphs the step runs, before lowering (three_graph: forward,
                // backward and optimizer, the values passed between them with their bytes)
  lowered,      // those graphs as their Programs run them: fused kernels with their ops
};

struct StepCounters {
  int64_t graphs = 0;            // Programs (or interpreted graphs) launched
  int64_t kernels = 0;           // kernels (or interpreted nodes) run
  int64_t bytes_copied = 0;      // bytes of parameter/state copies
  int64_t interface_bytes = 0;   // values materialized between graphs (saved + grads)
  int64_t arena_bytes = 0;       // temporaries
  int64_t persistent_bytes = 0;  // parameters, buffers, optimizer state
  int64_t state_bytes = 0;       // of which optimizer state (ZeRO: this rank's part)
  int64_t peak_bytes = 0;        // persistent + interface + temporaries (+ copies)
  int64_t flops = 0;             // floating-point operations of matrix products and convolutions
  int64_t collectives = 0;       // data parallel: collectives started per step
  int64_t comm_bytes = 0;        // data parallel: bytes each rank reduces per step (its buckets)
};

struct StepResult {
  double loss = 0;
  int64_t step = 0;  // the optimizer's step count after this step
  // The update was not applied: NonFinite::skip found the loss or a
  // gradient not finite, or the gradients' norm was not finite in a step
  // that clips with UpdateSpec::skip_nonfinite_norm (optim.hpp).
  bool skipped = false;
  // The optimizer updated in this call (not skipped; with
  // StepOptions::accumulate = k, only a cycle's k-th call updates).
  bool updated = false;
  // StepOptions::accumulate: the calls whose gradients the step holds
  // summed after this one, 0 .. k-1 (0 after an update: the next call
  // starts a cycle). Always 0 when accumulate is 1.
  int64_t accumulated = 0;
  int threads = 0;  // threads the step's parallel regions ran on
  // When the optimizer clips (global-norm gradient clipping): the 2-norm
  // of all the gradients together, before clipping (what
  // torch.nn.utils.clip_grad_norm_ returns).
  std::optional<double> grad_norm;
  StepCounters counters;
  // Data parallel: the time some collective of this step was in flight
  // (from a start until its completion was seen), and the part of it
  // the step spent blocked waiting for them; the rest was hidden behind
  // compute. Completion is seen between kernels, so in-flight time is
  // rounded up to a kernel.
  double comm_ms = 0;
  double comm_wait_ms = 0;
};

// Threads for everything a step runs: our loops and the oneDNN primitives
// share one OpenMP pool. 0 means all cores.
void set_num_threads(int n);
int num_threads();

// What each compute backend runs on this machine: the CPU model, the
// instruction set oneDNN dispatches to, the threads. One line each.
std::string backend_info();

// Time spent per kernel over some steps, summed by kernel implementation.
struct KernelTime {
  std::string name;   // implementation, e.g. "dnnl_matmul", "add", "reduce_sum"
  int64_t calls = 0;  // over all profiled steps
  double ms = 0;      // total over all profiled steps
  int64_t flops = 0;  // per step, matrix products and convolutions only
};
// One kernel run of a profiled step, for a timeline.
struct KernelEvent {
  std::string name;     // implementation, as in KernelTime
  std::string op;       // the IR op it computes
  std::string program;  // its graph: "step", "forward", "backward", "optimizer"; or "communication"
  std::string where;    // the source line that made the node ("file.cpp:12"), when known
  double start_ms = 0;  // from the start of the step
  double ms = 0;
};

struct StepProfile {
  int64_t steps = 0;
  double step_ms = 0;               // median wall time of one profiled step
  std::vector<KernelTime> kernels;  // most time first
  // Median time of one pass over the step's matrix products and convolutions
  // alone (the same kernels on the same buffers, nothing else run between).
  double contraction_ms = 0;
  // Every kernel of the last profiled step, in order, then (data parallel)
  // each collective from its start to its observed completion, program
  // "communication" ("communication 2", ... for one that overlaps another).
  std::vector<KernelEvent> last_step;
  // Kernel time per program ("step", or "forward", "backward", "optimizer"),
  // in program order: mean ms per step.
  std::vector<std::pair<std::string, double>> program_ms;
  // Layout conversions a step makes: reorders inside oneDNN's products and
  // convolutions, of weights (in, and their gradients out) and of other
  // operands (images, matrices), and the graph's own transpose kernels
  // (the layout pass's conversions at the step's edges among them).
  int64_t weight_reorders = 0, other_reorders = 0, transposes = 0;
};

// The profile's last step as Chrome trace JSON (chrome://tracing, Perfetto):
// one slice per kernel, named by its implementation and op, with its source
// line, on one track per program.
std::string chrome_trace(const StepProfile& p);

using LossFn = std::function<Tensor(const std::vector<Tensor>&)>;

namespace step {
class StepSource;
class ForwardSource;
struct StepFactory;
}  // namespace step

class TrainStep {
 public:
  TrainStep(nn::Module& model, optim::Optimizer& opt, LossFn loss_fn, StepOptions opts = {});
  ~TrainStep();
  TrainStep(TrainStep&&) noexcept;
  TrainStep& operator=(TrainStep&&) noexcept;

  // One step on this batch: returns the loss before the update. With
  // StepOptions::accumulate = k, the k-th call of each cycle updates and
  // the calls before it add their gradients into sums the step keeps.
  StepResult run(const std::vector<Tensor>& data, Loc loc = Loc::current());
  template <class... T>
  StepResult operator()(const T&... data) {
    return run(std::vector<Tensor>{data...});
  }

  const StepOptions& options() const;
  // How many times the loss function was traced (once per input signature,
  // again after its compiled step was evicted or cleared).
  int64_t traces() const;
  // Compiled signatures held now, and freeing them all (the next step
  // compiles again).
  size_t cached() const;
  void clear_cache();
  // The IR of the graphs of the last compiled signature, as text: as their
  // Programs run them (a fusion node is one kernel; GraphStage::lowered), or
  // as lowering received them (partitioned), or the joint graph (joint); the
  // step graph when interpreted.
  std::string graphs_text(GraphStage stage = GraphStage::lowered) const;
  // The lowered Programs of the last compiled signature, as listings.
  std::string programs_text() const;
  // What the forward keeps for the backward (three_graph: saves between the
  // graphs; single_graph: keeps alive) and what the backward recomputes,
  // with bytes and reasons (empty when interpreted).
  std::string partition_report() const;
  // The memory each persistent input (parameter, buffer, optimizer state,
  // random stream) of the last compiled signature is bound to, by input
  // name: the tensors' own storage, unless StepOptions::aliasing is off.
  std::vector<std::pair<std::string, const void*>> bound_storage() const;
  // three_graph: each parameter's gradient from the last step, as the
  // backward graph passed it to the optimizer graph (copies), named
  // "grad.<parameter>" (StepOptions::accumulate: the total the last update
  // read). Empty in the other modes, which never hold them
  // whole (single_graph fuses each into its update).
  std::vector<std::pair<std::string, Tensor>> gradients() const;
  // The partitioned joint graph in Graphviz DOT (forward, backward and
  // optimizer coloured, saved values marked; empty when interpreted).
  std::string partition_dot() const;
  // The last compiled signature at `stage` in Graphviz DOT, with a legend:
  // forward, backward and optimizer ops coloured, parameters and their
  // in-place updates, values passed between graphs with their bytes, fused
  // kernels with their ops (src/ir/dot.hpp describes the picture). Empty
  // when interpreted.
  std::string graph_dot(GraphStage stage) const;
  // Runs `steps` real steps on this batch (parameters are updated) with every
  // kernel timed, then times the contractions alone. Compiled modes only,
  // and not with StepOptions::accumulate above 1.
  StepProfile profile(const std::vector<Tensor>& data, int steps, Loc loc = Loc::current());
  // The floor under this batch's step (wholestep/floor.hpp): every
  // convolution and matrix product of its graphs, in their order, run
  // `rounds` times (after one round to warm up) on buffers of the floor's
  // own; trains nothing. Compiled modes only.
  StepFloor floor(const std::vector<Tensor>& data, int rounds, Loc loc = Loc::current());
  // StepOptions::zero: makes the optimizer's state tensors whole again
  // from every rank's part (before a checkpoint is saved); the next step
  // takes them over again, from what they hold then (a checkpoint loaded
  // into them). Collective: every rank calls it. Nothing to do otherwise.
  void gather_optimizer_state();

  // StepOptions::accumulate: the calls of the current cycle whose gradients
  // the step holds summed (0: the next call starts a cycle; it updates when
  // this is accumulate - 1).
  int64_t accumulated() const;
  // Copies of those sums, by parameter name (empty before the first call):
  // a checkpoint taken mid-cycle saves them and accumulated() with the
  // model and optimizer (save_checkpoint holds neither), else the resumed
  // run starts a new cycle and the calls summed so far are lost.
  std::vector<std::pair<std::string, Tensor>> accumulated_gradients() const;
  // Continues a saved cycle: `calls` calls summed into `grads` (by
  // parameter name; a sum not named is zero). A ws::Error, with nothing
  // changed, when `calls` is outside [0, accumulate) or a tensor's type is
  // not its sum's.
  void load_accumulated(int64_t calls, const std::vector<std::pair<std::string, Tensor>>& grads);

 private:
  friend struct step::StepFactory;
  // From any frontend (the library's step_source.hpp).
  TrainStep(std::unique_ptr<step::StepSource> source, StepOptions opts);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
template <class F>
LossFn adapt_loss_fn(F&& f) {
  using Fn = std::decay_t<F>;
  if constexpr (std::is_invocable_v<Fn&, const std::vector<Tensor>&>) {
    return LossFn(std::forward<F>(f));
  } else if constexpr (std::is_invocable_v<Fn&, const Tensor&>) {
    return
        [f = Fn(std::forward<F>(f))](const std::vector<Tensor>& d) mutable { return f(d.at(0)); };
  } else if constexpr (std::is_invocable_v<Fn&, const Tensor&, const Tensor&>) {
    return [f = Fn(std::forward<F>(f))](const std::vector<Tensor>& d) mutable {
      return f(d.at(0), d.at(1));
    };
  } else {
    static_assert(std::is_invocable_v<Fn&, const Tensor&, const Tensor&, const Tensor&>,
                  "the loss function must take 1 to 3 tensors or a std::vector<Tensor>");
    return [f = Fn(std::forward<F>(f))](const std::vector<Tensor>& d) mutable {
      return f(d.at(0), d.at(1), d.at(2));
    };
  }
}
}  // namespace detail

// Compiles `loss_fn` (taking the batch tensors, returning a 0-d loss) with
// `opt`'s update into a training step. Tracing happens on the first call for
// each input signature.
template <class F>
TrainStep compile_train_step(nn::Module& model, optim::Optimizer& opt, F&& loss_fn,
                             StepOptions opts = {}) {
  return TrainStep(model, opt, detail::adapt_loss_fn(std::forward<F>(loss_fn)), opts);
}

// An inference function compiled to one Program: BatchNorm uses running
// statistics and dropout is off (the model is traced in eval mode and its
// mode restored after). Parameters and buffers are bound by storage, so after
// a training step the forward sees the new values with no copy. Each input
// signature compiles once and is kept as a TrainStep with default options
// keeps it: at most StepOptions::max_cached, the least recently used freed
// first, and a warning past StepOptions::recompile_warning traces.
class Forward {
 public:
  Forward(nn::Module& model, LossFn fn);
  ~Forward();
  Forward(Forward&&) noexcept;
  Forward& operator=(Forward&&) noexcept;

  // The function's output for these inputs, as a new tensor.
  Tensor run(const std::vector<Tensor>& inputs, Loc loc = Loc::current());
  template <class... T>
  Tensor operator()(const T&... inputs) {
    return run(std::vector<Tensor>{inputs...});
  }
  // How many times the function was traced (once per input signature, again
  // after its compiled form was freed).
  int64_t traces() const;
  std::string graph_text() const;

 private:
  friend struct step::StepFactory;
  // From any frontend (the library's step_source.hpp).
  explicit Forward(std::unique_ptr<step::ForwardSource> source);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Compiles `fn` (taking 1 to 3 tensors, returning one) over `model`.
template <class F>
Forward compile_forward(nn::Module& model, F&& fn) {
  return Forward(model, detail::adapt_loss_fn(std::forward<F>(fn)));
}

}  // namespace ws
