#include "lower/fold_constants.hpp"

#include <cstring>

#include "exec/reference.hpp"
#include "ir/attr.hpp"
#include "lower/rewrite.hpp"

namespace ws::lower {
namespace {

using ir::Op;
using ir::ValueId;

// A value of at most this many bytes computed from constants alone is a
// constant of the program.
constexpr size_t kMaxFoldedBytes = size_t(64) << 10;

bool is_source(Op op) { return op == Op::full || op == Op::iota || op == Op::constant; }

// `bytes` of type t as a `constant`'s values, or false when a `constant`
// would not give back the same bytes.
bool as_constant_values(const ir::Type& t, const std::vector<std::byte>& bytes,
                        std::vector<double>& values) {
  const size_t n = size_t(t.numel());
  values.resize(n);
  exec::dispatch(t.dtype, [&](auto x) {
    using T = decltype(x);
    for (size_t i = 0; i < n; ++i) {
      T e;
      std::memcpy(&e, &bytes[i * sizeof(T)], sizeof(T));
      values[i] = double(e);
    }
  });
  std::vector<std::byte> back(bytes.size());
  exec::run_reference(Op::constant, ir::make_attrs<Op::constant>({{"value", values}}), {}, nullptr,
                      t, back.data());
  return back == bytes;
}

}  // namespace

ir::Graph fold_constants(const ir::Graph& g, bool* changed) {
  // The bytes of each value known to be constant, by g's ids.
  std::vector<std::vector<std::byte>> value(g.nodes.size());
  std::vector<bool> known(g.nodes.size(), false);
  return rewrite_nodes(g, changed, [&](ir::Graph& out, ValueId v, const ir::Node& renamed) {
    const ir::Node& n = g.node(v);
    const ir::OpCategory cat = ir::op_info(n.op).category;
    const bool source = is_source(n.op) && n.args.empty();
    if (n.type.bytes() > kMaxFoldedBytes ||
        (!source && cat != ir::OpCategory::elementwise && cat != ir::OpCategory::shape))
      return ir::kNoValue;
    std::vector<const void*> in;
    std::vector<ir::Type> in_types;
    for (ValueId a : n.args) {
      if (!known[size_t(a)]) return ir::kNoValue;
      in.push_back(value[size_t(a)].data());
      in_types.push_back(g.type(a));
    }
    std::vector<std::byte> bytes(n.type.bytes());
    exec::run_reference(n.op, n.attrs, in_types, in.data(), n.type, bytes.data(), n.loc);
    // A source is a constant already, and a reshape a view of one (its
    // bytes, with no kernel): kept as they are, for their readers.
    if (source || n.op == Op::reshape) {
      value[size_t(v)] = std::move(bytes);
      known[size_t(v)] = true;
      return ir::kNoValue;
    }
    std::vector<double> values;
    if (!as_constant_values(n.type, bytes, values)) return ir::kNoValue;
    value[size_t(v)] = std::move(bytes);
    known[size_t(v)] = true;
    return append(out, ir::Node{Op::constant,
                                {},
                                ir::make_attrs<Op::constant>({{"value", std::move(values)}}),
                                renamed.type,
                                renamed.loc,
                                renamed.stage,
                                nullptr});
  });
}

}  // namespace ws::lower
