// The kernels the lowering collects before it assigns slots, and which of
// their results may be written into an operand's block (in place).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/program.hpp"
#include "ir/graph.hpp"

namespace ws::lower {

// A kernel before slots are assigned: it writes `out` (a value) or, for a
// copy, reads `ins[0]` and writes `copy_to` (a slot).
struct Pending {
  ir::ValueId out = ir::kNoValue;
  ir::ValueId node = ir::kNoValue;  // the node it computes, when not `out`'s own
  std::vector<ir::ValueId> ins;
  std::vector<bool> scalar;   // operand read as one value
  std::vector<bool> through;  // operand a broadcast, read from its source through strides
  int32_t copy_to = -1;
  int64_t scratch_bytes = 0;                       // temporaries while it runs
  int32_t scratch = -1;                            // their slot
  std::shared_ptr<const exec::BackendOp> backend;  // products and convolutions
  std::vector<ir::ValueId> extra;              // a fusion's results 1.. (kNoValue: nobody reads it)
  std::vector<int64_t> in_offsets;             // bytes into each operand's storage (a view)
  std::shared_ptr<dist::InFlight> collective;  // a collective's start and its wait share it

  // Every value the kernel writes.
  template <class F>
  void for_each_out(F&& f) const {
    if (out != ir::kNoValue) f(out);
    for (ir::ValueId e : extra)
      if (e != ir::kNoValue) f(e);
  }
};

// Whether fusion kernel pk may write its result `out` over its operand i
// (alias.hpp).
bool fused_overwrites(const ir::Graph& g, const Pending& pk, ir::ValueId out, size_t i);

// The value whose planned block each result of `kernels` uses: itself,
// unless it is written in place over an operand's block (kNoValue for a
// value with a slot already or none planned). In place: an elementwise
// kernel writes over a full-size operand of its size that dies there (a
// fusion under alias.hpp's rule), and a product that accumulates into an
// operand (matmul_bias_add's residual, matmul_add's accumulator) over
// that one. `last[v]` is the position of the last kernel reading v. The
// block lives from its owner's definition to the last read of anything in
// it.
std::vector<ir::ValueId> block_owners(const ir::Graph& g, const std::vector<Pending>& kernels,
                                      const std::vector<int32_t>& slot,
                                      const std::vector<int64_t>& last);

}  // namespace ws::lower
