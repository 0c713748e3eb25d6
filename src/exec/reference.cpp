#include "exec/reference.hpp"

#include "exec/collective_kernels.hpp"
#include "exec/ctc.hpp"
#include "exec/dnnl_backend.hpp"
#include "exec/elementwise.hpp"
#include "exec/f64_products.hpp"
#include "exec/reduce.hpp"
#include "ir/attr.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ws::exec {
namespace {

// Element i of an [n, c, h, w] image batch stored in layout l: where it lies.
int64_t stored_index(ir::ImageLayout l, int64_t n, int64_t c, int64_t h, int64_t w, int64_t C,
                     int64_t H, int64_t W) {
  const int64_t b = ir::channel_block(l);
  if (l == ir::ImageLayout::nhwc) return ((n * H + h) * W + w) * C + c;
  return (((n * (C / b) + c / b) * H + h) * W + w) * b + c % b;
}

// An image batch between NCHW and layout l (to_nchw: from l).
template <class T>
void relayout(ir::ImageLayout l, const T* from, T* to, int64_t N, int64_t C, int64_t H, int64_t W,
              bool to_nchw) {
  int64_t i = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w, ++i) {
          const int64_t j = stored_index(l, n, c, h, w, C, H, W);
          if (to_nchw)
            to[i] = from[j];
          else
            to[j] = from[i];
        }
}

// The reference max pooling (or its gradient) of NHWC images: on NCHW
// copies.
template <class T>
void max_pool_nhwc_ref(ir::Op op, const Pool2dGeom& g, const void* const* in, T* y) {
  Pool2dGeom plain = g;
  plain.layout = ir::ImageLayout::nchw;
  const auto l = ir::ImageLayout::nhwc;
  std::vector<T> x(size_t(g.n * g.c * g.h * g.w)), d(size_t(g.n * g.c * g.oh * g.ow));
  relayout(l, static_cast<const T*>(in[0]), x.data(), g.n, g.c, g.h, g.w, true);
  if (op == ir::Op::max_pool2d) {
    max_pool2d_ref(plain, x.data(), d.data());
    return relayout(l, d.data(), y, g.n, g.c, g.oh, g.ow, false);
  }
  std::vector<T> dx(x.size());
  relayout(l, static_cast<const T*>(in[1]), d.data(), g.n, g.c, g.oh, g.ow, true);
  max_pool2d_grad_ref(plain, x.data(), d.data(), dx.data());
  relayout(l, dx.data(), y, g.n, g.c, g.h, g.w, false);
}

// The f64 convolution loops (f64_products.hpp) on images stored in g's
// layout: NCHW copies in and out.
template <class T>
void conv_f64_in_layout(ir::Op op, const Conv2dGeom& g, const T* a, const T* b, T* y) {
  Conv2dGeom plain = g;
  plain.layout = ir::ImageLayout::nchw;
  std::vector<T> x(size_t(g.n * g.in_image())), dy(size_t(g.n * g.out_image()));
  auto in = [&](const T* from, std::vector<T>& to, int64_t c, int64_t h, int64_t w) {
    relayout(g.layout, from, to.data(), g.n, c, h, w, true);
    return to.data();
  };
  if (op == ir::Op::conv2d) {
    conv2d_f64(plain, in(a, x, g.c, g.h, g.w), b, dy.data());
    relayout(g.layout, dy.data(), y, g.n, g.o, g.oh, g.ow, false);
  } else if (op == ir::Op::conv2d_input_grad) {
    conv2d_input_grad_f64(plain, in(a, dy, g.o, g.oh, g.ow), b, x.data());
    relayout(g.layout, x.data(), y, g.n, g.c, g.h, g.w, false);
  } else {
    conv2d_weight_grad_f64(plain, in(a, x, g.c, g.h, g.w), in(b, dy, g.o, g.oh, g.ow), y);
  }
}

