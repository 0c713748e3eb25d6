// Shape and dtype inference for every op, and the user-facing errors when
// operands do not fit. Used by the Builder (traced) and by eager Tensors, so
// both report the same message.
#include <algorithm>

#include <fmt/format.h>

#include "ir/attr.hpp"
#include "ir/builder.hpp"
#include "ir/geometry.hpp"
#include "ir/infer_detail.hpp"
#include "ir/op_error.hpp"

namespace ws::ir {

namespace infer_detail {

std::string types_str(const std::vector<Type>& ts) {
  std::vector<std::string> parts;
  for (const Type& t : ts) parts.push_back(t.str());
  return fmt::format("{}", fmt::join(parts, " and "));
}

void check_floating(Op op, const Type& t, const SourceLoc& loc) {
  if (!is_floating(t.dtype)) fail_op(op, "needs a floating-point operand, got " + t.str(), loc);
}

}  // namespace infer_detail

namespace {

using infer_detail::check_floating;
using infer_detail::infer_collective;
using infer_detail::types_str;

// The dtype a `dtype` attribute names.
DType parse_dtype(Op op, const std::string& s, const SourceLoc& loc) {
  for (DType d : {DType::f32, DType::f64, DType::i64, DType::b8})
    if (s == dtype_name(d)) return d;
  fail_op(op, "unknown dtype '" + s + "'", loc);
}

void check_same(Op op, const std::vector<Type>& args, const SourceLoc& loc) {
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].dtype != args[0].dtype)
      fail_op(op,
              fmt::format("operand dtypes differ: {} (mixed dtypes must be converted explicitly)",
                          types_str(args)),
              loc);
    if (args[i].shape != args[0].shape)
      fail_op(op, fmt::format("operand shapes differ: {}", types_str(args)), loc);
  }
}

int64_t norm_axis(Op op, int64_t axis, int64_t rank, const Type& t, const SourceLoc& loc) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    fail_op(op, fmt::format("axis {} is out of range for {}", axis, t.str()), loc);
  return a;
}

void check_nchw(Op op, const Type& x, const std::string& what, const SourceLoc& loc) {
  if (x.rank() != 4)
    fail_op(op, fmt::format("{} must be 4-d [N, C, H, W], got {}", what, x.str()), loc);
  check_floating(op, x, loc);
}

// A 2-d convolution of [N, C, H, W] (or the image stored in the layout its
// attribute names), or a 3-d one of [N, C, D, H, W].
Type conv2d_type(Op op, const Type& x, const Type& w, const Attrs& attrs, const SourceLoc& loc) {
  const std::string* layout = attr<kConvOps, "layout">(attrs);
  if (layout && *layout != "nchw") {  // the geometry checks x against the layout
    check_floating(op, x, loc);
    if (w.rank() != 4)
      fail_op(op,
              fmt::format("in layout {} the weight must be 4-d [O, C/groups, KH, KW], got {}",
                          *layout, w.str()),
              loc);
    if (w.dtype != x.dtype)
      fail_op(op, fmt::format("input {} and weight {} differ in dtype", x.str(), w.str()), loc);
    const Conv2dGeom g = conv2d_geom(op, attrs, x, w, loc);
    return Type{x.dtype, stored_image(g.layout, g.n, g.o, g.oh, g.ow)};
  }
  if (x.rank() != 4 && x.rank() != 5)
    fail_op(op,
            "the input must be 4-d [N, C, H, W] or 5-d [N, C, D, H, W] (a 3-d convolution), got " +
                x.str(),
            loc);
  check_floating(op, x, loc);
  if (w.rank() != x.rank())
    fail_op(op,
            x.rank() == 5
                ? fmt::format("the weight must be 5-d [O, C/groups, KD, KH, KW], got {}", w.str())
                : fmt::format("the weight must be 4-d [O, C/groups, KH, KW], got {}", w.str()),
            loc);
  if (w.dtype != x.dtype)
    fail_op(op, fmt::format("input {} and weight {} differ in dtype", x.str(), w.str()), loc);
  const Conv2dGeom g = conv2d_geom(op, attrs, x, w, loc);
  if (g.volume) return Type{x.dtype, {g.n, g.o, g.od, g.oh, g.ow}};
  return Type{x.dtype, {g.n, g.o, g.oh, g.ow}};
}

