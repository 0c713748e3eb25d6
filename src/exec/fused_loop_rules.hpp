// What the fused loop kernel (fused_loop.hpp) computes, for the fuse pass
// (lower/fuse_elementwise.cpp) to group that and nothing else, and the
// pieces the kernel is planned from (fused_loop_plan.cpp): a node is fusible
// when it has a step function, a group fits when its buffers do, so the
// pass and the kernel cannot disagree.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.hpp"

namespace ws::exec {

// Buffers a fused kernel holds at once, on the stack: 24 x 16 KiB. With 16,
// a LayerNorm weight's gradient (its normalized input recomputed in the
// loop) and its AdamW update (13 ops) did not fit one kernel: gpt ran 5
// more kernels, and 10 more with recomputation.
constexpr int kMaxFusedBuffers = 24;

// Rows at least this long are read in segments (a broadcast operand as one
// value or a run per segment); along shorter rows broadcast operands are
// gathered per chunk. The fuse pass leaves an op reading a value repeated
// along shorter rows unfused.
constexpr int64_t kMinSegment = 16;

// Buffers the kernel for `body` needs at most (every result buffered).
int fused_buffers_needed(const ir::Graph& body);

// Bytes of scratch the kernel for `body` needs (a column sum's sums, and
// its groups' partial sums; a product loop's staged operand; 0 for every
// other fusion).
int64_t fused_scratch_bytes(const ir::Graph& body);

// A column sum's rows (of [M, K], summed over M) in aligned groups of
// `blocks` blocks of kSumBlock rows each (a power of two: every group is
// one subtree of each column's carry tree, reduce.hpp), at most 64 groups.
struct ColumnGroups {
  int64_t blocks = 1, groups = 1;
  int64_t all = 1;  // blocks of the rows
};
ColumnGroups column_groups(int64_t rows);
// Where a column sum's scratch holds the operand (in phases) or the groups'
// sums (streamed): after the `cols` sums of `esize` bytes, at a 64-byte
// boundary.
inline int64_t column_work_offset(int64_t cols, int64_t esize) {
  return (cols * esize + 63) / 64 * 64;
}

// True when a fused loop computes reduction `n` of `g`: a sum or maximum of
// f32 or f64 whose operand's innermost dim is reduced (rows), or a sum that
// keeps the innermost (columns).
bool fusible_reduction(const ir::Graph& g, ir::ValueId n);

// True when the fused loop kernel computes `n` (of graph `g`) in a loop body:
// an elementwise op on f32/f64 operands (comparisons, select, and converts
// between f32, f64 and bool included), or a random draw of f32/f64.
bool fusible_elementwise(const ir::Graph& g, ir::ValueId n);

// ---------------------------------------------------------------------------
// The pieces the kernel is planned from.

// A step of a loop body over n elements, y = op(a, b, c): bit i of `arrays`
// is set when operand i is an array of n elements, clear when it is one
// value.
using FusedStepFn = void (*)(const void* a, const void* b, const void* c, void* y, int64_t n,
                             int arrays);
// A pair step (fused_pairs.cpp): y = o2(o1(a, b), c), or o2(c, o1(a, b))
// when `second`, in one pass, each op rounding as its own step does; for
// o1 and o2 among add, sub and mul on f32 or f64 (else nullptr).
FusedStepFn fused_pair_fn(ir::Op o1, ir::Op o2, bool second, DType t);
// A random draw: y[j] = number offset + j of the stream.
using FusedDrawFn = void (*)(uint64_t seed, uint64_t offset, void* y, int64_t n);

// The step function for node n of `body`, or nullptr.
FusedStepFn fused_step_fn(const ir::Graph& body, const ir::Node& n);
// The draw for a result of dtype d (as the random_uniform kernel draws), or
// nullptr.
FusedDrawFn fused_draw_fn(DType d);

// Buffers for the computed values in `buffered` (and the gathered ones,
// which hold theirs for the whole chunk), reusing a buffer once its value is
// read for the last time. A step may write over an operand it reads last
// (every step computes element i from element i alone) when the element
// sizes agree. Returns the buffer count; buf[v] is v's buffer.
int assign_fused_buffers(const ir::Graph& body, const std::vector<bool>& buffered,
                         const std::vector<bool>& gathered, const std::vector<bool>& held_to_end,
                         std::vector<int32_t>& buf);

// The operand walk of a reduction over `axes` of `in`, merged: kept and
// reduced dims, outer to inner, with their strides in the operand.
void split_reduction_walk(const Shape& in, const std::vector<int64_t>& axes, Shape& kept,
                          std::vector<int64_t>& kept_stride, Shape& reduced,
                          std::vector<int64_t>& red_stride);

}  // namespace ws::exec
