#include "lower/merge_padded_sums.hpp"

#include <algorithm>

#include "ir/attr.hpp"
#include "lower/rewrite.hpp"

namespace ws::lower {

using ir::Op;
using ir::ValueId;

namespace {

// A range of a concatenation's axis, and the value there (none: zeros).
struct Piece {
  int64_t begin, end;
  ValueId value;
};

// The pieces of x along its axis when x is a concatenation.
bool pieces_of(const ir::Graph& g, ValueId x, int64_t& axis, std::vector<Piece>& out) {
  const ir::Node& n = g.node(x);
  if (n.op != Op::concat) return false;
  axis = ir::attr<Op::concat, "axis">(n);
  if (axis < 0) axis += n.type.rank();
  int64_t at = 0;
  for (ValueId a : n.args) {
    const int64_t len = g.type(a).shape[size_t(axis)];
    out.push_back({at, at + len, is_zero(g, a) ? ir::kNoValue : a});
    at += len;
  }
  return true;
}

// The value piece of `ps` that is [b, e), kNoValue where ps is zero; false
// when a value piece covers part of [b, e) only.
bool value_at(const std::vector<Piece>& ps, int64_t b, int64_t e, ValueId& v) {
  v = ir::kNoValue;
  for (const Piece& p : ps)
    if (p.value != ir::kNoValue && p.begin < e && b < p.end) {
      v = p.value;
      return p.begin == b && p.end == e;
    }
  return true;
}

// The pieces of x + y, when the value pieces of the two do not overlap
// (where one has a value, the other is zero).
bool merged(const std::vector<Piece>& x, const std::vector<Piece>& y, std::vector<Piece>& out) {
  std::vector<int64_t> cuts = {0, x.back().end};
  for (const std::vector<Piece>* ps : {&x, &y})
    for (const Piece& p : *ps)
      if (p.value != ir::kNoValue) cuts.push_back(p.begin), cuts.push_back(p.end);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const int64_t b = cuts[i], e = cuts[i + 1];
    ValueId vx, vy;
    if (!value_at(x, b, e, vx) || !value_at(y, b, e, vy)) return false;
    if (vx != ir::kNoValue && vy != ir::kNoValue) return false;
    const ValueId v = vx != ir::kNoValue ? vx : vy;
    if (v == ir::kNoValue && !out.empty() && out.back().value == ir::kNoValue)
      out.back().end = e;  // neighbouring zeros are one piece
    else
      out.push_back({b, e, v});
  }
  return true;
}

}  // namespace

ir::Graph merge_padded_sums(const ir::Graph& g, bool* changed) {
  return rewrite_nodes(g, changed, [](ir::Graph& out, ValueId, const ir::Node& n) {
    int64_t ax = 0, ay = 0;
    std::vector<Piece> px, py, sum;
    if (n.op != Op::add || !pieces_of(out, n.args[0], ax, px) ||
        !pieces_of(out, n.args[1], ay, py) || ax != ay || !merged(px, py, sum))
      return ir::kNoValue;
    const ir::Attrs axis = ir::make_attrs<Op::concat>({{"axis", ax}});
    ir::Node cat{Op::concat, {}, axis, n.type, n.loc, n.stage, nullptr};
    const ir::Attrs zero = ir::make_attrs<Op::full>({{"value", 0.0}});
    for (const Piece& p : sum) {
      if (p.value != ir::kNoValue) {
        cat.args.push_back(p.value);
        continue;
      }
      ir::Type t = n.type;
      t.shape[size_t(ax)] = p.end - p.begin;
      cat.args.push_back(append(out, ir::Node{Op::full, {}, zero, t, n.loc, n.stage, nullptr}));
    }
    return cat.args.size() == 1 ? cat.args[0] : append(out, std::move(cat));
  });
}

}  // namespace ws::lower
