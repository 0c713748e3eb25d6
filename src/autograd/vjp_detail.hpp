// What the VJP rules' files share: the helpers every rule uses, and the
// rules of the elementwise math functions (vjp_math_rules.cpp).
#pragma once

#include <vector>

#include "autograd/vjp.hpp"

namespace ws::autograd::vjp_detail {

inline ir::ValueId arg(const VjpContext& c, int i) { return c.node.args[size_t(i)]; }
inline ir::ValueId scalar_like(const VjpContext& c, double v, ir::ValueId like) {
  return c.b.full(v, c.b.type(like));
}
inline ir::ValueId mul(const VjpContext& c, ir::ValueId a, ir::ValueId b) {
  return c.b.binary(ir::Op::mul, a, b);
}

// The rule of a unary math function (tanh, sigmoid, the trigonometric,
// hyperbolic and special functions); nullptr for any other op.
VjpRule math_rule(ir::Op op);

}  // namespace ws::autograd::vjp_detail
