// The public Tensor API on top of capture::apply: numpy broadcasting, scalar
// operands, reductions, and the methods that trace (tensor/tensor.cpp holds
// the concrete ones, capture/random.cpp the random ones).
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "capture/random.hpp"
#include "capture/tracer.hpp"
#include "exec/reference.hpp"
#include "ir/attr.hpp"

namespace ws {
namespace {

using capture::apply;
using detail::checked_shape;
using detail::concrete;
using detail::impl_of;
using ir::Attrs;
using ir::Op;

SourceLoc sl(const Loc& l) { return SourceLoc::from(l); }

// Broadcasts both operands to their common shape, naming `op` on failure.
Tensor binary(Op op, const Tensor& a, const Tensor& b, const Loc& loc) {
  const auto &ia = impl_of(a, "operand", loc), &ib = impl_of(b, "operand", loc);
  Shape s;
  if (!ir::broadcast_shapes(ia.type.shape, ib.type.shape, &s))
    throw Error(fmt::format("{}: shapes {} and {} cannot be broadcast together{}", ir::op_name(op),
                            ia.type.str(), ib.type.str(), at(sl(loc))));
  Tensor ba = broadcast_to(a, s, loc), bb = broadcast_to(b, s, loc);
  return apply(op, {&ba, &bb}, {}, loc);
}

Tensor scalar_like(const Tensor& t, double v, const Loc& loc) {
  return Tensor::scalar(v, impl_of(t, "operand", loc).type.dtype);
}

}  // namespace

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  ir::Type t{dtype, checked_shape(shape, dtype, "Tensor::full")};
  auto impl = detail::make_concrete(t);
  exec::run_reference(Op::full, ir::make_attrs<Op::full>({{"value", value}}), {}, nullptr, t,
                      impl->storage->data);
  return Tensor(std::move(impl));
}
void Tensor::copy_(const Tensor& src, Loc loc) {
  if (capture::Tracer* tr = capture::Tracer::current();
      tr && defined() && !is_traced() && src.defined()) {
    tr->assign(*this, src, sl(loc));
    return;
  }
  const detail::TensorImpl& d = concrete(*this, "copy_()", loc);
  const detail::TensorImpl& s = concrete(src, "copy_()", loc);
  if (d.type != s.type)
    throw Error(fmt::format("copy_(): destination {} and source {} differ{}", d.type.str(),
                            s.type.str(), at(sl(loc))));
  std::memmove(d.storage->data, s.storage->data, d.type.bytes());
}

Tensor Tensor::reshape(const Shape& s, Loc loc) const { return ws::reshape(*this, s, loc); }
Tensor Tensor::t(Loc loc) const { return transpose(*this, {1, 0}, loc); }
Tensor Tensor::sum(std::vector<int64_t> axes, Loc loc) const { return ws::sum(*this, axes, loc); }
Tensor Tensor::mean(std::vector<int64_t> axes, Loc loc) const { return ws::mean(*this, axes, loc); }
Tensor Tensor::max(std::vector<int64_t> axes, Loc loc) const { return ws::max(*this, axes, loc); }

// The binary operations: numpy broadcasting, then one node.
#define WS_BINARY(name) \
  Tensor name(const Tensor& a, const Tensor& b, Loc loc) { return binary(Op::name, a, b, loc); }
WS_BINARY(add)
WS_BINARY(sub)
WS_BINARY(mul)
WS_BINARY(div)
WS_BINARY(pow)
WS_BINARY(atan2)
WS_BINARY(fmod)
WS_BINARY(maximum)
WS_BINARY(eq)
WS_BINARY(ne)
WS_BINARY(lt)
WS_BINARY(le)
WS_BINARY(gt)
WS_BINARY(ge)
#undef WS_BINARY

// With a scalar second operand.
#define WS_BINARY(name)                                      \
  Tensor name(const Tensor& a, double b, Loc loc) {          \
    return binary(Op::name, a, scalar_like(a, b, loc), loc); \
  }
WS_BINARY(add)
WS_BINARY(sub)
WS_BINARY(mul)
WS_BINARY(div)
#undef WS_BINARY

