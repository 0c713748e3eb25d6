// The VJP table. Each rule is a few lines over the Builder; shapes always
// match the operand (broadcasting is explicit in the IR, so its rule is the
// only place a gradient is reduced).
#include <algorithm>

#include "autograd/vjp.hpp"

namespace ws::autograd {
namespace {

using ir::Op;
using ir::ValueId;
using Dargs = std::vector<ValueId>;

ValueId arg(const VjpContext& c, int i) { return c.node.args[size_t(i)]; }
ValueId zeros_like(const VjpContext& c, ValueId v) { return c.b.full(0.0, c.b.type(v)); }

void vjp_add(const VjpContext& c, Dargs& d) { d[0] = d[1] = c.dy; }

void vjp_sub(const VjpContext& c, Dargs& d) {
  d[0] = c.dy;
  if (c.want[1]) d[1] = c.b.unary(Op::neg, c.dy);
}

void vjp_mul(const VjpContext& c, Dargs& d) {
  if (c.want[0]) d[0] = c.b.binary(Op::mul, c.dy, arg(c, 1));
  if (c.want[1]) d[1] = c.b.binary(Op::mul, c.dy, arg(c, 0));
}

void vjp_div(const VjpContext& c, Dargs& d) {
  if (c.want[0]) d[0] = c.b.binary(Op::div, c.dy, arg(c, 1));
  if (c.want[1])  // d(a/b)/db = -(a/b)/b
    d[1] = c.b.unary(Op::neg, c.b.binary(Op::div, c.b.binary(Op::mul, c.dy, c.out), arg(c, 1)));
}

void vjp_neg(const VjpContext& c, Dargs& d) { d[0] = c.b.unary(Op::neg, c.dy); }
void vjp_exp(const VjpContext& c, Dargs& d) { d[0] = c.b.binary(Op::mul, c.dy, c.out); }
void vjp_log(const VjpContext& c, Dargs& d) { d[0] = c.b.binary(Op::div, c.dy, arg(c, 0)); }

// Ties split the gradient evenly, as PyTorch's maximum does.
void vjp_maximum(const VjpContext& c, Dargs& d) {
  ValueId a = arg(c, 0), b = arg(c, 1);
  ValueId half = c.b.binary(Op::mul, c.dy, c.b.full(0.5, c.b.type(c.dy)));
  ValueId tie = c.b.binary(Op::eq, a, b), zero = zeros_like(c, c.dy);
  ValueId tied = c.b.add(Op::select, {tie, half, zero});
  if (c.want[0]) d[0] = c.b.add(Op::select, {c.b.binary(Op::gt, a, b), c.dy, tied});
  if (c.want[1]) d[1] = c.b.add(Op::select, {c.b.binary(Op::lt, a, b), c.dy, tied});
}

void vjp_select(const VjpContext& c, Dargs& d) {
  ValueId zero = zeros_like(c, c.dy);
  if (c.want[1]) d[1] = c.b.add(Op::select, {arg(c, 0), c.dy, zero});
  if (c.want[2]) d[2] = c.b.add(Op::select, {arg(c, 0), zero, c.dy});
}

void vjp_convert(const VjpContext& c, Dargs& d) {
  d[0] = c.b.convert(c.dy, c.b.type(arg(c, 0)).dtype);
}

// C = op(A) op(B); each case writes dA, dB in their stored orientation.
void vjp_matmul(const VjpContext& c, Dargs& d) {
  ValueId a = arg(c, 0), b = arg(c, 1), dc = c.dy;
  bool ta = c.node.attrs.i_or("transpose_a", 0), tb = c.node.attrs.i_or("transpose_b", 0);
  if (c.want[0])
    d[0] = ta ? c.b.matmul(b, dc, tb, true)     // dA = op(B) dCᵀ
              : c.b.matmul(dc, b, false, !tb);  // dA = dC op(B)ᵀ
  if (c.want[1])
    d[1] = tb ? c.b.matmul(dc, a, true, ta)     // dB = dCᵀ op(A)
              : c.b.matmul(a, dc, !ta, false);  // dB = op(A)ᵀ dC
}

std::vector<int64_t> kept_axes(int64_t rank, const std::vector<int64_t>& axes) {
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end() &&
        std::find(axes.begin(), axes.end(), d - rank) == axes.end())
      kept.push_back(d);
  return kept;
}

ValueId broadcast_back(const VjpContext& c, ValueId v) {
  const ir::Type& x = c.b.type(arg(c, 0));
  return c.b.add(
      Op::broadcast, {v},
      ir::Attrs{{"dims", kept_axes(x.rank(), c.node.attrs.ints("axes"))}, {"shape", x.shape}});
}

void vjp_reduce_sum(const VjpContext& c, Dargs& d) { d[0] = broadcast_back(c, c.dy); }

// The gradient goes to every maximal element, split evenly among ties.
void vjp_reduce_max(const VjpContext& c, Dargs& d) {
  ValueId x = arg(c, 0);
  DType dt = c.b.type(x).dtype;
  ValueId mask = c.b.binary(Op::eq, x, broadcast_back(c, c.out));
  ValueId count = c.b.add(Op::reduce_sum, {c.b.convert(mask, dt)}, c.node.attrs);
  ValueId share = broadcast_back(c, c.b.binary(Op::div, c.dy, count));
  d[0] = c.b.add(Op::select, {mask, share, zeros_like(c, share)});
}

void vjp_broadcast(const VjpContext& c, Dargs& d) {
  const ir::Type& x = c.b.type(arg(c, 0));
  const std::vector<int64_t>& dims = c.node.attrs.ints("dims");
  const Shape& out = c.node.type.shape;
  std::vector<int64_t> axes;
  for (int64_t o = 0; o < int64_t(out.size()); ++o) {
    auto it = std::find(dims.begin(), dims.end(), o);
    if (it == dims.end() || (x.shape[size_t(it - dims.begin())] == 1 && out[size_t(o)] != 1))
      axes.push_back(o);
  }
  ValueId r = axes.empty() ? c.dy : c.b.reduce(Op::reduce_sum, c.dy, axes);
  d[0] = c.b.reshape(r, x.shape);
}

void vjp_reshape(const VjpContext& c, Dargs& d) {
  d[0] = c.b.reshape(c.dy, c.b.type(arg(c, 0)).shape);
}

void vjp_transpose(const VjpContext& c, Dargs& d) {
  const std::vector<int64_t>& perm = c.node.attrs.ints("perm");
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
  d[0] = c.b.add(Op::transpose, {c.dy}, ir::Attrs{{"perm", inv}});
}

}  // namespace

VjpRule vjp_rule(Op op) {
  switch (op) {
    case Op::add: return vjp_add;
    case Op::broadcast: return vjp_broadcast;
    case Op::convert: return vjp_convert;
    case Op::div: return vjp_div;
    case Op::exp: return vjp_exp;
    case Op::log: return vjp_log;
    case Op::matmul: return vjp_matmul;
    case Op::maximum: return vjp_maximum;
    case Op::mul: return vjp_mul;
    case Op::neg: return vjp_neg;
    case Op::reduce_max: return vjp_reduce_max;
    case Op::reduce_sum: return vjp_reduce_sum;
    case Op::reshape: return vjp_reshape;
    case Op::select: return vjp_select;
    case Op::sub: return vjp_sub;
    case Op::transpose: return vjp_transpose;
    // Not differentiable: sources, comparisons, indexing by integers.
    case Op::constant:
    case Op::eq:
    case Op::full:
    case Op::ge:
    case Op::gt:
    case Op::input:
    case Op::le:
    case Op::lt:
    case Op::ne:
    case Op::one_hot: return nullptr;
  }
  return nullptr;
}

}  // namespace ws::autograd
