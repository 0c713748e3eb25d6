// move_reshapes: an elementwise op on reshaped values runs on the values
// before the reshape, and the reshape moves after it.
//
//   r = reshape(x)                 y' = mul(x, full 2)   (shape of x)
//   y = mul(r, full 2)        =>   y  = reshape(y')
//
// A reshape keeps the row-major order of the elements, so an elementwise op
// computes the same element i either way. This lets ops join the group of
// the value they read: LayerNorm's statistics are reduced to [B, T] and
// reshaped to [B, T, 1] to broadcast along rows, and the ops between (the
// epsilon, the rsqrt, the gradient's scaling by 1/C) would otherwise be
// kernels of their own, of another shape than the reduction's epilogue. The
// rewrite applies where every operand is a reshape from one shape, a
// `full`, or a broadcast of a 0-d value, and the op is not a graph output (a
// reshaped output is a copy). It chains: what reads the moved reshape is
// looked at next. Reshapes are views, so none costs a kernel. A reshape of
// a reshape reads the first one's operand, and a reshape back to its
// operand's shape is that operand (a BatchNorm gradient reduced to [C],
// reshaped to [1, C, 1, 1] and back to [C] for its parameter's update).
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph move_reshapes(const ir::Graph& g);

}  // namespace ws::lower