Tensor neg(const Tensor& x, Loc loc) { return apply(Op::neg, {&x}, {}, loc); }
Tensor exp(const Tensor& x, Loc loc) { return apply(Op::exp, {&x}, {}, loc); }
Tensor log(const Tensor& x, Loc loc) { return apply(Op::log, {&x}, {}, loc); }
Tensor tanh(const Tensor& x, Loc loc) { return apply(Op::tanh, {&x}, {}, loc); }
Tensor sigmoid(const Tensor& x, Loc loc) { return apply(Op::sigmoid, {&x}, {}, loc); }
Tensor sqrt(const Tensor& x, Loc loc) { return apply(Op::sqrt, {&x}, {}, loc); }
Tensor rsqrt(const Tensor& x, Loc loc) { return apply(Op::rsqrt, {&x}, {}, loc); }
Tensor erf(const Tensor& x, Loc loc) { return apply(Op::erf, {&x}, {}, loc); }
Tensor erfinv(const Tensor& x, Loc loc) { return apply(Op::erfinv, {&x}, {}, loc); }
Tensor lgamma(const Tensor& x, Loc loc) { return apply(Op::lgamma, {&x}, {}, loc); }
Tensor digamma(const Tensor& x, Loc loc) { return apply(Op::digamma, {&x}, {}, loc); }
Tensor stop_gradient(const Tensor& x, Loc loc) { return apply(Op::stop_gradient, {&x}, {}, loc); }
Tensor identity(const Tensor& x, Loc loc) { return apply(Op::identity, {&x}, {}, loc); }
Tensor straight_through(const Tensor& value, const Tensor& via, Loc loc) {
  return apply(Op::straight_through, {&value, &via}, {}, loc);
}
Tensor expm1(const Tensor& x, Loc loc) { return apply(Op::expm1, {&x}, {}, loc); }
Tensor log1p(const Tensor& x, Loc loc) { return apply(Op::log1p, {&x}, {}, loc); }
Tensor sin(const Tensor& x, Loc loc) { return apply(Op::sin, {&x}, {}, loc); }
Tensor tan(const Tensor& x, Loc loc) { return apply(Op::tan, {&x}, {}, loc); }
Tensor asin(const Tensor& x, Loc loc) { return apply(Op::asin, {&x}, {}, loc); }
Tensor acos(const Tensor& x, Loc loc) { return apply(Op::acos, {&x}, {}, loc); }
Tensor atan(const Tensor& x, Loc loc) { return apply(Op::atan, {&x}, {}, loc); }
Tensor sinh(const Tensor& x, Loc loc) { return apply(Op::sinh, {&x}, {}, loc); }
Tensor cosh(const Tensor& x, Loc loc) { return apply(Op::cosh, {&x}, {}, loc); }
Tensor asinh(const Tensor& x, Loc loc) { return apply(Op::asinh, {&x}, {}, loc); }
Tensor acosh(const Tensor& x, Loc loc) { return apply(Op::acosh, {&x}, {}, loc); }
Tensor atanh(const Tensor& x, Loc loc) { return apply(Op::atanh, {&x}, {}, loc); }
Tensor cos(const Tensor& x, Loc loc) { return apply(Op::cos, {&x}, {}, loc); }
Tensor pow(const Tensor& a, double e, Loc loc) { return pow(a, scalar_like(a, e, loc), loc); }

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, Loc loc) {
  impl_of(x, "slice", loc);
  if (start == 0 && axis >= -x.dim() && axis < x.dim() && end == x.size(axis)) return x;
  return apply(Op::slice, {&x},
               ir::make_attrs<Op::slice>({{"axis", axis}, {"end", end}, {"start", start}}), loc);
}

Tensor argsort(const Tensor& x, int64_t axis, bool descending, Loc loc) {
  impl_of(x, "argsort", loc);
  if (axis < 0) axis += x.dim();
  return apply(Op::argsort, {&x},
               ir::make_attrs<Op::argsort>({{"axis", axis}, {"descending", int64_t(descending)}}),
               loc);
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank, bool zero_infinity, Loc loc) {
  for (const Tensor* t : {&log_probs, &targets, &input_lengths, &target_lengths})
    impl_of(*t, "ctc_loss", loc);
  return apply(
      Op::ctc_loss, {&log_probs, &targets, &input_lengths, &target_lengths},
      ir::make_attrs<Op::ctc_loss>({{"blank", blank}, {"zero_infinity", int64_t(zero_infinity)}}),
      loc);
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis, Loc loc) {
  if (xs.size() == 1) return xs[0];
  const Attrs attrs = ir::make_attrs<Op::concat>({{"axis", axis}});
  if (capture::Tracer* tr = capture::Tracer::current()) {
    std::vector<ir::ValueId> ids;
    for (const Tensor& x : xs) ids.push_back(tr->value_of(x, sl(loc)));
    return tr->wrap(tr->builder().add(Op::concat, ids, attrs, sl(loc)));
  }
  std::vector<ir::Type> types;
  std::vector<const void*> ptrs;
  for (const Tensor& x : xs) {
    types.push_back(concrete(x, "concat", loc).type);
    ptrs.push_back(x.impl()->storage->data);
  }
  ir::Type out = ir::infer_type(Op::concat, types, attrs, sl(loc));
  auto impl = detail::make_concrete(out);
  exec::run_reference(Op::concat, attrs, types, ptrs.data(), out, impl->storage->data, sl(loc));
  return Tensor(std::move(impl));
}

