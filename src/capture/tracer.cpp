#include "capture/tracer.hpp"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "capture/random.hpp"
#include "exec/reference.hpp"

namespace ws::capture {
namespace {
thread_local Tracer* g_current = nullptr;
}

Tracer* Tracer::current() { return g_current; }

void Tracer::assign(const Tensor& dst, const Tensor& src, const SourceLoc& loc) {
  auto it = lifted_.find(dst.impl()->storage.get());
  if (it == lifted_.end())
    throw Error(
        "copy_(): while tracing, only a registered buffer of the model can be assigned "
        "(the target is a tensor the compiled step does not own)" +
        at(loc));
  const ir::ValueId in = it->second;
  if (graph().input_role(in) != ir::InputRole::buffer &&
      graph().input_role(in) != ir::InputRole::rng)
    throw Error(
        fmt::format("copy_(): '{}' is a {}, not a buffer; only buffers are assigned in "
                    "a traced function (parameters change through the optimizer){}",
                    graph().input_name(in), ir::role_name(graph().input_role(in)), at(loc)));
  ir::ValueId v = value_of(src, loc);
  if (graph().type(v) != graph().type(in))
    throw Error(fmt::format("copy_(): destination {} and source {} differ{}",
                            graph().type(in).str(), graph().type(v).str(), at(loc)));
  for (auto& [input, value] : assigned_)
    if (input == in) {
      value = v;
      return;
    }
  assigned_.emplace_back(in, v);
}

Tracer::RandomDraw Tracer::take_random(int64_t count) {
  detail::RngState& st = detail::rng_state();
  if (rng_seed_ == ir::kNoValue) {
    rng_seed_ = lift(st.seed, ir::InputRole::rng, kSeedInput);
    rng_offset_ = lift(st.offset, ir::InputRole::rng, kOffsetInput);
  }
  const RandomDraw d{rng_seed_, rng_offset_, rng_taken_};
  rng_taken_ += count;
  return d;
}

void Tracer::finish_mutations() {
  if (rng_taken_ > 0)
    assigned_.emplace_back(
        rng_offset_,
        builder_.binary(ir::Op::add, rng_offset_, builder_.scalar(double(rng_taken_), DType::i64)));
  for (auto& [input, value] : assigned_)
    graph().outputs.push_back(
        ir::Output{ir::OutputRole::update, value, input, graph().input_name(input)});
  assigned_.clear();
}

TraceScope::TraceScope(Tracer& t) : prev_(g_current) { g_current = &t; }
TraceScope::~TraceScope() { g_current = prev_; }

ir::ValueId Tracer::lift(const Tensor& t, ir::InputRole role, const std::string& name) {
  WS_CHECK(t.defined() && !t.is_traced()) << "lifting " << name;
  const detail::Storage* s = t.impl()->storage.get();
  if (auto it = lifted_.find(s); it != lifted_.end()) return it->second;
  ir::ValueId v = builder_.input(role, name, t.impl()->type);
  lifted_[s] = v;
  return v;
}

Tensor Tracer::data_input(const std::string& name, const ir::Type& type) {
  return wrap(builder_.input(ir::InputRole::data, name, type));
}

Tensor Tracer::wrap(ir::ValueId v) {
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->type = graph().type(v);
  impl->tracer = this;
  impl->value = v;
  return Tensor(std::move(impl));
}

ir::ValueId Tracer::value_of(const Tensor& t, const SourceLoc& loc) {
  if (!t.defined()) throw Error("an undefined tensor was passed to an operation" + at(loc));
  detail::TensorImpl* impl = t.impl();
  if (impl->tracer) {
    if (impl->tracer != this)
      throw Error("a tensor traced by another function was used here" + at(loc) +
                  "; traced tensors exist only inside the function being compiled");
    return impl->value;
  }
  if (auto it = lifted_.find(impl->storage.get()); it != lifted_.end()) {
    for (auto& [input, value] : assigned_)
      if (input == it->second) return value;
    return it->second;
  }
  // A tensor made outside the traced function and not registered with the
  // model or optimizer: its current value is baked in as a constant.
  std::vector<double> values = t.to_vector();
  SourceLoc saved = builder_.loc;
  builder_.loc = loc;
  ir::ValueId v = impl->type.rank() == 0 ? builder_.full(values[0], impl->type)
                                         : builder_.constant(std::move(values), impl->type);
  builder_.loc = saved;
  return v;
}

Tensor apply(ir::Op op, std::initializer_list<const Tensor*> args, ir::Attrs attrs,
             const std::source_location& sloc) {
  if (Tracer* tr = Tracer::current()) {
    SourceLoc loc = SourceLoc::from(sloc);
    std::vector<ir::ValueId> ids;
    for (const Tensor* a : args) ids.push_back(tr->value_of(*a, loc));
    return tr->wrap(tr->builder().add(op, std::move(ids), std::move(attrs), loc));
  }
  std::vector<ir::Type> types;
  std::vector<const void*> ptrs;
  for (const Tensor* a : args) {
    if (!a->defined())
      throw Error(fmt::format("{}: an operand is an undefined tensor{}", ir::op_name(op),
                              at(SourceLoc::from(sloc))));
    if (a->is_traced())
      throw Error(fmt::format("{}: a traced tensor was used outside the function being traced{}",
                              ir::op_name(op), at(SourceLoc::from(sloc))));
    types.push_back(a->impl()->type);
    ptrs.push_back(a->impl()->storage->data);
  }
  ir::Type out = ir::infer_type(op, types, attrs, SourceLoc::from(sloc));
  auto impl = detail::make_concrete(out);
  exec::run_reference(op, attrs, types, ptrs.data(), out, impl->storage->data,
                      SourceLoc::from(sloc));
  return Tensor(std::move(impl));
}

}  // namespace ws::capture
