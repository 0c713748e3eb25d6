// The VJP rules of the unary math functions: each the derivative times the
// output gradient, in the IR's own ops.
#include "autograd/vjp_detail.hpp"
#include "ir/op_error.hpp"

namespace ws::autograd::vjp_detail {
namespace {

using ir::Op;
using ir::ValueId;
using Dargs = std::vector<ValueId>;

void vjp_tanh(const VjpContext& c, Dargs& d) {  // 1 - tanh²
  d[0] = mul(c, c.dy, c.b.binary(Op::sub, scalar_like(c, 1, c.out), mul(c, c.out, c.out)));
}
void vjp_sigmoid(const VjpContext& c, Dargs& d) {  // s (1 - s)
  ValueId one_minus = c.b.binary(Op::sub, scalar_like(c, 1, c.out), c.out);
  d[0] = mul(c, c.dy, mul(c, c.out, one_minus));
}
void vjp_sqrt(const VjpContext& c, Dargs& d) {  // 1 / (2 sqrt x)
  d[0] = c.b.binary(Op::div, mul(c, c.dy, scalar_like(c, 0.5, c.out)), c.out);
}
void vjp_rsqrt(const VjpContext& c, Dargs& d) {  // -x^(-3/2) / 2
  ValueId cube = mul(c, c.out, mul(c, c.out, c.out));
  d[0] = mul(c, c.dy, mul(c, cube, scalar_like(c, -0.5, c.out)));
}
void vjp_expm1(const VjpContext& c, Dargs& d) {  // e^x
  d[0] = mul(c, c.dy, c.b.unary(Op::exp, arg(c, 0)));
}
void vjp_log1p(const VjpContext& c, Dargs& d) {  // 1 / (1 + x)
  ValueId x = arg(c, 0);
  d[0] = c.b.binary(Op::div, c.dy, c.b.binary(Op::add, x, scalar_like(c, 1, x)));
}
void vjp_erf(const VjpContext& c, Dargs& d) {  // 2/sqrt(pi) exp(-x²)
  ValueId x = arg(c, 0);
  ValueId e = c.b.unary(Op::exp, c.b.unary(Op::neg, mul(c, x, x)));
  d[0] = mul(c, c.dy, mul(c, e, scalar_like(c, 1.1283791670955126, x)));
}
void vjp_erfinv(const VjpContext& c, Dargs& d) {  // sqrt(pi)/2 exp(erfinv(x)²)
  d[0] = mul(
      c, c.dy,
      mul(c, c.b.unary(Op::exp, mul(c, c.out, c.out)), scalar_like(c, 0.88622692545275801, c.out)));
}
void vjp_lgamma(const VjpContext& c, Dargs& d) {  // digamma x
  d[0] = mul(c, c.dy, c.b.unary(Op::digamma, arg(c, 0)));
}
void vjp_digamma(const VjpContext& c, Dargs& d) {  // trigamma x
  d[0] = mul(c, c.dy, c.b.unary(Op::trigamma, arg(c, 0)));
}
void vjp_trigamma(const VjpContext& c, Dargs&) {  // polygamma(2, x): not built
  ir::fail_op(Op::trigamma,
              "its gradient, polygamma(2, x), is not supported (trigamma, polygamma(1, x), is "
              "differentiated only as digamma's gradient)",
              c.node.loc);
}
void vjp_sin(const VjpContext& c, Dargs& d) {  // cos x
  d[0] = mul(c, c.dy, c.b.unary(Op::cos, arg(c, 0)));
}
void vjp_cos(const VjpContext& c, Dargs& d) {  // -sin x
  d[0] = mul(c, c.dy, c.b.unary(Op::neg, c.b.unary(Op::sin, arg(c, 0))));
}
// tan, the inverse trigonometric and the hyperbolic functions: torch's
// formulas (derivatives.yaml), term for term.
void vjp_tan(const VjpContext& c, Dargs& d) {  // 1 + tan² x
  d[0] = mul(c, c.dy, c.b.binary(Op::add, mul(c, c.out, c.out), scalar_like(c, 1, c.out)));
}
ValueId square_plus(const VjpContext& c, ValueId x, double v) {  // x² + v
  return c.b.binary(Op::add, mul(c, x, x), scalar_like(c, v, x));
}
ValueId one_minus_square(const VjpContext& c, ValueId x) {  // 1 - x², as torch's -x·x + 1
  return c.b.binary(Op::add, c.b.unary(Op::neg, mul(c, x, x)), scalar_like(c, 1, x));
}
void vjp_atan(const VjpContext& c, Dargs& d) {  // 1 / (x² + 1)
  d[0] = c.b.binary(Op::div, c.dy, square_plus(c, arg(c, 0), 1));
}
void vjp_asin(const VjpContext& c, Dargs& d) {  // rsqrt(1 - x²)
  d[0] = mul(c, c.dy, c.b.unary(Op::rsqrt, one_minus_square(c, arg(c, 0))));
}
void vjp_acos(const VjpContext& c, Dargs& d) {  // -rsqrt(1 - x²)
  d[0] = mul(c, c.b.unary(Op::neg, c.dy), c.b.unary(Op::rsqrt, one_minus_square(c, arg(c, 0))));
}
void vjp_atanh(const VjpContext& c, Dargs& d) {  // 1 / (1 - x²)
  d[0] = c.b.binary(Op::div, c.dy, one_minus_square(c, arg(c, 0)));
}
void vjp_asinh(const VjpContext& c, Dargs& d) {  // rsqrt(x² + 1)
  d[0] = mul(c, c.dy, c.b.unary(Op::rsqrt, square_plus(c, arg(c, 0), 1)));
}
void vjp_acosh(const VjpContext& c, Dargs& d) {  // rsqrt(x² - 1)
  d[0] = mul(c, c.dy, c.b.unary(Op::rsqrt, square_plus(c, arg(c, 0), -1)));
}
void vjp_sinh(const VjpContext& c, Dargs& d) {  // cosh x
  d[0] = mul(c, c.dy, c.b.unary(Op::cosh, arg(c, 0)));
}
void vjp_cosh(const VjpContext& c, Dargs& d) {  // sinh x
  d[0] = mul(c, c.dy, c.b.unary(Op::sinh, arg(c, 0)));
}

}  // namespace

VjpRule math_rule(Op op) {
  switch (op) {
    case Op::tanh: return vjp_tanh;
    case Op::sigmoid: return vjp_sigmoid;
    case Op::sqrt: return vjp_sqrt;
    case Op::rsqrt: return vjp_rsqrt;
    case Op::expm1: return vjp_expm1;
    case Op::log1p: return vjp_log1p;
    case Op::erf: return vjp_erf;
    case Op::erfinv: return vjp_erfinv;
    case Op::lgamma: return vjp_lgamma;
    case Op::digamma: return vjp_digamma;
    case Op::trigamma: return vjp_trigamma;
    case Op::sin: return vjp_sin;
    case Op::cos: return vjp_cos;
    case Op::tan: return vjp_tan;
    case Op::atan: return vjp_atan;
    case Op::asin: return vjp_asin;
    case Op::acos: return vjp_acos;
    case Op::atanh: return vjp_atanh;
    case Op::asinh: return vjp_asinh;
    case Op::acosh: return vjp_acosh;
    case Op::sinh: return vjp_sinh;
    case Op::cosh: return vjp_cosh;
    default: return nullptr;
  }
}

}  // namespace ws::autograd::vjp_detail