Tensor gather(const Tensor& table, const Tensor& indices, Loc loc) {
  return apply(Op::gather, {&table, &indices}, {}, loc);
}

Tensor iota(const Shape& shape, int64_t axis, DType dtype, Loc loc) {
  checked_shape(shape, dtype, "iota");
  const int64_t r = int64_t(shape.size());
  if (axis < -r || axis >= r)
    throw Error(fmt::format("iota: axis {} is out of range for shape {}{}", axis, shape_str(shape),
                            at(sl(loc))));
  if (axis < 0) axis += r;
  ir::Type t{dtype, shape};
  if (capture::Tracer* tr = capture::Tracer::current()) {
    SourceLoc saved = tr->builder().loc;
    tr->builder().loc = sl(loc);
    Tensor out = tr->wrap(tr->builder().iota(t, axis));
    tr->builder().loc = saved;
    return out;
  }
  auto impl = detail::make_concrete(t);
  exec::run_reference(Op::iota, ir::make_attrs<Op::iota>({{"axis", axis}}), {}, nullptr, t,
                      impl->storage->data);
  return Tensor(std::move(impl));
}

namespace {

// Op conv2d: 4-d operands a 2-d convolution, 5-d a 3-d one.
template <class Options>
Tensor convolution(const Tensor& x, const Tensor& w, const Options& o, Loc loc) {
  return apply(Op::conv2d, {&x, &w},
               ir::make_attrs<Op::conv2d>({{"dilation", o.dilation},
                                           {"groups", o.groups},
                                           {"padding", o.padding},
                                           {"stride", o.stride}}),
               loc);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dOptions& o, Loc loc) {
  return convolution(x, w, o, loc);
}

Tensor conv3d(const Tensor& x, const Tensor& w, const Conv3dOptions& o, Loc loc) {
  if (impl_of(x, "conv3d", loc).type.rank() != 5)
    throw Error(fmt::format("conv3d: the input must be 5-d [N, C, D, H, W], got {}{}", x.str(),
                            at(SourceLoc::from(loc))));
  return convolution(x, w, o, loc);
}

Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, Loc loc) {
  if (stride.empty()) stride = kernel;
  return apply(Op::max_pool2d, {&x},
               ir::make_attrs<Op::max_pool2d>(
                   {{"kernel", kernel}, {"padding", padding}, {"stride", stride}}),
               loc);
}

Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool count_include_pad, Loc loc) {
  if (stride.empty()) stride = kernel;
  return apply(Op::avg_pool2d, {&x},
               ir::make_attrs<Op::avg_pool2d>({{"count_include_pad", int64_t(count_include_pad)},
                                               {"kernel", kernel},
                                               {"padding", padding},
                                               {"stride", stride}}),
               loc);
}

Tensor rand_stream(const Shape& shape, DType dtype, Loc loc) {
  const ir::Type t{dtype, checked_shape(shape, dtype, "rand_stream")};
  if (!is_floating(dtype))
    throw Error(fmt::format("rand_stream: dtype must be floating-point, got {}{}",
                            dtype_name(dtype), at(sl(loc))));
  Attrs attrs = ir::make_attrs<Op::random_uniform>(
      {{"dtype", std::string(dtype_name(dtype))}, {"shape", shape}});
  if (capture::Tracer* tr = capture::Tracer::current()) {
    const capture::Tracer::RandomDraw d = tr->take_random(t.numel());
    if (d.skip) ir::set_attr<Op::random_uniform, "skip">(attrs, d.skip);
    return tr->wrap(tr->builder().add(Op::random_uniform, {d.seed, d.offset}, attrs, sl(loc)));
  }
  detail::RngState& st = detail::rng_state();
  Tensor out = apply(Op::random_uniform, {&st.seed, &st.offset}, attrs, loc);
  *st.offset.data<int64_t>() += t.numel();
  return out;
}

// PyTorch's relu: a NaN stays NaN (a select on x > 0 would make it 0 and
// hide it from the non-finite checks); -0 becomes +0.
Tensor relu(const Tensor& x, Loc loc) {
  Tensor zero = scalar_like(x, 0, loc);
  return where(le(x, zero, loc), zero, x, loc);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Loc loc) {
  const auto &ic = impl_of(cond, "where", loc), &ia = impl_of(a, "where", loc),
             &ib = impl_of(b, "where", loc);
  Shape s, s2;
  if (!ir::broadcast_shapes(ia.type.shape, ib.type.shape, &s) ||
      !ir::broadcast_shapes(ic.type.shape, s, &s2))
    throw Error(fmt::format("select: shapes {}, {} and {} cannot be broadcast together{}",
                            ic.type.str(), ia.type.str(), ib.type.str(), at(sl(loc))));
  Tensor bc = broadcast_to(cond, s2, loc), ba = broadcast_to(a, s2, loc),
         bb = broadcast_to(b, s2, loc);
  return apply(Op::select, {&bc, &ba, &bb}, {}, loc);
}

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, Loc loc) {
  Attrs attrs;
  if (ta) ir::set_attr<Op::matmul, "transpose_a">(attrs, 1);
  if (tb) ir::set_attr<Op::matmul, "transpose_b">(attrs, 1);
  return apply(Op::matmul, {&a, &b}, attrs, loc);
}