Type pool2d_type(Op op, const Type& x, const Attrs& attrs, const SourceLoc& loc) {
  check_nchw(op, x, "the input", loc);
  const Pool2dGeom g = pool2d_geom(op, attrs, x.shape, loc);
  if (g.layout == ImageLayout::nhwc) return Type{x.dtype, {g.n, g.oh, g.ow, g.c}};
  return Type{x.dtype, {g.n, g.c, g.oh, g.ow}};
}

Type infer_unchecked(Op op, const std::vector<Type>& args, const Attrs& attrs,
                     const SourceLoc& loc) {
  const OpInfo& info = op_info(op);
  if (info.arity >= 0 && int(args.size()) != info.arity)
    fail_op(op, fmt::format("takes {} operands, got {}", info.arity, args.size()), loc);
  switch (op) {
    case Op::input:
    case Op::full:
    case Op::constant:
    case Op::iota: WS_CHECK(false) << op_name(op) << " carries its type; it is not inferred"; break;
    case Op::fusion:
    case Op::fusion_result:
      WS_CHECK(false) << op_name(op) << " takes its type from its body; it is not inferred";
      break;

    case Op::all_reduce_start:
    case Op::reduce_scatter_start:
    case Op::local_shard:
    case Op::all_gather_start:
    case Op::wait: return infer_collective(op, args, attrs, loc);

    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::fmod:
    case Op::maximum:
      check_same(op, args, loc);
      if (args[0].dtype == DType::b8)
        fail_op(op, "does not take bool operands: " + types_str(args), loc);
      return args[0];
    case Op::identity:
    case Op::stop_gradient: return args[0];
    case Op::straight_through: check_same(op, args, loc); return args[0];
    case Op::check:
      if (args[1].dtype != DType::b8)
        fail_op(op, "checks a bool condition, got " + args[1].str(), loc);
      return args[0];
    case Op::neg:
      if (args[0].dtype == DType::b8) fail_op(op, "does not take a bool operand", loc);
      return args[0];
    case Op::exp:
    case Op::log:
    case Op::tanh:
    case Op::sigmoid:
    case Op::sqrt:
    case Op::rsqrt:
    case Op::expm1:
    case Op::log1p:
    case Op::sin:
    case Op::cos:
    case Op::tan:
    case Op::asin:
    case Op::acos:
    case Op::atan:
    case Op::sinh:
    case Op::cosh:
    case Op::asinh:
    case Op::acosh:
    case Op::atanh:
    case Op::erfinv:
    case Op::lgamma:
    case Op::digamma:
    case Op::trigamma:
    case Op::erf: check_floating(op, args[0], loc); return args[0];
    case Op::pow:
    case Op::atan2:
      check_same(op, args, loc);
      check_floating(op, args[0], loc);
      return args[0];
    case Op::eq:
    case Op::ne:
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge: check_same(op, args, loc); return Type{DType::b8, args[0].shape};
    case Op::select:
      if (args[0].dtype != DType::b8)
        fail_op(op, "condition must be bool, got " + args[0].str(), loc);
      if (args[0].shape != args[1].shape)
        fail_op(
            op,
            fmt::format("condition {} and values {} differ in shape", args[0].str(), args[1].str()),
            loc);
      check_same(op, {args[1], args[2]}, loc);
      return args[1];
    case Op::convert:
      return Type{parse_dtype(op, attr<Op::convert, "dtype">(attrs), loc), args[0].shape};

    case Op::matmul:
    case Op::matmul_add:
    case Op::matmul_bias:
    case Op::matmul_bias_add: {
      // [..., m, k] x [..., k, n]: leading (batch) dims must be equal.
      const Type &a = args[0], &b = args[1];
      if (a.rank() < 2 || b.rank() != a.rank() ||
          !std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()))
        fail_op(op,
                fmt::format("operands must be matrices with equal leading (batch) dims, got {}",
                            types_str(args)),
                loc);
      if (a.dtype != b.dtype) fail_op(op, "operand dtypes differ: " + types_str(args), loc);
      check_floating(op, a, loc);
      const size_t r = size_t(a.rank());
      const bool ta = attr<kMatmulOps, "transpose_a">(attrs),
                 tb = attr<kMatmulOps, "transpose_b">(attrs);
      int64_t m = a.shape[r - 2 + ta], ka = a.shape[r - 1 - ta];
      int64_t kb = b.shape[r - 2 + tb], n = b.shape[r - 1 - tb];
      if (ka != kb)
        fail_op(op,
                fmt::format("cannot multiply {}{} by {}{}: contraction sizes {} and {} differ",
                            a.str(), ta ? "ᵀ" : "", b.str(), tb ? "ᵀ" : "", ka, kb),
                loc);
      Shape out(a.shape.begin(), a.shape.end() - 2);
      out.push_back(m);
      out.push_back(n);
      if ((op == Op::matmul_bias || op == Op::matmul_bias_add) &&
          args[2] != Type{a.dtype, {n}})  // (a @ b) + bias per column
        fail_op(op,
                fmt::format("the bias must be a {}[{}] for {} columns, got {}", dtype_name(a.dtype),
                            n, n, args[2].str()),
                loc);
      if (op == Op::matmul_bias_add && args[3] != Type{a.dtype, out})  // c + ((a @ b) + bias)
        fail_op(op,
                fmt::format("the accumulator is {} but the product of {} is {}", args[3].str(),
                            types_str({a, b}), Type{a.dtype, out}.str()),
                loc);
      if (op == Op::matmul_add) {  // beta * c + alpha * (a @ b): c the product's type, alpha and
                                   // beta 0-d
        const Type product{a.dtype, out};
        if (args[2] != product)
          fail_op(op,
                  fmt::format("the accumulator is {} but the product of {} is {}", args[2].str(),
                              types_str({a, b}), product.str()),
                  loc);
        for (size_t i : {size_t(3), size_t(4)})
          if (args[i] != Type{a.dtype, {}})
            fail_op(op,
                    fmt::format(
                        "{} must be a 0-d {}, got {}",
                        i == 3 ? "alpha (the product's scale)" : "beta (the accumulator's scale)",
                        dtype_name(a.dtype), args[i].str()),
                    loc);
      }
      return Type{a.dtype, out};
    }

    case Op::reduce_sum:
    case Op::reduce_max: {
      const Type& x = args[0];
      const std::vector<int64_t>& axes = attr<kReduceOps, "axes">(attrs);
      std::vector<bool> drop(size_t(x.rank()), false);
      for (int64_t ax : axes) drop[size_t(norm_axis(op, ax, x.rank(), x, loc))] = true;
      Shape out;
      for (int64_t d = 0; d < x.rank(); ++d)
        if (!drop[size_t(d)]) out.push_back(x.shape[size_t(d)]);
      if (op == Op::reduce_max)
        for (int64_t ax : axes)
          if (x.shape[size_t(norm_axis(op, ax, x.rank(), x, loc))] == 0)
            fail_op(op, "cannot take the max over an empty axis of " + x.str(), loc);
      if (x.dtype == DType::b8) fail_op(op, "does not take a bool operand", loc);
      return Type{x.dtype, out};
    }

    case Op::broadcast: {
      const Type& x = args[0];
      const Shape& shape = attr<Op::broadcast, "shape">(attrs);
      const std::vector<int64_t>& dims = attr<Op::broadcast, "dims">(attrs);
      if (int64_t(dims.size()) != x.rank())
        fail_op(op, fmt::format("dims has {} entries for operand {}", dims.size(), x.str()), loc);
      for (size_t i = 0; i < dims.size(); ++i) {
        bool ok =
            dims[i] >= 0 && dims[i] < int64_t(shape.size()) && (i == 0 || dims[i] > dims[i - 1]);
        if (!ok || (x.shape[i] != 1 && x.shape[i] != shape[size_t(dims[i])]))
          fail_op(op, fmt::format("cannot broadcast {} to {}", x.str(), shape_str(shape)), loc);
      }
      return Type{x.dtype, shape};
    }
    case Op::reshape: {
      const Shape& shape = attr<Op::reshape, "shape">(attrs);
      const std::optional<int64_t> n = checked_numel(shape);
      if (n != args[0].numel())
        fail_op(op,
                fmt::format("cannot reshape {} ({} elements) to {} ({})", args[0].str(),
                            args[0].numel(), shape_str(shape),
                            n ? fmt::format("{} elements", *n)
                              : "a negative dimension or more elements than 64 bits count"),
                loc);
      return Type{args[0].dtype, shape};
    }
    case Op::transpose: {
      const Shape& perm = attr<Op::transpose, "perm">(attrs);
      const Type& x = args[0];
      Shape sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      bool ok = int64_t(perm.size()) == x.rank();
      for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == int64_t(i);
      if (!ok)
        fail_op(
            op,
            fmt::format("perm {} is not a permutation of the axes of {}", shape_str(perm), x.str()),
            loc);
      Shape out;
      for (int64_t p : perm) out.push_back(x.shape[size_t(p)]);
      return Type{x.dtype, out};
    }

    case Op::slice: {
      const Type& x = args[0];
      const int64_t ax = norm_axis(op, attr<Op::slice, "axis">(attrs), x.rank(), x, loc);
      const int64_t start = attr<Op::slice, "start">(attrs), end = attr<Op::slice, "end">(attrs);
      if (start < 0 || end < start || end > x.shape[size_t(ax)])
        fail_op(op,
                fmt::format("range [{}, {}) is not within axis {} of {} (size {})", start, end, ax,
                            x.str(), x.shape[size_t(ax)]),
                loc);
      Type t = x;
      t.shape[size_t(ax)] = end - start;
      return t;
    }
    case Op::concat: {
      if (args.empty()) fail_op(op, "needs at least one operand", loc);
      const Type& x = args[0];
      const int64_t ax = norm_axis(op, attr<Op::concat, "axis">(attrs), x.rank(), x, loc);
      Type t = x;
      t.shape[size_t(ax)] = 0;
      for (const Type& a : args) {
        Shape s1 = a.shape, s0 = x.shape;
        bool ok = a.dtype == x.dtype && a.rank() == x.rank();
        if (ok) s1[size_t(ax)] = s0[size_t(ax)] = 0;
        if (!ok || s1 != s0)
          fail_op(op,
                  fmt::format("operands must match except along axis {}: {}", ax, types_str(args)),
                  loc);
        t.shape[size_t(ax)] =
            add_checked(op, t.shape[size_t(ax)], a.shape[size_t(ax)], "the concatenated size", loc);
      }
      return t;
    }

    case Op::conv2d: return conv2d_type(op, args[0], args[1], attrs, loc);
    case Op::conv2d_input_grad: {
      const Type x{args[0].dtype, attr<Op::conv2d_input_grad, "input_shape">(attrs)};
      if (conv2d_type(op, x, args[1], attrs, loc) != args[0])
        fail_op(op, "the output gradient " + args[0].str() + " does not match the convolution",
                loc);
      return x;
    }
    case Op::conv2d_weight_grad: {
      const Type w{args[0].dtype, attr<Op::conv2d_weight_grad, "weight_shape">(attrs)};
      if (conv2d_type(op, args[0], w, attrs, loc) != args[1])
        fail_op(op, "the output gradient " + args[1].str() + " does not match the convolution",
                loc);
      return w;
    }
    case Op::max_pool2d:
    case Op::avg_pool2d: return pool2d_type(op, args[0], attrs, loc);
    case Op::max_pool2d_grad:
      if (pool2d_type(op, args[0], attrs, loc) != args[1])
        fail_op(op, "the output gradient " + args[1].str() + " does not match the pooling", loc);
      return args[0];
    case Op::avg_pool2d_grad: {
      const Type x{args[0].dtype, attr<Op::avg_pool2d_grad, "input_shape">(attrs)};
      if (pool2d_type(op, x, attrs, loc) != args[0])
        fail_op(op, "the output gradient " + args[0].str() + " does not match the pooling", loc);
      return x;
    }

    case Op::argsort: {
      const int64_t axis = attr<Op::argsort, "axis">(attrs);
      check_floating(op, args[0], loc);
      if (axis < 0 || axis >= args[0].rank())
        fail_op(op, fmt::format("axis {} of {}", axis, args[0].str()), loc);
      return Type{DType::i64, args[0].shape};
    }
    case Op::gather: {
      // table [V, D...] indexed by i64 [I...] -> [I..., D...]
      const Type &table = args[0], &idx = args[1];
      if (table.rank() < 1)
        fail_op(op, "the table must have at least one dim, got " + table.str(), loc);
      if (idx.dtype != DType::i64) fail_op(op, "indices must be i64, got " + idx.str(), loc);
      check_floating(op, table, loc);
      Shape out = idx.shape;
      out.insert(out.end(), table.shape.begin() + 1, table.shape.end());
      return Type{table.dtype, out};
    }
    case Op::scatter_add: {
      // i64 [I...] and values [I..., D...] -> [rows, D...]
      const Type &idx = args[0], &src = args[1];
      const int64_t rows = attr<Op::scatter_add, "rows">(attrs);
      if (idx.dtype != DType::i64) fail_op(op, "indices must be i64, got " + idx.str(), loc);
      if (src.rank() < idx.rank() ||
          !std::equal(idx.shape.begin(), idx.shape.end(), src.shape.begin()))
        fail_op(op,
                fmt::format("values {} must start with the index shape {}", src.str(), idx.str()),
                loc);
      if (rows < 0) fail_op(op, fmt::format("rows must be >= 0, got {}", rows), loc);
      check_floating(op, src, loc);
      Shape out{rows};
      out.insert(out.end(), src.shape.begin() + idx.rank(), src.shape.end());
      return Type{src.dtype, out};
    }
    case Op::random_uniform: {
      for (const Type& a : args)
        if (a.dtype != DType::i64 || a.rank() != 0)
          fail_op(op, "seed and offset must be 0-d i64, got " + types_str(args), loc);
      const Type t{parse_dtype(op, attr<Op::random_uniform, "dtype">(attrs), loc),
                   attr<Op::random_uniform, "shape">(attrs)};
      check_floating(op, t, loc);
      return t;
    }

    case Op::ctc_loss:
    case Op::ctc_loss_grad: {
      const Type &lp = args[0], &targets = args[1], &in_len = args[2], &tgt_len = args[3];
      check_floating(op, lp, loc);
      if (lp.rank() != 3) fail_op(op, "log_probs must be [T, N, C], got " + lp.str(), loc);
      const int64_t n = lp.shape[1], c = lp.shape[2];
      for (const Type* t : {&targets, &in_len, &tgt_len})
        if (t->dtype != DType::i64)
          fail_op(op, "targets and lengths must be i64, got " + types_str(args), loc);
      if (in_len.shape != Shape{n} || tgt_len.shape != Shape{n})
        fail_op(op,
                fmt::format("input_lengths {} and target_lengths {} must be [{}], one per sample "
                            "of log_probs {}",
                            in_len.str(), tgt_len.str(), n, lp.str()),
                loc);
      if (!(targets.rank() == 1 || (targets.rank() == 2 && targets.shape[0] == n)))
        fail_op(
            op,
            fmt::format("targets must be [{}, S] or 1-d (concatenated), got {}", n, targets.str()),
            loc);
      const int64_t blank = attr<Op::ctc_loss, "blank">(attrs);
      if (blank < 0 || blank >= c)
        fail_op(op, fmt::format("blank {} is not a class of log_probs {}", blank, lp.str()), loc);
      if (op == Op::ctc_loss) return Type{lp.dtype, {n}};
      if (args[4] != Type{lp.dtype, {n}})
        fail_op(op,
                fmt::format("the loss gradient must be {}, got {}", Type{lp.dtype, {n}}.str(),
                            args[4].str()),
                loc);
      return lp;
    }

    case Op::one_hot: {
      const Type& x = args[0];
      if (x.dtype != DType::i64) fail_op(op, "labels must be i64, got " + x.str(), loc);
      const int64_t c = attr<Op::one_hot, "num_classes">(attrs);
      if (c <= 0) fail_op(op, fmt::format("num_classes must be positive, got {}", c), loc);
      Shape out = x.shape;
      out.push_back(c);
      return Type{parse_dtype(op, attr<Op::one_hot, "dtype">(attrs), loc), out};
    }
  }
  WS_CHECK(false) << "unhandled op " << int(op);
  throw;
}

}  // namespace

Type infer_type(Op op, const std::vector<Type>& args, const Attrs& attrs, const SourceLoc& loc) {
  Type t = infer_unchecked(op, args, attrs, loc);
  if (std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; }))
    fail_op(op, fmt::format("the result {} has a negative dimension", t.str()), loc);
  if (!checked_numel(t.shape, int64_t(dtype_size(t.dtype))))
    fail_op(op,
            fmt::format("the result {} is too large: its size in bytes does not fit in 64 bits",
                        t.str()),
            loc);
  return t;
}

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  size_t r = std::max(a.size(), b.size());
  Shape s(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    s[i] = da == 1 ? db : da;
  }
  *out = s;
  return true;
}

}  // namespace ws::ir