// Flat position i of a tensor of `shape` as its index, "[1,0,2]".
std::string unflat_index(int64_t i, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = i % std::max<int64_t>(shape[d], 1);
    i /= std::max<int64_t>(shape[d], 1);
  }
  return fmt::format("[{}]", fmt::join(index, ","));
}

using ir::Op;

// Calls f(T{}) with the C++ type of floating-point `dt`.
template <class F>
void dispatch_float(DType dt, F&& f) {
  WS_CHECK(is_floating(dt)) << "a floating-point kernel called on " << dtype_name(dt);
  if (dt == DType::f32) return f(float{});
  return f(double{});
}

template <class T>
void unary(Op op, const T* x, T* y, int64_t n) {
  const bool known = with_unary_op(op, [&](auto o) { unary_array<decltype(o)::value>(x, y, n); });
  WS_CHECK(known) << "not unary: " << ir::op_name(op);
}

// y[i] = a[i] op b[i] by binary_value, the definition the compiled kernels
// use (comparisons write bool).
template <class T>
void binary(Op op, const T* a, const T* b, void* y, int64_t n) {
  const bool known = with_binary_op(op, [&](auto o) {
    constexpr Op bop = decltype(o)::value;
    using R = decltype(binary_value<bop>(T{}, T{}));
    R* out = static_cast<R*>(y);
    for (int64_t i = 0; i < n; ++i) out[i] = binary_value<bop>(a[i], b[i]);
  });
  WS_CHECK(known) << "not binary: " << ir::op_name(op);
}

}  // namespace

