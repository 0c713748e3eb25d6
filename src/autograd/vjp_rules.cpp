// The VJP table. Each rule is a few lines over the Builder; shapes always
// match the operand (broadcasting is explicit in the IR, so its rule is the
// only place a gradient is reduced). The unary math functions' rules are in
// vjp_math_rules.cpp.
#include <algorithm>
#include <array>
#include <utility>

#include "autograd/vjp.hpp"
#include "autograd/vjp_detail.hpp"
#include "ir/attr.hpp"

namespace ws::autograd {
namespace {

using ir::Op;
using ir::ValueId;
using Dargs = std::vector<ValueId>;
using vjp_detail::arg;
using vjp_detail::math_rule;
using vjp_detail::mul;
using vjp_detail::scalar_like;

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
// The gradient summed over every reader of the identity's value, as one.
void vjp_identity(const VjpContext& c, Dargs& d) { d[0] = c.dy; }
void vjp_exp(const VjpContext& c, Dargs& d) { d[0] = c.b.binary(Op::mul, c.dy, c.out); }
void vjp_log(const VjpContext& c, Dargs& d) { d[0] = c.b.binary(Op::div, c.dy, arg(c, 0)); }

// atan2(a, b): d/da = b / (a² + b²), d/db = -a / (a² + b²), as PyTorch
// computes them (so at a = b = 0 both are NaN, as there).
void vjp_atan2(const VjpContext& c, Dargs& d) {
  ValueId a = arg(c, 0), b = arg(c, 1);
  ValueId r2 = c.b.binary(Op::add, mul(c, a, a), mul(c, b, b));
  ValueId recip = c.b.binary(Op::div, scalar_like(c, 1, r2), r2);
  if (c.want[0]) d[0] = mul(c, mul(c, c.dy, b), recip);
  if (c.want[1]) d[1] = mul(c, mul(c, c.dy, c.b.unary(Op::neg, a)), recip);
}
// fmod(a, b) = a - trunc(a / b) b: d/da = 1, d/db = -trunc(a / b), a / b
// rounded then truncated as torch's div(rounding_mode="trunc") (through i64
// below 2^52, where a double is whole beyond; a NaN stays).
void vjp_fmod(const VjpContext& c, Dargs& d) {
  if (c.want[0]) d[0] = c.dy;
  if (!c.want[1]) return;
  const ValueId a = arg(c, 0), b = arg(c, 1);
  const ir::Type t = c.b.type(a);
  const ValueId q = c.b.binary(Op::div, a, b);
  const ValueId whole = c.b.convert(c.b.convert(q, DType::i64), t.dtype);
  const ValueId size = c.b.binary(Op::maximum, q, c.b.unary(Op::neg, q));  // NaN for a NaN
  const ValueId small = c.b.binary(Op::lt, size, scalar_like(c, 0x1p52, q));
  const ValueId trunc = c.b.add(Op::select, {small, whole, q});
  d[1] = c.b.unary(Op::neg, mul(c, c.dy, trunc));
}

// d/da a^b = b a^(b-1); d/db a^b = a^b log a, taken as 0 where a = 0 (as
// PyTorch does, so 0^b with b > 0 has a finite exponent gradient).
void vjp_pow(const VjpContext& c, Dargs& d) {
  ValueId a = arg(c, 0), b = arg(c, 1);
  if (c.want[0]) {
    ValueId bm1 = c.b.binary(Op::sub, b, scalar_like(c, 1, b));
    d[0] = mul(c, c.dy, mul(c, b, c.b.binary(Op::pow, a, bm1)));
  }
  if (c.want[1]) {
    ValueId zero = zeros_like(c, a);
    ValueId g = mul(c, c.dy, mul(c, c.out, c.b.unary(Op::log, a)));
    d[1] = c.b.add(Op::select, {c.b.binary(Op::eq, a, zero), zero, g});
  }
}

// The axis of a slice or concat, from 0.
int64_t attr_axis(const VjpContext& c) {
  const int64_t ax = ir::attr<ir::OpSet{Op::slice, Op::concat}, "axis">(c.node);
  return ax < 0 ? ax + c.node.type.rank() : ax;
}

// The slice's gradient is dy placed back between zeros.
void vjp_slice(const VjpContext& c, Dargs& d) {
  const ir::Type x = c.b.type(arg(c, 0));
  const int64_t ax = attr_axis(c), start = ir::attr<Op::slice, "start">(c.node),
                end = ir::attr<Op::slice, "end">(c.node);
  std::vector<ValueId> parts;
  auto zeros = [&](int64_t len) {
    ir::Type t = x;
    t.shape[size_t(ax)] = len;
    parts.push_back(c.b.full(0.0, t));
  };
  if (start > 0) zeros(start);
  parts.push_back(c.dy);
  if (end < x.shape[size_t(ax)]) zeros(x.shape[size_t(ax)] - end);
  d[0] = parts.size() == 1 ? c.dy
                           : c.b.add(Op::concat, parts, ir::make_attrs<Op::concat>({{"axis", ax}}));
}

void vjp_concat(const VjpContext& c, Dargs& d) {
  const int64_t ax = attr_axis(c);
  int64_t off = 0;
  for (size_t i = 0; i < c.node.args.size(); ++i) {
    const int64_t len = c.b.type(c.node.args[i]).shape[size_t(ax)];
    if (c.want[i])
      d[i] = c.b.add(Op::slice, {c.dy},
                     ir::make_attrs<Op::slice>({{"axis", ax}, {"end", off + len}, {"start", off}}));
    off += len;
  }
}

void vjp_gather(const VjpContext& c, Dargs& d) {
  const int64_t rows = c.b.type(arg(c, 0)).shape[0];
  d[0] = c.b.add(Op::scatter_add, {arg(c, 1), c.dy},
                 ir::make_attrs<Op::scatter_add>({{"rows", rows}}));
}

// Torch's gradient (ctc_loss_grad): the loss's through log-probabilities.
void vjp_ctc_loss(const VjpContext& c, Dargs& d) {
  d[0] =
      c.b.add(Op::ctc_loss_grad, {arg(c, 0), arg(c, 1), arg(c, 2), arg(c, 3), c.dy}, c.node.attrs);
}

void vjp_scatter_add(const VjpContext& c, Dargs& d) {
  d[1] = c.b.add(Op::gather, {c.dy, arg(c, 0)});
}

// The node's attributes plus the shape of operand `i` as `name` of `op`.
template <Op op, ir::AttrName name>
ir::Attrs with_shape(const VjpContext& c, int i) {
  ir::Attrs a = c.node.attrs;
  ir::set_attr<op, name>(a, c.b.type(arg(c, i)).shape);
  return a;
}

// The weight's gradient comes first: it is the last reader of the layer's
// input (saved, or recomputed just before it), which then dies before the
// input's gradient is allocated. Measured on cnn (planned peak): 39.2 to
// 35.4 MiB in single_graph, 54.1 to 48.0 MiB in three_graph with the cut.
void vjp_conv2d(const VjpContext& c, Dargs& d) {
  if (c.want[1])
    d[1] = c.b.add(Op::conv2d_weight_grad, {arg(c, 0), c.dy},
                   with_shape<Op::conv2d_weight_grad, "weight_shape">(c, 1));
  if (c.want[0])
    d[0] = c.b.add(Op::conv2d_input_grad, {c.dy, arg(c, 1)},
                   with_shape<Op::conv2d_input_grad, "input_shape">(c, 0));
}

// conv2d_input_grad as a forward op (a transposed convolution): its input's
// gradient is the convolution of dy with w; its weight's, the weight
// gradient of that convolution, its input the output gradient.
void vjp_conv2d_input_grad(const VjpContext& c, Dargs& d) {
  ir::Attrs conv;
  for (const auto& [k, v] : c.node.attrs.items())
    if (k != "input_shape") conv.set(k, v);
  if (c.want[1]) {
    ir::Attrs a = conv;
    ir::set_attr<Op::conv2d_weight_grad, "weight_shape">(a, c.b.type(arg(c, 1)).shape);
    d[1] = c.b.add(Op::conv2d_weight_grad, {c.dy, arg(c, 0)}, a);
  }
  if (c.want[0]) d[0] = c.b.add(Op::conv2d, {c.dy, arg(c, 1)}, conv);
}

void vjp_max_pool2d(const VjpContext& c, Dargs& d) {
  d[0] = c.b.add(Op::max_pool2d_grad, {arg(c, 0), c.dy}, c.node.attrs);
}

void vjp_avg_pool2d(const VjpContext& c, Dargs& d) {
  d[0] = c.b.add(Op::avg_pool2d_grad, {c.dy}, with_shape<Op::avg_pool2d_grad, "input_shape">(c, 0));
}

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

// x's value, y's gradient: all of it to y, zero to x.
void vjp_straight_through(const VjpContext& c, Dargs& d) {
  if (c.want[0]) d[0] = zeros_like(c, c.dy);
  if (c.want[1]) d[1] = c.dy;
}

void vjp_convert(const VjpContext& c, Dargs& d) {
  d[0] = c.b.convert(c.dy, c.b.type(arg(c, 0)).dtype);
}

// C = op(A) op(B); each case writes dA, dB in their stored orientation.
void vjp_matmul(const VjpContext& c, Dargs& d) {
  ValueId a = arg(c, 0), b = arg(c, 1), dc = c.dy;
  const bool ta = ir::attr<Op::matmul, "transpose_a">(c.node),
             tb = ir::attr<Op::matmul, "transpose_b">(c.node);
  // dB first, as for a convolution: in a linear layer (x Wᵀ) it is the
  // weight's gradient, the last reader of the saved or recomputed x.
  if (c.want[1])
    d[1] = tb ? c.b.matmul(dc, a, true, ta)     // dB = dCᵀ op(A)
              : c.b.matmul(a, dc, !ta, false);  // dB = op(A)ᵀ dC
  if (c.want[0])
    d[0] = ta ? c.b.matmul(b, dc, tb, true)     // dA = op(B) dCᵀ
              : c.b.matmul(dc, b, false, !tb);  // dA = dC op(B)ᵀ
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
  return c.b.add(Op::broadcast, {v},
                 ir::make_attrs<Op::broadcast>(
                     {{"dims", kept_axes(x.rank(), ir::attr<ir::kReduceOps, "axes">(c.node))},
                      {"shape", x.shape}}));
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
  // A copy: the reduce below appends a node, which may move the graph's
  // nodes and leave a reference into them dangling.
  const ir::Type x = c.b.type(arg(c, 0));
  const std::vector<int64_t>& dims = ir::attr<Op::broadcast, "dims">(c.node);
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

// A collective's result is the same on every rank, and each rank's
// gradient is its share times the world size (the step averages the
// ranks' gradients): the adjoint of reducing the operands (sum or mean) is
// reducing the gradient the same way, then unpacking it.
void vjp_all_reduce_start(const VjpContext& c, Dargs& d) {
  const std::string& reduce = ir::attr<Op::all_reduce_start, "reduce">(c.node);
  std::vector<ir::Type> types;
  for (size_t i = 0; i < c.node.args.size(); ++i) types.push_back(c.b.type(arg(c, i)));
  const std::vector<ValueId> parts = c.b.unpack(c.b.all_reduce(c.dy, reduce), types);
  for (size_t i = 0; i < parts.size(); ++i)
    if (c.want[i]) d[i] = parts[i];
}

// With every rank's loss in the sum (as for all_reduce_start): rank r's
// part of the reduction is read by r alone, so each operand's adjoint is
// every rank's part of the gradient, gathered (over the world for a mean),
// and unpacked; the padding has none.
void vjp_reduce_scatter_start(const VjpContext& c, Dargs& d) {
  const std::string& reduce = ir::attr<Op::reduce_scatter_start, "reduce">(c.node);
  const int64_t world = ir::attr<Op::reduce_scatter_start, "world">(c.node);
  std::vector<ir::Type> types;
  for (size_t i = 0; i < c.node.args.size(); ++i) types.push_back(c.b.type(arg(c, i)));
  ValueId all = c.b.all_gather(c.dy, world);
  if (reduce == "mean") all = c.b.scale(all, c.b.scalar(1.0 / double(world), c.b.type(all).dtype));
  const std::vector<ValueId> parts = c.b.unpack(all, types);
  for (size_t i = 0; i < parts.size(); ++i)
    if (c.want[i]) d[i] = parts[i];
}

// Rank r's operand is part r of every rank's result: its adjoint is the
// sum over the ranks of their gradients' part r.
void vjp_all_gather_start(const VjpContext& c, Dargs& d) {
  d[0] = c.b.reduce_scatter({c.dy}, "sum", ir::attr<Op::all_gather_start, "world">(c.node));
}

// A wait passes its collective's result on unchanged.
void vjp_wait(const VjpContext& c, Dargs& d) { d[0] = c.dy; }

void vjp_reshape(const VjpContext& c, Dargs& d) {
  d[0] = c.b.reshape(c.dy, c.b.type(arg(c, 0)).shape);
}

void vjp_transpose(const VjpContext& c, Dargs& d) {
  const std::vector<int64_t>& perm = ir::attr<Op::transpose, "perm">(c.node);
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
  d[0] = c.b.add(Op::transpose, {c.dy}, ir::make_attrs<Op::transpose>({{"perm", inv}}));
}

// The rule each op is built with. A `switch` with no `default:`, so a new
// op in ops.def is a compile error here until it is given a rule or listed
// as not differentiable.
VjpRule builtin_rule(Op op) {
  switch (op) {
    case Op::add: return vjp_add;
    case Op::tanh:
    case Op::sigmoid:
    case Op::sqrt:
    case Op::rsqrt:
    case Op::expm1:
    case Op::log1p:
    case Op::erf:
    case Op::erfinv:
    case Op::lgamma:
    case Op::digamma:
    case Op::trigamma:
    case Op::sin:
    case Op::cos:
    case Op::tan:
    case Op::atan:
    case Op::asin:
    case Op::acos:
    case Op::atanh:
    case Op::asinh:
    case Op::acosh:
    case Op::sinh:
    case Op::cosh: return math_rule(op);  // vjp_math_rules.cpp
    case Op::all_reduce_start: return vjp_all_reduce_start;
    case Op::wait: return vjp_wait;
    case Op::reduce_scatter_start: return vjp_reduce_scatter_start;
    case Op::all_gather_start: return vjp_all_gather_start;
    case Op::local_shard: return nullptr;  // the optimizer's; never differentiated
    case Op::avg_pool2d: return vjp_avg_pool2d;
    case Op::concat: return vjp_concat;
    case Op::conv2d: return vjp_conv2d;
    case Op::conv2d_input_grad: return vjp_conv2d_input_grad;
    case Op::gather: return vjp_gather;
    case Op::ctc_loss: return vjp_ctc_loss;
    case Op::max_pool2d: return vjp_max_pool2d;
    case Op::pow: return vjp_pow;
    case Op::fmod: return vjp_fmod;
    case Op::atan2: return vjp_atan2;
    case Op::scatter_add: return vjp_scatter_add;
    case Op::slice: return vjp_slice;
    case Op::broadcast: return vjp_broadcast;
    case Op::convert: return vjp_convert;
    case Op::div: return vjp_div;
    case Op::exp: return vjp_exp;
    case Op::log: return vjp_log;
    case Op::matmul: return vjp_matmul;
    case Op::maximum: return vjp_maximum;
    case Op::mul: return vjp_mul;
    case Op::neg: return vjp_neg;
    case Op::identity:
    case Op::check: return vjp_identity;
    case Op::reduce_max: return vjp_reduce_max;
    case Op::reduce_sum: return vjp_reduce_sum;
    case Op::reshape: return vjp_reshape;
    case Op::select: return vjp_select;
    case Op::straight_through: return vjp_straight_through;
    case Op::sub: return vjp_sub;
    case Op::transpose: return vjp_transpose;
    // Not differentiable: sources, comparisons, indexing by integers,
    // random numbers, the gradient ops themselves (first order only),
    // and fusions, which lowering makes after differentiation.
    case Op::stop_gradient:
    case Op::fusion:
    case Op::fusion_result:
    case Op::matmul_add:
    case Op::matmul_bias:
    case Op::matmul_bias_add:
    case Op::avg_pool2d_grad:
    case Op::conv2d_weight_grad:
    case Op::iota:
    case Op::argsort:
    case Op::ctc_loss_grad:
    case Op::max_pool2d_grad:
    case Op::random_uniform:
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

// The table append_backward reads: the built-in rules, which
// replace_vjp_rule swaps for a test's while it runs.
std::array<VjpRule, ir::kNumOps>& rule_table() {
  static std::array<VjpRule, ir::kNumOps> table = [] {
    std::array<VjpRule, ir::kNumOps> t{};
    for (int i = 0; i < ir::kNumOps; ++i) t[size_t(i)] = builtin_rule(Op(i));
    return t;
  }();
  return table;
}

}  // namespace

VjpRule vjp_rule(Op op) { return rule_table()[size_t(op)]; }

VjpRule replace_vjp_rule(Op op, VjpRule rule) {
  return std::exchange(rule_table()[size_t(op)], rule);
}

}  // namespace ws::autograd
