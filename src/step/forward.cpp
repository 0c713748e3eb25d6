// Forward: an inference Program over the model's own storage, one per
// input signature (signature_cache.hpp, as TrainStep keeps them).
#include <cstring>

#include <fmt/format.h>

#include "exec/program.hpp"
#include "exec/threads.hpp"
#include "ir/text.hpp"
#include "lower/lower.hpp"
#include "partition/partition.hpp"
#include "step/signature_cache.hpp"
#include "step/step_source.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws {

// Named, not anonymous: Forward::Impl holds them, and a unity build compiles
// this file as part of another (gcc's -Wsubobject-linkage).
namespace forward_detail {

struct CompiledForward {
  ir::Graph graph;
  std::unique_ptr<exec::Executable> exe;
  std::vector<int> data_index;  // per program input: data argument, or -1
  ir::Type out_type;
  std::shared_ptr<detail::Storage> out;
  std::vector<step::IndexCheck> index_checks;
};

}  // namespace forward_detail

using forward_detail::CompiledForward;

struct Forward::Impl {
  std::unique_ptr<step::ForwardSource> source;
  // The same limits as a TrainStep with default options.
  step::SignatureCache<CompiledForward> cache{
      "forward", {StepOptions{}.max_cached, StepOptions{}.recompile_warning}};

  explicit Impl(std::unique_ptr<step::ForwardSource> s) : source(std::move(s)) {}

  CompiledForward& lookup(const std::vector<Tensor>& inputs, Loc sloc) {
    return cache.lookup(inputs, sloc,
                        [this](const std::vector<ir::Type>& types, const SourceLoc& loc) {
                          return compile(types, loc);
                        });
  }

  std::unique_ptr<CompiledForward> compile(const std::vector<ir::Type>& types,
                                           const SourceLoc& loc) {
    const step::CapturedStep cap = source->trace(types, loc);
    auto c = std::make_unique<CompiledForward>();
    c->index_checks = cap.index_checks;
    c->graph = partition::single_graph(cap.joint);
    c->graph.name = "forward";
    // The random stream's offset moves past what the function drew (its
    // only state an inference function may change); nothing else may.
    for (const ir::Output& o : c->graph.outputs)
      if (o.role == ir::OutputRole::update &&
          c->graph.input_role(o.aliased_input) != ir::InputRole::rng)
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
    : Forward(step::module_forward_source(model, std::move(fn))) {}
Forward::Forward(std::unique_ptr<step::ForwardSource> source)
    : impl_(std::make_unique<Impl>(std::move(source))) {}
Forward step::StepFactory::forward(std::unique_ptr<ForwardSource> source) {
  return Forward(std::move(source));
}
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
