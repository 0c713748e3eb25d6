// The tracer: while active on a thread, Tensor operations append nodes to its
// graph instead of computing.
//
// Concrete tensors met while tracing become graph values: a tensor registered
// with `lift` (a parameter, buffer or optimizer state) becomes that graph
// input; any other concrete tensor becomes a constant (0-d ones a `full`).
#pragma once

#include <unordered_map>

#include "ir/builder.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::capture {

class Tracer {
 public:
  explicit Tracer(ir::Graph& g) : builder_(g) {}

  // The tracer active on this thread, or nullptr.
  static Tracer* current();

  ir::Builder& builder() { return builder_; }
  ir::Graph& graph() { return builder_.graph(); }

  // Makes `t` a graph input with this role and name; tensors sharing storage
  // (tied parameters) map to one input.
  ir::ValueId lift(const Tensor& t, ir::InputRole role, const std::string& name);
  // A new data input, returned as a traced tensor.
  Tensor data_input(const std::string& name, const ir::Type& type);
  // The graph value for `t` (traced, lifted, or a new constant).
  ir::ValueId value_of(const Tensor& t, const SourceLoc& loc);
  // A traced tensor for value `v`.
  Tensor wrap(ir::ValueId v);

  // Records `dst.copy_(src)` where dst is a lifted buffer: later reads of dst
  // in this trace see `src`, and the buffer's final value becomes an output
  // aliased to its input.
  void assign(const Tensor& dst, const Tensor& src, const SourceLoc& loc);
  // The next `count` numbers of the random stream: the stream's seed and
  // offset as graph values (the first use lifts them as `rng` inputs), and
  // how many numbers past the offset they start (random_uniform's `skip`).
  // The names of the stream's inputs.
  static constexpr const char* kSeedInput = "rng.seed";
  static constexpr const char* kOffsetInput = "rng.offset";
  struct RandomDraw {
    ir::ValueId seed, offset;
    int64_t skip;
  };
  RandomDraw take_random(int64_t count);
  // The stream's seed and offset inputs, kNoValue while nothing has drawn.
  ir::ValueId rng_seed() const { return rng_seed_; }
  ir::ValueId rng_offset() const { return rng_offset_; }
  // Appends the outputs for assigned buffers and the advanced random offset
  // (role update, aliased to their inputs). Call once, when tracing ends.
  void finish_mutations();

 private:
  ir::Builder builder_;
  std::unordered_map<const detail::Storage*, ir::ValueId> lifted_;
  // Latest value of each assigned input, in first-assignment order.
  std::vector<std::pair<ir::ValueId, ir::ValueId>> assigned_;
  ir::ValueId rng_seed_ = ir::kNoValue, rng_offset_ = ir::kNoValue;
  int64_t rng_taken_ = 0;
};

// Activates a tracer on this thread for its lifetime.
class TraceScope {
 public:
  explicit TraceScope(Tracer& t);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* prev_;
};

// Applies `op` to tensors: records a node when tracing, else computes with
// the reference kernels. Operands must already have matching shapes.
Tensor apply(ir::Op op, std::initializer_list<const Tensor*> args, ir::Attrs attrs,
             const std::source_location& loc);

}  // namespace ws::capture
