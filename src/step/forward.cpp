// Forward: an inference Program over the model's own storage, one per
// input signature (signature_cache.hpp, as TrainStep keeps them).
#include <cstring>

#include <fmt/format.h>

#include "exec/program.hpp"
#include "exec/threads.hpp"
#include "ir/text.hpp"
#include "lower/lower.hpp"
#include "partition/partition.hpp"
#include "step/capture_step.hpp"
#include "step/signature_cache.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws {

namespace {

struct CompiledForward {
  ir::Graph graph;
  std::unique_ptr<exec::Executable> exe;
  std::vector<int> data_index;  // per program input: data argument, or -1
  ir::Type out_type;
  std::shared_ptr<detail::Storage> out;
  std::vector<step::IndexCheck> index_checks;
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

}  // namespace

struct Forward::Impl {
  nn::Module& model;
  LossFn fn;
  // The same limits as a TrainStep with default options.
  step::SignatureCache<CompiledForward> cache{
      "forward", {StepOptions{}.max_cached, StepOptions{}.recompile_warning}};

  Impl(nn::Module& m, LossFn f) : model(m), fn(std::move(f)) {}

  CompiledForward& lookup(const std::vector<Tensor>& inputs, Loc sloc) {
    return cache.lookup(inputs, sloc,
                        [this](const std::vector<ir::Type>& types, const SourceLoc& loc) {
                          return compile(types, loc);
                        });
  }

  std::unique_ptr<CompiledForward> compile(const std::vector<ir::Type>& types,
                                           const SourceLoc& loc) {
    step::CapturedStep cap;
    {
      EvalScope eval(model);
      cap = step::trace_forward(model, nullptr, fn, types, loc, /*loss_output=*/false);
    }
    auto c = std::make_unique<CompiledForward>();
    c->index_checks = cap.index_checks;
    c->graph = partition::single_graph(cap.joint);
    c->graph.name = "forward";
    for (const ir::Output& o : c->graph.outputs)
      if (o.role == ir::OutputRole::update)
        throw Error(fmt::format(
            "compile_forward: the function changes '{}'; an inference function must not "
            "mutate state{}",
            o.name, at(loc)));
    step::after_stage(c->graph, "inference");
    c->exe = std::make_unique<exec::Executable>(lower::lower(c->graph));
    const exec::Program& p = c->exe->program();
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      const step::InputSource& s = cap.source(p.inputs[i].name);
      c->data_index.push_back(s.role == ir::InputRole::data ? int(s.index) : -1);
      if (s.role == ir::InputRole::data) continue;
      c->exe->bind_input(i, cap.persistent[s.index].second.impl()->storage->data);
    }
    c->out_type = p.outputs.at(0).type;
    c->out = std::make_shared<detail::Storage>(c->out_type.bytes());
    c->exe->bind_output(0, c->out->data);
    return c;
  }
};

Forward::Forward(nn::Module& model, LossFn fn)
    : impl_(std::make_unique<Impl>(model, std::move(fn))) {}
Forward::~Forward() = default;
Forward::Forward(Forward&&) noexcept = default;
Forward& Forward::operator=(Forward&&) noexcept = default;

int64_t Forward::traces() const { return impl_->cache.traces(); }
std::string Forward::graph_text() const {
  const CompiledForward* c = impl_->cache.last();
  return c ? ir::print(c->graph, {.locations = false}) : "";
}

Tensor Forward::run(const std::vector<Tensor>& inputs, Loc loc) {
  exec::require_outside_parallel("a compiled forward");
  CompiledForward& c = impl_->lookup(inputs, loc);
  step::check_indices(c.index_checks, inputs, "forward");
  for (size_t i = 0; i < c.data_index.size(); ++i)
    if (c.data_index[i] >= 0)
      c.exe->bind_input(i, inputs[size_t(c.data_index[i])].impl()->storage->data);
  c.exe->run();
  auto impl = detail::make_concrete(c.out_type);
  std::memcpy(impl->storage->data, c.out->data, c.out_type.bytes());
  return Tensor(std::move(impl));
}

}  // namespace ws
