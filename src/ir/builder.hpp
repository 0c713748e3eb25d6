// Appending nodes to a Graph, with shape inference and user-facing errors.
#pragma once

#include "ir/graph.hpp"

namespace ws::ir {

// The result type of `op` applied to operands of `args` types, or a ws::Error
// naming the op, the shapes and `loc`. Source ops (input, full, constant)
// carry their type explicitly and are not inferred.
Type infer_type(Op op, const std::vector<Type>& args, const Attrs& attrs, const SourceLoc& loc);

class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}

  Graph& graph() { return g_; }
  const Type& type(ValueId v) const { return g_.type(v); }

  // Location stamped on nodes added without one (autograd uses the forward
  // node's location, so backward errors point at the user's line).
  SourceLoc loc;
  // What makes the nodes when it is wholestep itself, not the user's traced
  // code ("autograd", "the optimizer update"). Operands that do not fit are
  // then a bug in wholestep: add() throws ws::InternalError naming it (the
  // location stays, to say which of the user's lines it was working on).
  const char* internal = nullptr;

  ValueId input(InputRole role, const std::string& name, Type t, SourceLoc l = {});
  ValueId add(Op op, std::vector<ValueId> args, Attrs attrs = {});
  ValueId add(Op op, std::vector<ValueId> args, Attrs attrs, const SourceLoc& l);
  // A tensor of type `t` filled with `value`.
  ValueId full(double value, const Type& t);
  // A 0-d tensor.
  ValueId scalar(double value, DType dt = DType::f32) { return full(value, Type{dt, {}}); }
  ValueId constant(std::vector<double> values, const Type& t);
  // A tensor of type `t` whose elements are their index along `axis`.
  ValueId iota(const Type& t, int64_t axis);

  // Numpy-style broadcast of `x` to `shape` (trailing dimensions aligned).
  ValueId broadcast_to(ValueId x, const Shape& shape);
  // Sums `x` down to `shape`: undoes broadcast_to. `shape` is taken by
  // value: it may be a node's, and appending moves the nodes.
  ValueId sum_to(ValueId x, Shape shape);
  // x * s where s is a 0-d value, broadcast.
  ValueId scale(ValueId x, ValueId s);
  ValueId reshape(ValueId x, const Shape& shape);
  ValueId reduce(Op op, ValueId x, std::vector<int64_t> axes);
  ValueId matmul(ValueId a, ValueId b, bool ta, bool tb);
  ValueId convert(ValueId x, DType dt);

  // Values packed one after another, flattened, into the 1-d `packed` (a
  // collective's bucket), back in their types: a contiguous slice of it
  // each, reshaped (views when lowered).
  std::vector<ValueId> unpack(ValueId packed, const std::vector<Type>& types);
  // x reduced over the process group (reduce "sum" or "mean") by one
  // collective, started and waited for at once: in x's type.
  ValueId all_reduce(ValueId x, const std::string& reduce);
  // This rank's part of `xs` (packed, zero-padded to a multiple of `world`)
  // reduced over a group of `world` ranks: a started and waited
  // reduce_scatter, 1-d.
  ValueId reduce_scatter(const std::vector<ValueId>& xs, const std::string& reduce, int64_t world);
  // The 1-d x of every rank of a group of `world`, one after another: a
  // started and waited all_gather.
  ValueId all_gather(ValueId x, int64_t world);
  // This rank's part of `xs`, packed and padded as reduce_scatter does.
  ValueId local_shard(const std::vector<ValueId>& xs, int64_t world);

  ValueId binary(Op op, ValueId a, ValueId b) { return add(op, {a, b}); }
  ValueId unary(Op op, ValueId a) { return add(op, {a}); }

 private:
  ValueId append(Node n);
  Graph& g_;
};

// One past the largest seq of a collective in `g` (0 when it has none): the
// seq of a collective appended to it.
int64_t next_collective_seq(const Graph& g);

// Numbers the collective starts of `g` in node order from the least seq
// they have: a pass that moves starts keeps "every rank starts them in node
// order". True when a seq changed.
bool renumber_collectives(Graph& g);

// Numpy broadcasting of two shapes, or nullopt-like failure: returns false.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);

}  // namespace ws::ir
