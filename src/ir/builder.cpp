#include "ir/builder.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "ir/attr.hpp"

namespace ws::ir {

ValueId Builder::append(Node n) {
  g_.nodes.push_back(std::move(n));
  return ValueId(g_.nodes.size() - 1);
}

ValueId Builder::input(InputRole role, const std::string& name, Type t, SourceLoc l) {
  ValueId v = append(input_node(role, name, std::move(t), std::move(l)));
  g_.inputs.push_back(v);
  return v;
}

ValueId Builder::add(Op op, std::vector<ValueId> args, Attrs attrs) {
  return add(op, std::move(args), std::move(attrs), loc);
}

ValueId Builder::add(Op op, std::vector<ValueId> args, Attrs attrs, const SourceLoc& l) {
  std::vector<Type> types;
  for (ValueId a : args) {
    WS_CHECK(a >= 0 && a < g_.size()) << "bad operand %" << a;
    types.push_back(g_.type(a));
  }
  Type t;
  try {
    t = infer_type(op, types, attrs, l);
  } catch (const Error& e) {
    if (!internal) throw;
    throw InternalError(fmt::format("{} made an invalid node: {}", internal, e.what()));
  }
  return append(Node{op, std::move(args), std::move(attrs), std::move(t), l});
}

ValueId Builder::full(double value, const Type& t) {
  return append(Node{Op::full, {}, make_attrs<Op::full>({{"value", value}}), t, loc});
}

ValueId Builder::constant(std::vector<double> values, const Type& t) {
  WS_CHECK(int64_t(values.size()) == t.numel()) << "constant has " << values.size() << " values";
  return append(
      Node{Op::constant, {}, make_attrs<Op::constant>({{"value", std::move(values)}}), t, loc});
}

ValueId Builder::iota(const Type& t, int64_t axis) {
  WS_CHECK(axis >= 0 && axis < t.rank()) << "iota axis " << axis << " for " << t.str();
  return append(Node{Op::iota, {}, make_attrs<Op::iota>({{"axis", axis}}), t, loc});
}

ValueId Builder::broadcast_to(ValueId x, const Shape& shape) {
  const Shape& s = type(x).shape;
  if (s == shape) return x;
  WS_CHECK(s.size() <= shape.size())
      << "broadcast_to " << shape_str(s) << " -> " << shape_str(shape);
  std::vector<int64_t> dims;
  for (size_t i = 0; i < s.size(); ++i) dims.push_back(int64_t(shape.size() - s.size() + i));
  return add(Op::broadcast, {x}, make_attrs<Op::broadcast>({{"dims", dims}, {"shape", shape}}));
}

ValueId Builder::sum_to(ValueId x, Shape shape) {
  const Shape& s = type(x).shape;
  if (s == shape) return x;
  WS_CHECK(shape.size() <= s.size()) << "sum_to " << shape_str(s) << " -> " << shape_str(shape);
  size_t lead = s.size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < s.size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && s[i] != 1)) axes.push_back(int64_t(i));
  ValueId r = axes.empty() ? x : reduce(Op::reduce_sum, x, axes);
  return type(r).shape == shape ? r : reshape(r, shape);
}

ValueId Builder::scale(ValueId x, ValueId s) {
  return binary(Op::mul, x, broadcast_to(s, type(x).shape));
}

ValueId Builder::reshape(ValueId x, const Shape& shape) {
  if (type(x).shape == shape) return x;
  return add(Op::reshape, {x}, make_attrs<Op::reshape>({{"shape", shape}}));
}

int64_t next_collective_seq(const Graph& g) {
  int64_t next = 0;
  for (const Node& n : g.nodes)
    if (kCollectiveStarts.contains(n.op))
      next = std::max(next, attr<kCollectiveStarts, "seq">(n) + 1);
  return next;
}

bool renumber_collectives(Graph& g) {
  int64_t seq = std::numeric_limits<int64_t>::max();
  for (const Node& n : g.nodes)
    if (kCollectiveStarts.contains(n.op)) seq = std::min(seq, attr<kCollectiveStarts, "seq">(n));
  bool changed = false;
  for (Node& n : g.nodes)
    if (kCollectiveStarts.contains(n.op)) {
      changed |= attr<kCollectiveStarts, "seq">(n) != seq;
      set_attr<kCollectiveStarts, "seq">(n.attrs, seq++);
    }
  return changed;
}

std::vector<ValueId> Builder::unpack(ValueId packed, const std::vector<Type>& types) {
  std::vector<ValueId> out;
  int64_t at = 0;
  const int64_t total = type(packed).numel();
  for (const Type& t : types) {
    const int64_t n = t.numel();
    ValueId part = packed;
    if (n != total)
      part = add(Op::slice, {packed},
                 make_attrs<Op::slice>({{"axis", int64_t(0)}, {"start", at}, {"end", at + n}}));
    out.push_back(reshape(part, t.shape));
    at += n;
  }
  return out;
}

ValueId Builder::all_reduce(ValueId x, const std::string& reduce) {
  const Type t = type(x);  // a copy: appending moves the nodes
  const ValueId start =
      add(Op::all_reduce_start, {x},
          make_attrs<Op::all_reduce_start>({{"reduce", reduce}, {"seq", next_collective_seq(g_)}}));
  return unpack(add(Op::wait, {start}), {t})[0];
}

ValueId Builder::reduce_scatter(const std::vector<ValueId>& xs, const std::string& reduce,
                                int64_t world) {
  return add(Op::wait,
             {add(Op::reduce_scatter_start, xs,
                  make_attrs<Op::reduce_scatter_start>(
                      {{"reduce", reduce}, {"seq", next_collective_seq(g_)}, {"world", world}}))});
}

ValueId Builder::all_gather(ValueId x, int64_t world) {
  return add(Op::wait, {add(Op::all_gather_start, {x},
                            make_attrs<Op::all_gather_start>(
                                {{"seq", next_collective_seq(g_)}, {"world", world}}))});
}

ValueId Builder::local_shard(const std::vector<ValueId>& xs, int64_t world) {
  return add(Op::local_shard, xs, make_attrs<Op::local_shard>({{"world", world}}));
}

ValueId Builder::reduce(Op op, ValueId x, std::vector<int64_t> axes) {
  std::sort(axes.begin(), axes.end());
  return add(op, {x}, make_attrs<kReduceOps>({{"axes", axes}}));
}

ValueId Builder::matmul(ValueId a, ValueId b, bool ta, bool tb) {
  Attrs attrs;
  if (ta) set_attr<Op::matmul, "transpose_a">(attrs, 1);
  if (tb) set_attr<Op::matmul, "transpose_b">(attrs, 1);
  return add(Op::matmul, {a, b}, attrs);
}

ValueId Builder::convert(ValueId x, DType dt) {
  if (type(x).dtype == dt) return x;
  return add(Op::convert, {x}, make_attrs<Op::convert>({{"dtype", std::string(dtype_name(dt))}}));
}

}  // namespace ws::ir
