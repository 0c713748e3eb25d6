#include "lower/block_owners.hpp"

#include <algorithm>

#include "exec/kernels.hpp"
#include "lower/alias.hpp"

namespace ws::lower {

using ir::Op;
using ir::ValueId;

bool fused_overwrites(const ir::Graph& g, const Pending& pk, ValueId out, size_t i) {
  const size_t j =
      out == pk.out
          ? 0
          : size_t(std::find(pk.extra.begin(), pk.extra.end(), out) - pk.extra.begin()) + 1;
  return fused_result_may_overwrite(*g.node(pk.node).body, i, j);
}

std::vector<ValueId> block_owners(const ir::Graph& g, const std::vector<Pending>& kernels,
                                  const std::vector<int32_t>& slot,
                                  const std::vector<int64_t>& last) {
  std::vector<ValueId> owner(g.nodes.size(), ir::kNoValue);
  for (size_t k = 0; k < kernels.size(); ++k) {
    const Pending& pk = kernels[k];
    std::vector<bool> donated(pk.ins.size(), false);
    pk.for_each_out([&](ValueId out) {
      if (slot[size_t(out)] >= 0) return;
      owner[size_t(out)] = out;
      const ir::Node& n = g.node(pk.node);
      const DType dt = g.type(n.args.empty() ? out : n.args.back()).dtype;
      // A wait's value is its collective's buffer, where the collective wrote it.
      if (n.op == Op::wait && owner[size_t(pk.ins[0])] != ir::kNoValue) {
        owner[size_t(out)] = owner[size_t(pk.ins[0])];
        return;
      }
      const int64_t acc = n.op == Op::matmul_bias_add ? 3 : n.op == Op::matmul_add ? 2 : -1;
      if (acc < 0 && (pk.backend || (n.op != Op::fusion && !exec::computes_in_place(n.op, dt))))
        return;
      for (size_t i = 0; i < pk.ins.size(); ++i) {
        if (acc >= 0 && int64_t(i) != acc) continue;
        const ValueId a = pk.ins[i];
        if (owner[size_t(a)] == ir::kNoValue || last[size_t(a)] != int64_t(k) ||
            g.type(a).bytes() != g.type(out).bytes())
          continue;
        // Every operand the kernel reads from that value (views of one
        // value are several operands) must allow the overwrite, and none
        // may have been given to another result (two results of a fusion
        // were written into one block); a product reads it only as its
        // accumulator.
        bool ok = true;
        for (size_t i2 = 0; i2 < pk.ins.size() && ok; ++i2)
          ok = pk.ins[i2] != a || ((acc < 0 || int64_t(i2) == acc) && !donated[i2] &&
                                   !pk.scalar[i2] && !pk.through[i2] && pk.in_offsets[i2] == 0 &&
                                   (n.op != Op::fusion || fused_overwrites(g, pk, out, i2)));
        if (!ok) continue;
        owner[size_t(out)] = owner[size_t(a)];
        for (size_t i2 = 0; i2 < pk.ins.size(); ++i2) donated[i2] = donated[i2] || pk.ins[i2] == a;
        break;
      }
    });
  }
  return owner;
}

}  // namespace ws::lower
