#include "exec/program.hpp"

#include "dist/collectives.hpp"
#include "exec/dnnl_backend.hpp"
#include "exec/fused_loop.hpp"

#include <chrono>
#include <cstdlib>

#include <fmt/format.h>

namespace ws::exec {

std::string kernel_label(const Kernel& k) {
  if (std::string_view(k.name) == "reference")
    return fmt::format("reference.{}", ir::op_name(k.op));
  return k.name;
}

std::vector<int32_t> Kernel::outs() const {
  std::vector<int32_t> all = {out};
  all.insert(all.end(), extra_out.begin(), extra_out.end());
  return all;
}

std::string Program::str() const {
  auto plus = [](int64_t offset) { return offset ? fmt::format("+{}", offset) : std::string(); };
  auto slot = [&](int32_t s) {
    const Slot& sl = slots[size_t(s)];
    switch (sl.kind) {
      case SlotKind::input: return fmt::format("in{}{}", sl.index, plus(sl.offset));
      case SlotKind::output: return fmt::format("out{}{}", sl.index, plus(sl.offset));
      case SlotKind::constant: return fmt::format("const+{}", sl.index + sl.offset);
      case SlotKind::arena: return fmt::format("arena+{}", sl.index + sl.offset);
    }
    return std::string("?");
  };
  std::string s = fmt::format("program {} ({} kernels, arena {} bytes, max live {} bytes)\n", name,
                              kernels.size(), arena_bytes, max_live_bytes);
  for (const Kernel& k : kernels) {
    std::vector<std::string> ins;
    for (int32_t i : k.in) ins.push_back(slot(i));
    std::vector<std::string> outs;
    for (int32_t o : k.outs()) outs.push_back(o >= 0 ? slot(o) : "_");
    // The implementation where it depends on the machine: a backend op's
    // kernel, a fused loop compiled to machine code.
    const std::string impl = k.backend                      ? "  # " + k.backend->impl()
                             : k.loop && k.loop->compiled() ? std::string("  # compiled")
                                                            : std::string();
    s += fmt::format("  {} = {}({}) : {}{}\n", fmt::join(outs, ", "), kernel_label(k),
                     fmt::join(ins, ", "), k.out_type.str(), impl);
  }
  return s;
}

Executable::Executable(Program p)
    : prog_(std::move(p)),
      arena_(static_cast<std::byte*>(
                 std::aligned_alloc(64, size_t((prog_.arena_bytes + 63) / 64 * 64 + 64))),
             std::free),
      inputs_(prog_.inputs.size(), nullptr),
      outputs_(prog_.outputs.size(), nullptr),
      slot_ptrs_(prog_.slots.size(), nullptr) {
  if (!arena_) throw OutOfMemory(size_t(prog_.arena_bytes), "a program's arena");
}

namespace {
// Where a tensor of no elements is bound when its owner gives no address
// (torch's data_ptr() of an empty tensor is null): nothing reads or writes
// it, but a null address means unbound.
alignas(64) std::byte g_no_elements[64];

void* bound_address(void* data, const ir::Type& type) {
  return data == nullptr && type.numel() == 0 ? g_no_elements : data;
}
}  // namespace

void Executable::bind_input(size_t i, void* data) {
  WS_CHECK(i < inputs_.size()) << "input " << i;
  inputs_[i] = bound_address(data, prog_.inputs[i].type);
  resolved_ = false;
}

void Executable::bind_output(size_t i, void* data) {
  WS_CHECK(i < outputs_.size()) << "output " << i;
  outputs_[i] = bound_address(data, prog_.outputs[i].type);
  resolved_ = false;
}

void Executable::resolve() {
  for (size_t s = 0; s < prog_.slots.size(); ++s) {
    const Slot& sl = prog_.slots[s];
    switch (sl.kind) {
      case SlotKind::input:
        WS_CHECK(inputs_[size_t(sl.index)])
            << prog_.name << ": input " << sl.index << " (" << prog_.inputs[size_t(sl.index)].name
            << ") is unbound";
        slot_ptrs_[s] = inputs_[size_t(sl.index)];
        break;
      case SlotKind::output:
        WS_CHECK(outputs_[size_t(sl.index)])
            << prog_.name << ": output " << sl.index << " (" << prog_.outputs[size_t(sl.index)].name
            << ") is unbound";
        slot_ptrs_[s] = outputs_[size_t(sl.index)];
        break;
      case SlotKind::constant: slot_ptrs_[s] = prog_.constants.data() + sl.index; break;
      case SlotKind::arena: slot_ptrs_[s] = arena_.get() + sl.index; break;
    }
    slot_ptrs_[s] = static_cast<std::byte*>(slot_ptrs_[s]) + sl.offset;
  }
  resolved_ = true;
}

void Executable::run() {
  if (!resolved_) resolve();
  void* const* slots = slot_ptrs_.data();
  if (!prog_.has_collectives) {
    for (const Kernel& k : prog_.kernels) k.fn(k, slots);
    return;
  }
  for (const Kernel& k : prog_.kernels) {
    k.fn(k, slots);
    dist::progress();
  }
}

void Executable::run_timed(std::chrono::steady_clock::time_point origin,
                           std::vector<double>& start_ns, std::vector<double>& ns) {
  if (!resolved_) resolve();
  WS_CHECK(ns.size() == prog_.kernels.size() && start_ns.size() == ns.size())
      << "one time per kernel";
  void* const* slots = slot_ptrs_.data();
  using nanos = std::chrono::duration<double, std::nano>;
  for (size_t i = 0; i < prog_.kernels.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    prog_.kernels[i].fn(prog_.kernels[i], slots);
    if (prog_.has_collectives) dist::progress();
    const auto t1 = std::chrono::steady_clock::now();
    start_ns[i] = nanos(t0 - origin).count();
    ns[i] = nanos(t1 - t0).count();
  }
}

void Executable::run_only(const std::vector<bool>& only) {
  if (!resolved_) resolve();
  WS_CHECK(only.size() == prog_.kernels.size()) << "one flag per kernel";
  void* const* slots = slot_ptrs_.data();
  for (size_t i = 0; i < prog_.kernels.size(); ++i)
    if (only[i]) {
      prog_.kernels[i].fn(prog_.kernels[i], slots);
      if (prog_.has_collectives) dist::progress();
    }
}

}  // namespace ws::exec
