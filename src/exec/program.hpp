// A Program: the flat, lowered form of one graph. A vector of kernels over
// slots; a slot is a graph input's storage (bound by the caller), an output
// buffer (bound by the caller), a constant owned by the program, or an offset
// in one arena. Running a program walks the kernel vector once: no graph, no
// hashing, no allocation.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace ws::dist {
class InFlight;
}

namespace ws::exec {

enum class SlotKind : uint8_t { input, output, constant, arena };

struct Slot {
  SlotKind kind;
  int64_t index = 0;  // input or output number; byte offset for constant and arena
  int64_t bytes = 0;
  int64_t offset = 0;  // bytes into that storage: a view of part of a value
};

// Operands a kernel may read (concat is the only variadic op).
constexpr size_t kMaxOperands = 16;

class BackendOp;
class FusedLoop;
struct Kernel;
using KernelFn = void (*)(const Kernel& k, void* const* slots);

struct Kernel {
  KernelFn fn = nullptr;
  const char* name = "";  // the implementation, for listings and profiles
  ir::Op op{};
  int32_t out = -1;         // slot written
  std::vector<int32_t> in;  // slots read
  std::vector<ir::Type> in_types;
  ir::Type out_type;
  ir::Attrs attrs;
  int32_t scratch = -1;          // arena slot for the kernel's temporaries, if it needs any
  std::array<int64_t, 8> p{};    // implementation parameters: sizes, strides, flags
  std::vector<int64_t> strides;  // for strided copies and reductions
  Shape walk;                    // the shape they walk, with dims merged
  SourceLoc loc;
  std::shared_ptr<const BackendOp> backend;  // oneDNN primitives of a product or convolution
  // A collective's state while it runs, shared by its start and its wait.
  std::shared_ptr<dist::InFlight> collective;
  std::shared_ptr<const FusedLoop> loop;  // a loop fusion's body, compiled
  std::vector<int32_t> extra_out;         // a fusion's results 1.. (-1: nobody reads it)

  // Every slot the kernel writes: out, then a fusion's other results.
  std::vector<int32_t> outs() const;
};

// What a kernel runs, for listings and profiles: its implementation, or
// "reference.<op>" for a reference fallback.
std::string kernel_label(const Kernel& k);

struct ProgramInput {
  std::string name;
  ir::InputRole role;
  ir::Type type;
};

struct ProgramOutput {
  std::string name;
  ir::OutputRole role;
  ir::Type type;
  int aliased_input = -1;  // updates: written into that input's storage
};

struct Program {
  std::string name;
  std::vector<ProgramInput> inputs;
  std::vector<ProgramOutput> outputs;
  std::vector<Slot> slots;
  std::vector<Kernel> kernels;
  std::vector<std::byte> constants;
  int64_t arena_bytes = 0;
  int64_t max_live_bytes = 0;  // lower bound on arena_bytes for this schedule
  int64_t copy_bytes = 0;      // bytes copied per run because an update could not be in place
  int64_t flops = 0;           // floating-point operations of the backend kernels per run
  // Runs collectives: their progress is driven between kernels
  // (dist/collectives.hpp).
  bool has_collectives = false;

  // A readable listing: one kernel per line with its slots.
  std::string str() const;
};

// A Program bound to memory: the caller binds every input and every output
// that is not an in-place update, then runs it as often as it likes.
class Executable {
 public:
  explicit Executable(Program p);
  const Program& program() const { return prog_; }
  void bind_input(size_t i, void* data);
  void bind_output(size_t i, void* data);
  void run();
  // run(), writing kernel k's start (nanoseconds after `origin`) and wall
  // time to start_ns[k] and ns[k].
  void run_timed(std::chrono::steady_clock::time_point origin, std::vector<double>& start_ns,
                 std::vector<double>& ns);
  // Runs only the kernels k with only[k] set, in order.
  void run_only(const std::vector<bool>& only);

 private:
  void resolve();
  Program prog_;
  std::unique_ptr<std::byte, void (*)(void*)> arena_;
  std::vector<void*> inputs_, outputs_, slot_ptrs_;
  bool resolved_ = false;
};

}  // namespace ws::exec
