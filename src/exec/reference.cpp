#include "exec/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace ws::exec {
namespace {

using ir::Op;

// Calls f(T{}) with the C++ type of `dt`.
template <class F>
void dispatch(DType dt, F&& f) {
  switch (dt) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i64: return f(int64_t{});
    case DType::b8: return f(uint8_t{});
  }
}

template <class T>
void unary(Op op, const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (op) {
      case Op::neg: y[i] = T(-x[i]); break;
      case Op::exp: y[i] = T(std::exp(double(x[i]))); break;
      case Op::log: y[i] = T(std::log(double(x[i]))); break;
      default: WS_CHECK(false) << "not unary: " << ir::op_name(op);
    }
  }
}

template <class T>
T binary_one(Op op, T a, T b) {
  switch (op) {
    case Op::add: return T(a + b);
    case Op::sub: return T(a - b);
    case Op::mul: return T(a * b);
    case Op::div:
      if constexpr (std::is_integral_v<T>) {
        if (b == 0) throw Error("div: integer division by zero");
      }
      return T(a / b);
    case Op::maximum:
      if constexpr (std::is_floating_point_v<T>)
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      return std::max(a, b);
    default: WS_CHECK(false) << "not binary: " << ir::op_name(op); return T{};
  }
}

template <class T>
uint8_t compare_one(Op op, T a, T b) {
  switch (op) {
    case Op::eq: return a == b;
    case Op::ne: return a != b;
    case Op::lt: return a < b;
    case Op::le: return a <= b;
    case Op::gt: return a > b;
    case Op::ge: return a >= b;
    default: WS_CHECK(false) << "not a comparison"; return 0;
  }
}

template <class T>
void matmul(const T* a, const T* b, T* c, const Shape& as, const Shape& bs, bool ta, bool tb) {
  const int64_t m = ta ? as[1] : as[0], k = ta ? as[0] : as[1], n = tb ? bs[0] : bs[1];
  // a(i,p) and b(p,j) with either operand stored transposed.
  auto A = [&](int64_t i, int64_t p) { return ta ? a[p * m + i] : a[i * k + p]; };
  auto B = [&](int64_t p, int64_t j) { return tb ? b[j * k + p] : b[p * n + j]; };
  std::fill(c, c + m * n, T(0));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const T aip = A(i, p);
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += aip * B(p, j);
    }
}

}  // namespace

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    s[size_t(d)] = s[size_t(d + 1)] * shape[size_t(d + 1)];
  return s;
}

std::vector<int64_t> broadcast_source_strides(const Shape& in, const Shape& out,
                                              const std::vector<int64_t>& dims) {
  std::vector<int64_t> in_strides = row_major_strides(in), s(out.size(), 0);
  for (size_t i = 0; i < dims.size(); ++i)
    if (in[i] != 1) s[size_t(dims[i])] = in_strides[i];
  return s;
}

std::vector<int64_t> transpose_source_strides(const Shape& in, const std::vector<int64_t>& perm) {
  std::vector<int64_t> in_strides = row_major_strides(in), s;
  for (int64_t p : perm) s.push_back(in_strides[size_t(p)]);
  return s;
}

std::vector<int64_t> reduce_result_strides(const Shape& in, const std::vector<int64_t>& axes) {
  std::vector<bool> reduced(in.size(), false);
  for (int64_t a : axes) reduced[size_t(a < 0 ? a + int64_t(in.size()) : a)] = true;
  Shape out;
  for (size_t d = 0; d < in.size(); ++d)
    if (!reduced[d]) out.push_back(in[d]);
  std::vector<int64_t> out_strides = row_major_strides(out), s(in.size(), 0);
  size_t j = 0;
  for (size_t d = 0; d < in.size(); ++d)
    if (!reduced[d]) s[d] = out_strides[j++];
  return s;
}

