// Binding a compiled step's graphs to storage: each input by its role and
// source (capture_step.hpp), each output by its role.
#include "step/train_step_impl.hpp"

namespace ws {

namespace step {

void* Owned::get(const std::string& name, size_t bytes, bool interface) {
  Buffer& b = by_name[name];
  if (!b.storage) b.storage = std::make_shared<detail::Storage>(bytes);
  WS_CHECK(b.storage->bytes == bytes) << name << " bound with two sizes";
  b.interface = b.interface || interface;
  return b.storage->data;
}

}  // namespace step

step::Binding TrainStep::Impl::bind_input(step::Compiled& c, const step::CapturedStep& cap,
                                          ir::InputRole role, const std::string& name,
                                          size_t bytes) {
  using step::Bind;
  switch (role) {
    case ir::InputRole::param:
    case ir::InputRole::buffer:
    case ir::InputRole::opt_state:
    case ir::InputRole::rng: {
      const size_t index = cap.source(name).index;
      void* ptr = cap.persistent[index].second.impl()->storage->data;
      for (const step::Copy& s : c.shadows)
        if (s.user == ptr) ptr = s.own;
      return {Bind::persistent, index, ptr};
    }
    case ir::InputRole::hyper: {
      const size_t index = cap.source(name).index;
      return {Bind::hyper, index, &hypers[index]};
    }
    case ir::InputRole::data: return {Bind::data, cap.source(name).index};
    case ir::InputRole::saved:
    case ir::InputRole::grad: return {Bind::owned, 0, c.owned.get(name, bytes, true)};
  }
  WS_CHECK(false) << "input " << name << " has an invalid role";
  return {Bind::owned};
}

void TrainStep::Impl::bind_program(step::Compiled& c, exec::Executable& exe,
                                   const step::CapturedStep& cap) {
  const exec::Program& p = exe.program();
  std::vector<step::Binding> binds;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const exec::ProgramInput& in = p.inputs[i];
    binds.push_back(bind_input(c, cap, in.role, in.name, in.type.bytes()));
    if (binds.back().kind != step::Bind::data) exe.bind_input(i, binds.back().ptr);
  }
  c.inputs.push_back(std::move(binds));
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const exec::ProgramOutput& o = p.outputs[i];
    if (o.role == ir::OutputRole::update) continue;
    const bool interface = o.role == ir::OutputRole::saved || o.role == ir::OutputRole::grad;
    void* ptr =
        c.owned.get(o.role == ir::OutputRole::loss ? "loss" : o.name, o.type.bytes(), interface);
    if (o.role == ir::OutputRole::loss) c.loss = {ptr, o.type.dtype};
    WS_CHECK(o.role != ir::OutputRole::loss || is_floating(o.type.dtype))
        << "the loss is " << o.type.str();
    if (o.role == ir::OutputRole::user && o.name == step::kFiniteOutput)
      c.finite = static_cast<const uint8_t*>(ptr);
    if (o.role == ir::OutputRole::user && o.name == step::kGradNormOutput)
      c.grad_norm = {ptr, o.type.dtype};
    exe.bind_output(i, ptr);
  }
}

}  // namespace ws
