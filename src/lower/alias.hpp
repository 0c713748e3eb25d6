// alias: where each in-place update is written.
//
// An output that updates input j is written straight into j's storage when
// that is safe: the value is computed by a kernel (not an input, not already
// another output), every other reader of j's old value runs before that
// kernel, and if the kernel itself reads j it is elementwise (each element is
// read before it is overwritten). Otherwise the value is computed elsewhere
// and copied into j after the last kernel, and the copy is counted.
//
// A loop fusion writes its result `out` over the storage of its operand `in`
// (an update of that operand, or a result given its dying block) only when
// its body reads element i of that operand only to compute element i of the
// result: directly, at the result's shape (a later step's read there is the
// loop's to order: fused_loop.hpp), or, for a reduction's result, through a
// broadcast over the reduced dims alone (a LayerNorm's mean, read by its own
// row's loop, which runs before that row's result is written). Any other
// read through a broadcast reads an element at other positions too, and a
// read at another shape (the loop against a per-result value) at other
// times: a result element could land before it. A product loop's product
// reads its operands whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/graph.hpp"

namespace ws::lower {

struct UpdateCandidate {
  int64_t producer_pos;     // kernel computing the new value
  bool producer_reads_old;  // that kernel reads the old value too
  bool producer_elementwise;
  std::vector<int64_t> old_reader_pos;  // every other reader of the old value
};

bool can_update_in_place(const UpdateCandidate& c);

// Whether a fusion with this body may write result `out` over operand `in`
// (indices into the body's outputs and inputs).
bool fused_result_may_overwrite(const ir::Graph& body, size_t in, size_t out);

}  // namespace ws::lower