Tensor sum(const Tensor& x, std::vector<int64_t> axes, Loc loc) {
  return apply(Op::reduce_sum, {&x}, ir::make_attrs<Op::reduce_sum>({{"axes", axes}}), loc);
}

Tensor max(const Tensor& x, std::vector<int64_t> axes, Loc loc) {
  return apply(Op::reduce_max, {&x}, ir::make_attrs<Op::reduce_max>({{"axes", axes}}), loc);
}

Tensor mean(const Tensor& x, std::vector<int64_t> axes, Loc loc) {
  const Shape& s = impl_of(x, "mean", loc).type.shape;
  int64_t count = 1;
  for (int64_t a : axes) {
    int64_t r = int64_t(s.size()), d = a < 0 ? a + r : a;
    if (d >= 0 && d < r) count *= s[size_t(d)];
  }
  Tensor total = sum(x, axes, loc);  // validates the axes
  // Divided, as torch's CPU mean divides its sum (one rounding).
  return div(total, scalar_like(x, double(count), loc), loc);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape, Loc loc) {
  const Shape& s = impl_of(x, "broadcast_to", loc).type.shape;
  if (s == shape) return x;
  if (s.size() > shape.size())
    throw Error(fmt::format("broadcast: cannot broadcast {} to {}{}", x.str(), shape_str(shape),
                            at(sl(loc))));
  std::vector<int64_t> dims;
  for (size_t i = 0; i < s.size(); ++i) dims.push_back(int64_t(shape.size() - s.size() + i));
  return apply(Op::broadcast, {&x},
               ir::make_attrs<Op::broadcast>({{"dims", dims}, {"shape", shape}}), loc);
}

Tensor reshape(const Tensor& x, const Shape& shape, Loc loc) {
  if (impl_of(x, "reshape", loc).type.shape == shape) return x;
  return apply(Op::reshape, {&x}, ir::make_attrs<Op::reshape>({{"shape", shape}}), loc);
}

Tensor transpose(const Tensor& x, std::vector<int64_t> perm, Loc loc) {
  return apply(Op::transpose, {&x}, ir::make_attrs<Op::transpose>({{"perm", perm}}), loc);
}

Tensor checked(const Tensor& x, const Tensor& ok, const std::string& message, Loc loc) {
  return apply(Op::check, {&x, &ok}, ir::make_attrs<Op::check>({{"message", message}}), loc);
}

Tensor one_hot(const Tensor& labels, int64_t num_classes, DType dtype, Loc loc) {
  return apply(Op::one_hot, {&labels},
               ir::make_attrs<Op::one_hot>(
                   {{"dtype", std::string(dtype_name(dtype))}, {"num_classes", num_classes}}),
               loc);
}

Tensor cast(const Tensor& x, DType dtype, Loc loc) {
  if (impl_of(x, "cast", loc).type.dtype == dtype) return x;
  return apply(Op::convert, {&x},
               ir::make_attrs<Op::convert>({{"dtype", std::string(dtype_name(dtype))}}), loc);
}

Tensor operator+(const Tensor& a, Arg b) { return add(a, b.t, b.loc); }
Tensor operator-(const Tensor& a, Arg b) { return sub(a, b.t, b.loc); }
Tensor operator*(const Tensor& a, Arg b) { return mul(a, b.t, b.loc); }
Tensor operator/(const Tensor& a, Arg b) { return div(a, b.t, b.loc); }
Tensor operator-(Arg a) { return neg(a.t, a.loc); }
Tensor operator+(Arg a, double b) { return add(a.t, scalar_like(a.t, b, a.loc), a.loc); }
Tensor operator-(Arg a, double b) { return sub(a.t, scalar_like(a.t, b, a.loc), a.loc); }
Tensor operator*(Arg a, double b) { return mul(a.t, scalar_like(a.t, b, a.loc), a.loc); }
Tensor operator/(Arg a, double b) { return div(a.t, scalar_like(a.t, b, a.loc), a.loc); }
Tensor operator*(double a, Arg b) { return mul(scalar_like(b.t, a, b.loc), b.t, b.loc); }

}  // namespace ws
