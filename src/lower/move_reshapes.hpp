// move_reshapes: an elementwise op moves to the side of a reshape where
// what it can fuse with is.
//
//   r = reshape(x)                 y' = mul(x, full 2)   (shape of x)
//   y = mul(r, full 2)        =>   y  = reshape(y')
//
// A reshape keeps the row-major order of the elements, so an elementwise op
// computes the same element i at either shape. An op whose operands are all
// reshapes from one shape (or one-element fulls and broadcasts, made again
// at that shape), one of them of a value an elementwise op or a reduction
// computes, runs at that shape and the reshape moves after it: LayerNorm's
// statistics are reduced to [B, T] and reshaped to [B, T, 1] to broadcast
// along rows, and the ops between (the epsilon, the rsqrt, the gradient's
// scaling by 1/C) join the reduction's epilogue instead of being kernels of
// another shape. The other way, a reshape of an op read only there, whose
// operands come from no such op (a product, an input), runs the op after
// the reshape, on views of its operands: a scaled product reshaped for the
// dropout that follows joins the dropout's loop. Graph outputs stay (a
// reshaped output is a copy). A reshape of a reshape reads the first's
// operand, and a reshape back to its operand's shape is that operand (a
// BatchNorm gradient reduced to [C], reshaped to [1, C, 1, 1] and back to
// [C] for its parameter's update). Reshapes are views: none costs a kernel.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph move_reshapes(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