void run_reference(Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types,
                   const void* const* in, const ir::Type& out_type, void* out,
                   const SourceLoc& loc) {
  const int64_t n = out_type.numel();
  switch (op) {
    case Op::input: WS_CHECK(false) << "inputs have no kernel"; return;
    case Op::all_reduce_start:  // as the compiled kernels, the collective blocking
    case Op::reduce_scatter_start:
    case Op::all_gather_start:
    case Op::local_shard:
      return run_collective_reference(op, attrs, in_types, in, out_type, out, loc);
    case Op::wait: std::memcpy(out, in[0], out_type.bytes()); return;
    case Op::fusion:
    case Op::fusion_result:
      WS_CHECK(false) << "a fusion runs its body (interpret, or a fused loop kernel)";
      return;
    case Op::full:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        std::fill_n(static_cast<T*>(out), n, T(ir::attr<Op::full, "value">(attrs)));
      });
    case Op::constant:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const std::vector<double>& v = ir::attr<Op::constant, "value">(attrs);
        for (int64_t i = 0; i < n; ++i) static_cast<T*>(out)[i] = T(v[size_t(i)]);
      });
    case Op::neg:
    case Op::identity:
    case Op::stop_gradient:
    case Op::exp:
    case Op::log:
    case Op::tanh:
    case Op::sigmoid:
    case Op::sqrt:
    case Op::rsqrt:
    case Op::erf:
    case Op::expm1:
    case Op::erfinv:
    case Op::lgamma:
    case Op::digamma:
    case Op::trigamma:
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
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        unary(op, static_cast<const T*>(in[0]), static_cast<T*>(out), n);
      });
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::pow:
    case Op::atan2:
    case Op::fmod:
    case Op::maximum:
    case Op::straight_through:
    case Op::eq:
    case Op::ne:
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge:
      return dispatch(in_types[0].dtype, [&](auto t) {
        using T = decltype(t);
        binary(op, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), out, n);
      });
    case Op::check: {
      const auto* ok = static_cast<const uint8_t*>(in[1]);
      const int64_t m = in_types[1].numel();
      for (int64_t i = 0; i < m; ++i)
        if (!ok[i])
          throw Error(fmt::format(
              "{} (first at position {} of {}){}", ir::attr<Op::check, "message">(attrs),
              unflat_index(i, in_types[1].shape), shape_str(in_types[1].shape), at(loc)));
      if (out != in[0]) std::memcpy(out, in[0], out_type.bytes());
      return;
    }
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
        const MatmulDims d = matmul_dims(in_types[0].shape, in_types[1].shape, attrs);
        const T *a = static_cast<const T*>(in[0]), *b = static_cast<const T*>(in[1]);
        T* c = static_cast<T*>(out);
        if constexpr (std::is_same_v<T, float>) {
          // f32 products run the compiled programs' oneDNN primitive (see
          // the header): modes then differ only where the pipeline does.
          return run_backend(op, attrs, in_types, in, out_type, out);
        } else if constexpr (std::is_same_v<T, double>) {  // f64_products.hpp
          matmul_f64(d.batch, d.m, d.n, d.k, a, d.ta, b, d.tb, c);
        }
      });
    case Op::matmul_bias:  // (a @ b) + bias along the last dim
      WS_CHECK(is_floating(out_type.dtype)) << "matmul_bias on " << out_type.str();
      if (out_type.dtype == DType::f32) {
        run_backend(op, attrs, in_types, in, out_type, out);
        // The activation is applied after the product, as the kernel does
        // (kernels.cpp): relu, select(y <= 0, +0, y), NaN stays.
        if (ir::attr<Op::matmul_bias, "activation">(attrs))
          for (float* y = static_cast<float*>(out); y != static_cast<float*>(out) + n; ++y)
            *y = *y <= 0.0f ? 0.0f : *y;
        return;
      }
      return dispatch_float(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        run_reference(Op::matmul, attrs, in_types.first(2), in, out_type, out, loc);
        const T* bias = static_cast<const T*>(in[2]);
        T* y = static_cast<T*>(out);
        const int64_t cols = out_type.shape.back();
        for (int64_t i = 0; i < n; ++i) y[i] = y[i] + bias[i % cols];
        if (ir::attr<Op::matmul_bias, "activation">(
                attrs))  // relu: select(y <= 0, +0, y), NaN stays
          for (int64_t i = 0; i < n; ++i) y[i] = y[i] <= T(0) ? T(0) : y[i];
      });
    case Op::matmul_bias_add:  // c + ((a @ b) + bias), two roundings
      WS_CHECK(is_floating(out_type.dtype)) << "matmul_bias_add on " << out_type.str();
      if (out_type.dtype == DType::f32) return run_backend(op, attrs, in_types, in, out_type, out);
      return dispatch_float(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        run_reference(Op::matmul_bias, attrs, in_types.first(3), in, out_type, out, loc);
        const T* c = static_cast<const T*>(in[3]);
        T* y = static_cast<T*>(out);
        for (int64_t i = 0; i < n; ++i) y[i] = c[i] + y[i];
      });
    case Op::matmul_add:  // (beta * c) + (alpha * (a @ b)), each product rounded
      WS_CHECK(is_floating(out_type.dtype)) << "matmul_add on " << out_type.str();
      if (out_type.dtype == DType::f32) return run_backend(op, attrs, in_types, in, out_type, out);
      return dispatch_float(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        run_reference(Op::matmul, attrs, in_types.first(2), in, out_type, out, loc);
        const T *c = static_cast<const T*>(in[2]), alpha = *static_cast<const T*>(in[3]),
                beta = *static_cast<const T*>(in[4]);
        T* y = static_cast<T*>(out);
        for (int64_t i = 0; i < n; ++i) y[i] = beta * c[i] + alpha * y[i];
      });
    case Op::reduce_sum:
    case Op::reduce_max:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out);
        const bool is_max = op == Op::reduce_max;
        Shape shape = in_types[0].shape;
        std::vector<int64_t> strides =
            reduce_result_strides(shape, ir::attr<ir::kReduceOps, "axes">(attrs));
        if constexpr (std::is_floating_point_v<T>) {
          // The compiled kernels' functions: one summation order everywhere.
          merge_dims(shape, strides);
          if (is_max) return reduce_max(shape, strides, x, y);
          return reduce_sum(shape, strides, x, y);
        } else {
          if (!is_max) {  // integers sum exactly in int64
            std::vector<int64_t> acc(size_t(n), 0);
            strided_walk(shape, strides, [&](int64_t i, int64_t o) { acc[size_t(o)] += x[i]; });
            for (int64_t o = 0; o < n; ++o) y[o] = T(acc[size_t(o)]);
            return;
          }
          std::fill_n(y, n, std::numeric_limits<T>::lowest());
          strided_walk(shape, strides, [&](int64_t i, int64_t o) { y[o] = std::max(y[o], x[i]); });
        }
      });
    case Op::broadcast:
    case Op::transpose:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out);
        std::vector<int64_t> strides =
            op == Op::broadcast ? broadcast_source_strides(in_types[0].shape, out_type.shape,
                                                           ir::attr<Op::broadcast, "dims">(attrs))
                                : transpose_source_strides(in_types[0].shape,
                                                           ir::attr<Op::transpose, "perm">(attrs));
        strided_walk(out_type.shape, strides, [&](int64_t i, int64_t o) { y[i] = x[o]; });
      });
    case Op::reshape: std::memcpy(out, in[0], out_type.bytes()); return;
    case Op::iota:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const int64_t axis = ir::attr<Op::iota, "axis">(attrs), size = out_type.shape[size_t(axis)];
        const int64_t inner = dims_product(out_type.shape.begin() + axis + 1, out_type.shape.end());
        T* y = static_cast<T*>(out);
        for (int64_t i = 0; i < n; ++i) y[i] = T((i / inner) % size);
      });
    case Op::slice: {
      const size_t es = dtype_size(out_type.dtype);
      const SliceDims d = slice_dims(in_types[0].shape, attrs);
      for (int64_t o = 0; o < d.outer; ++o)
        std::memcpy(static_cast<char*>(out) + size_t(o * d.out_row) * es,
                    static_cast<const char*>(in[0]) + size_t(o * d.in_row + d.start) * es,
                    size_t(d.out_row) * es);
      return;
    }
    case Op::concat: {
      const size_t es = dtype_size(out_type.dtype);
      int64_t axis = ir::attr<Op::concat, "axis">(attrs);
      if (axis < 0) axis += out_type.rank();
      const int64_t outer = dims_product(out_type.shape.begin(), out_type.shape.begin() + axis);
      const int64_t out_row = n / std::max<int64_t>(outer, 1);
      int64_t col = 0;
      for (size_t a = 0; a < in_types.size(); ++a) {
        const int64_t row = in_types[a].numel() / std::max<int64_t>(outer, 1);
        for (int64_t o = 0; o < outer; ++o)
          std::memcpy(static_cast<char*>(out) + size_t(o * out_row + col) * es,
                      static_cast<const char*>(in[a]) + size_t(o * row) * es, size_t(row) * es);
        col += row;
      }
      return;
    }
    case Op::argsort: {
      const int64_t axis = ir::attr<Op::argsort, "axis">(attrs);
      const Shape& s = in_types[0].shape;
      const int64_t len = s[size_t(axis)], inner = dims_product(s.begin() + axis + 1, s.end());
      const int64_t outer = len * inner == 0 ? 0 : n / (len * inner);
      const bool descending = ir::attr<Op::argsort, "descending">(attrs) != 0;
      return dispatch_float(in_types[0].dtype, [&](auto t) {
        using T = decltype(t);
        argsort_rows(static_cast<const T*>(in[0]), outer, len, inner, descending,
                     static_cast<int64_t*>(out));
      });
    }
    case Op::ctc_loss:
    case Op::ctc_loss_grad: {
      const Shape& lp = in_types[0].shape;
      CtcShape s;
      s.frames = lp[0], s.batch = lp[1], s.classes = lp[2];
      s.row = in_types[1].rank() == 2 ? in_types[1].shape[1] : -1;
      s.targets = in_types[1].numel();
      s.blank = ir::attr<Op::ctc_loss, "blank">(attrs);
      s.zero_infinity = ir::attr<Op::ctc_loss, "zero_infinity">(attrs) != 0;
      const auto* targets = static_cast<const int64_t*>(in[1]);
      const auto* in_len = static_cast<const int64_t*>(in[2]);
      const auto* tgt_len = static_cast<const int64_t*>(in[3]);
      return dispatch_float(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const T* x = static_cast<const T*>(in[0]);
        if (op == Op::ctc_loss)
          ctc_loss(s, x, targets, in_len, tgt_len, static_cast<T*>(out), loc);
        else
          ctc_loss_grad(s, x, targets, in_len, tgt_len, static_cast<const T*>(in[4]),
                        static_cast<T*>(out), loc);
      });
    }
    case Op::gather:
      return dispatch_float(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const Shape& ts = in_types[0].shape;
        const int64_t width = dims_product(ts.begin() + 1, ts.end());
        gather_rows(static_cast<const T*>(in[0]), ts[0], width, static_cast<const int64_t*>(in[1]),
                    in_types[1].numel(), static_cast<T*>(out), loc);
      });
    case Op::scatter_add:
      return dispatch_float(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const int64_t rows = out_type.shape[0], width = rows == 0 ? 0 : n / rows;
        scatter_add_rows(static_cast<const T*>(in[1]), width, static_cast<const int64_t*>(in[0]),
                         in_types[0].numel(), rows, static_cast<T*>(out), loc);
      });
    case Op::random_uniform:
      return dispatch_float(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        philox_uniform(uint64_t(*static_cast<const int64_t*>(in[0])),
                       uint64_t(*static_cast<const int64_t*>(in[1]) +
                                ir::attr<Op::random_uniform, "skip">(attrs)),
                       static_cast<T*>(out), n);
      });
    case Op::conv2d:
    case Op::conv2d_input_grad:
    case Op::conv2d_weight_grad:
      return dispatch_float(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const T *a = static_cast<const T*>(in[0]), *b = static_cast<const T*>(in[1]);
        T* y = static_cast<T*>(out);
        const Conv2dGeom g = ir::conv2d_node_geom(op, attrs, in_types, out_type);
        if constexpr (std::is_same_v<T, float>) {  // as compiled programs (see the header)
          return run_backend(op, attrs, in_types, in, out_type, out);
        } else {  // f64: products of column matrices (f64_products.hpp)
          if (g.layout != ir::ImageLayout::nchw) return conv_f64_in_layout(op, g, a, b, y);
          if (op == Op::conv2d) return conv2d_f64(g, a, b, y);
          if (op == Op::conv2d_input_grad) return conv2d_input_grad_f64(g, a, b, y);
          conv2d_weight_grad_f64(g, a, b, y);
        }
      });
    case Op::max_pool2d:
    case Op::avg_pool2d:
    case Op::max_pool2d_grad:
    case Op::avg_pool2d_grad:
      return dispatch_float(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const T* a = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out);
        const Pool2dGeom g = ir::pool2d_node_geom(op, attrs, in_types, out_type);
        if (g.layout == ir::ImageLayout::nhwc) return max_pool_nhwc_ref(op, g, in, y);
        if (op == Op::max_pool2d) max_pool2d_ref(g, a, y);
        if (op == Op::avg_pool2d) avg_pool2d_ref(g, a, y);
        if (op == Op::max_pool2d_grad) max_pool2d_grad_ref(g, a, static_cast<const T*>(in[1]), y);
        if (op == Op::avg_pool2d_grad) avg_pool2d_grad_ref(g, a, y);
      });
    case Op::one_hot:
      return dispatch(out_type.dtype, [&](auto t) {
        using T = decltype(t);
        const int64_t* labels = static_cast<const int64_t*>(in[0]);
        const int64_t c = ir::attr<Op::one_hot, "num_classes">(attrs), rows = in_types[0].numel();
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