void run_reference(Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types,
                   const void* const* in, const ir::Type& out_type, void* out,
                   const SourceLoc& loc) {
  const int64_t n = out_type.numel();
  switch (op) {
    case Op::input: WS_CHECK(false) << "inputs have no kernel"; return;
    case Op::full:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        std::fill_n(static_cast<T*>(out), n, T(attrs.f("value")));
      });
    case Op::constant:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const std::vector<double>& v = attrs.floats("value");
        for (int64_t i = 0; i < n; ++i) static_cast<T*>(out)[i] = T(v[size_t(i)]);
      });
    case Op::neg:
    case Op::exp:
    case Op::log:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        unary(op, static_cast<const T*>(in[0]), static_cast<T*>(out), n);
      });
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::maximum:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const T *a = static_cast<const T*>(in[0]), *b = static_cast<const T*>(in[1]);
        T* y = static_cast<T*>(out);
        for (int64_t i = 0; i < n; ++i) y[i] = binary_one(op, a[i], b[i]);
      });
    case Op::eq:
    case Op::ne:
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge:
      return dispatch(in_types[0].dtype, [&](auto t) {
        using T = decltype(t);
        const T *a = static_cast<const T*>(in[0]), *b = static_cast<const T*>(in[1]);
        uint8_t* y = static_cast<uint8_t*>(out);
        for (int64_t i = 0; i < n; ++i) y[i] = compare_one(op, a[i], b[i]);
      });
    case Op::select:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const uint8_t* c = static_cast<const uint8_t*>(in[0]);
        const T *a = static_cast<const T*>(in[1]), *b = static_cast<const T*>(in[2]);
        T* y = static_cast<T*>(out);
        for (int64_t i = 0; i < n; ++i) y[i] = c[i] ? a[i] : b[i];
      });
    case Op::convert:
      return dispatch(in_types[0].dtype, [&](auto s) {
        using S = decltype(s);
        dispatch(out_type.dtype, [&](auto t) {
          using T = decltype(t);
          const S* x = static_cast<const S*>(in[0]);
          T* y = static_cast<T*>(out);
          for (int64_t i = 0; i < n; ++i) y[i] = T(x[i]);
        });
      });
    case Op::matmul:
      WS_CHECK(is_floating(out_type.dtype)) << "matmul on " << out_type.str();
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        matmul(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), static_cast<T*>(out),
               in_types[0].shape, in_types[1].shape, attrs.i_or("transpose_a", 0),
               attrs.i_or("transpose_b", 0));
      });
    case Op::reduce_sum:
    case Op::reduce_max:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out);
        const bool is_max = op == Op::reduce_max;
        std::fill_n(y, n, is_max ? std::numeric_limits<T>::lowest() : T(0));
        if constexpr (std::is_floating_point_v<T>)
          if (is_max) std::fill_n(y, n, -std::numeric_limits<T>::infinity());
        strided_walk(in_types[0].shape,
                     reduce_result_strides(in_types[0].shape, attrs.ints("axes")),
                     [&](int64_t i, int64_t o) {
                       if (!is_max) {
                         y[o] += x[i];
                       } else if constexpr (std::is_floating_point_v<T>) {
                         if (std::isnan(x[i]) || x[i] > y[o]) y[o] = x[i];
                       } else {
                         y[o] = std::max(y[o], x[i]);
                       }
                     });
      });
    case Op::broadcast:
    case Op::transpose:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out);
        std::vector<int64_t> strides =
            op == Op::broadcast
                ? broadcast_source_strides(in_types[0].shape, out_type.shape, attrs.ints("dims"))
                : transpose_source_strides(in_types[0].shape, attrs.ints("perm"));
        strided_walk(out_type.shape, strides, [&](int64_t i, int64_t o) { y[i] = x[o]; });
      });
    case Op::reshape: std::memcpy(out, in[0], out_type.bytes()); return;
    case Op::one_hot:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const int64_t* labels = static_cast<const int64_t*>(in[0]);
        const int64_t c = attrs.i("num_classes"), rows = in_types[0].numel();
        T* y = static_cast<T*>(out);
        std::fill_n(y, n, T(0));
        for (int64_t r = 0; r < rows; ++r) {
          if (labels[r] < 0 || labels[r] >= c)
            throw Error(fmt::format("one_hot: label {} at position {} is out of range [0, {}){}",
                                    labels[r], r, c, at(loc)));
          y[r * c + labels[r]] = T(1);
        }
      });
  }
  WS_CHECK(false) << "no reference kernel for op " << int(op);
}

}  // namespace ws::exec
