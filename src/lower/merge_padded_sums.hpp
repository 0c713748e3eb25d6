// merge_padded_sums: a sum of zero-padded pieces that do not overlap is the
// concatenation of the pieces.
//
//   x = concat(0[256], a)                y = concat(c, b, a)
//   y = add(add(x, concat(0, b, 0)),  =>
//           concat(c, 0[256]))
//
// The gradient of a slice pads it with zeros back to its operand's shape;
// attention slices q, k and v out of one product, so the product's gradient
// is the sum of three padded pieces: three concatenations, two zero fills
// and two additions over the whole array become one concatenation. An add
// is rewritten when both operands are concatenations along one axis whose
// pieces are zero `full`s or values, and where one has a value the other is
// zero. The result is exact but for the sign of a zero: a piece element -0
// plus the padding's +0 is +0, and the concatenation keeps -0.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph merge_padded_sums(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
