// Shape and dtype inference for every op, and the user-facing errors when
// operands do not fit. Used by the Builder (traced) and by eager Tensors, so
// both report the same message.
#include <algorithm>

#include <fmt/format.h>

#include "ir/builder.hpp"

namespace ws::ir {
namespace {

std::string types_str(const std::vector<Type>& ts) {
  std::vector<std::string> parts;
  for (const Type& t : ts) parts.push_back(t.str());
  return fmt::format("{}", fmt::join(parts, " and "));
}

[[noreturn]] void fail(Op op, const std::string& what, const SourceLoc& loc) {
  throw Error(fmt::format("{}: {}{}", op_name(op), what, at(loc)));
}

DType parse_dtype_attr(Op op, const Attrs& a, const SourceLoc& loc) {
  const std::string& s = a.s("dtype");
  for (DType d : {DType::f32, DType::f64, DType::i64, DType::b8})
    if (s == dtype_name(d)) return d;
  fail(op, "unknown dtype '" + s + "'", loc);
}

void check_same(Op op, const std::vector<Type>& args, const SourceLoc& loc) {
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].dtype != args[0].dtype)
      fail(op,
           fmt::format("operand dtypes differ: {} (mixed dtypes must be converted explicitly)",
                       types_str(args)),
           loc);
    if (args[i].shape != args[0].shape)
      fail(op, fmt::format("operand shapes differ: {}", types_str(args)), loc);
  }
}

int64_t norm_axis(Op op, int64_t axis, int64_t rank, const Type& t, const SourceLoc& loc) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    fail(op, fmt::format("axis {} is out of range for {}", axis, t.str()), loc);
  return a;
}

}  // namespace

Type infer_type(Op op, const std::vector<Type>& args, const Attrs& attrs, const SourceLoc& loc) {
  const OpInfo& info = op_info(op);
  if (info.arity >= 0 && int(args.size()) != info.arity)
    fail(op, fmt::format("takes {} operands, got {}", info.arity, args.size()), loc);
  switch (op) {
    case Op::input:
    case Op::full:
    case Op::constant:
      WS_CHECK(false) << op_name(op) << " carries its type; it is not inferred";
      break;

    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::maximum:
      check_same(op, args, loc);
      if (args[0].dtype == DType::b8)
        fail(op, "does not take bool operands: " + types_str(args), loc);
      return args[0];
    case Op::neg:
      if (args[0].dtype == DType::b8) fail(op, "does not take a bool operand", loc);
      return args[0];
    case Op::exp:
    case Op::log:
      if (!is_floating(args[0].dtype))
        fail(op, "needs a floating-point operand, got " + args[0].str(), loc);
      return args[0];
    case Op::eq:
    case Op::ne:
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge: check_same(op, args, loc); return Type{DType::b8, args[0].shape};
    case Op::select:
      if (args[0].dtype != DType::b8) fail(op, "condition must be bool, got " + args[0].str(), loc);
      if (args[0].shape != args[1].shape)
        fail(
            op,
            fmt::format("condition {} and values {} differ in shape", args[0].str(), args[1].str()),
            loc);
      check_same(op, {args[1], args[2]}, loc);
      return args[1];
    case Op::convert: return Type{parse_dtype_attr(op, attrs, loc), args[0].shape};

    case Op::matmul: {
      const Type &a = args[0], &b = args[1];
      if (a.rank() != 2 || b.rank() != 2)
        fail(op, fmt::format("operands must be 2-d matrices, got {}", types_str(args)), loc);
      if (a.dtype != b.dtype) fail(op, "operand dtypes differ: " + types_str(args), loc);
      bool ta = attrs.i_or("transpose_a", 0), tb = attrs.i_or("transpose_b", 0);
      int64_t m = ta ? a.shape[1] : a.shape[0], ka = ta ? a.shape[0] : a.shape[1];
      int64_t kb = tb ? b.shape[1] : b.shape[0], n = tb ? b.shape[0] : b.shape[1];
      if (ka != kb)
        fail(op,
             fmt::format("cannot multiply {}{} by {}{}: contraction sizes {} and {} differ",
                         a.str(), ta ? "ᵀ" : "", b.str(), tb ? "ᵀ" : "", ka, kb),
             loc);
      return Type{a.dtype, {m, n}};
    }

    case Op::reduce_sum:
    case Op::reduce_max: {
      const Type& x = args[0];
      std::vector<bool> drop(size_t(x.rank()), false);
      for (int64_t ax : attrs.ints("axes"))
        drop[size_t(norm_axis(op, ax, x.rank(), x, loc))] = true;
      Shape out;
      for (int64_t d = 0; d < x.rank(); ++d)
        if (!drop[size_t(d)]) out.push_back(x.shape[size_t(d)]);
      if (op == Op::reduce_max)
        for (int64_t ax : attrs.ints("axes"))
          if (x.shape[size_t(norm_axis(op, ax, x.rank(), x, loc))] == 0)
            fail(op, "cannot take the max over an empty axis of " + x.str(), loc);
      if (x.dtype == DType::b8) fail(op, "does not take a bool operand", loc);
      return Type{x.dtype, out};
    }

    case Op::broadcast: {
      const Type& x = args[0];
      const Shape& shape = attrs.ints("shape");
      const std::vector<int64_t>& dims = attrs.ints("dims");
      if (int64_t(dims.size()) != x.rank())
        fail(op, fmt::format("dims has {} entries for operand {}", dims.size(), x.str()), loc);
      for (size_t i = 0; i < dims.size(); ++i) {
        bool ok =
            dims[i] >= 0 && dims[i] < int64_t(shape.size()) && (i == 0 || dims[i] > dims[i - 1]);
        if (!ok || (x.shape[i] != 1 && x.shape[i] != shape[size_t(dims[i])]))
          fail(op, fmt::format("cannot broadcast {} to {}", x.str(), shape_str(shape)), loc);
      }
      return Type{x.dtype, shape};
    }
    case Op::reshape: {
      const Shape& shape = attrs.ints("shape");
      if (numel(shape) != args[0].numel() ||
          std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; }))
        fail(op,
             fmt::format("cannot reshape {} ({} elements) to {} ({} elements)", args[0].str(),
                         args[0].numel(), shape_str(shape), numel(shape)),
             loc);
      return Type{args[0].dtype, shape};
    }
    case Op::transpose: {
      const Shape& perm = attrs.ints("perm");
      const Type& x = args[0];
      Shape sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      bool ok = int64_t(perm.size()) == x.rank();
      for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == int64_t(i);
      if (!ok)
        fail(
            op,
            fmt::format("perm {} is not a permutation of the axes of {}", shape_str(perm), x.str()),
            loc);
      Shape out;
      for (int64_t p : perm) out.push_back(x.shape[size_t(p)]);
      return Type{x.dtype, out};
    }

    case Op::one_hot: {
      const Type& x = args[0];
      if (x.dtype != DType::i64) fail(op, "labels must be i64, got " + x.str(), loc);
      int64_t c = attrs.i("num_classes");
      if (c <= 0) fail(op, fmt::format("num_classes must be positive, got {}", c), loc);
      Shape out = x.shape;
      out.push_back(c);
      return Type{parse_dtype_attr(op, attrs, loc), out};
    }
  }
  WS_CHECK(false) << "unhandled op " << int(op);
  throw;
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
