#include "exec/kernels.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <omp.h>

#include <fmt/format.h>

#include "exec/dnnl_backend.hpp"
#include "exec/elementwise.hpp"
#include "exec/loops.hpp"
#include "exec/nn_kernels.hpp"
#include "exec/parallel.hpp"
#include "exec/philox.hpp"
#include "exec/reduce.hpp"
#include "exec/reference.hpp"
#include "ir/attr.hpp"

namespace ws::exec {
namespace {

using ir::Op;

template <class T>
T* at(void* const* s, int32_t i) {
  return static_cast<T*>(s[i]);
}

void k_reference(const Kernel& k, void* const* s) {
  const void* few[kMaxOperands];
  std::vector<const void*> many;  // a concatenation of more
  const void** in = few;
  if (k.in.size() > kMaxOperands) {
    many.resize(k.in.size());
    in = many.data();
  }
  for (size_t i = 0; i < k.in.size(); ++i) in[i] = s[k.in[i]];
  run_reference(k.op, k.attrs, k.in_types, in, k.out_type, s[k.out], k.loc);
}

// Work estimates for parallel_for, in cheap elements (see parallel.hpp):
// a byte copied.
constexpr int64_t kCopyGrain = 4 * kCheapGrain;  // bytes
constexpr int64_t kPhiloxCost = 16;              // ten rounds of 32x32->64-bit products: ~2 ns

void k_copy(const Kernel& k, void* const* s) {
  const char* x = at<const char>(s, k.in[0]);
  char* y = at<char>(s, k.out);
  if (x == y) return;
  parallel_for(
      k.p[0], kCopyGrain, [&](int64_t b, int64_t e) { std::memcpy(y + b, x + b, size_t(e - b)); },
      64);
}

// Rows of bytes moved between operands, any dtype: a slice copies a window
// of every input row (p = {rows, out_row, in_row, start}, in bytes); a concat
// lays every input's rows side by side (p = {rows, out_row}, k.strides holds
// each input's row bytes). Parallel over rows.
void k_slice(const Kernel& k, void* const* s) {
  const char* x = at<const char>(s, k.in[0]);
  char* y = at<char>(s, k.out);
  const int64_t out_row = k.p[1], in_row = k.p[2], start = k.p[3];
  parallel_for(
      k.p[0], std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(out_row, 1)),
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          std::memcpy(y + r * out_row, x + r * in_row + start, size_t(out_row));
      },
      1);
}

void k_concat(const Kernel& k, void* const* s) {
  char* y = at<char>(s, k.out);
  const int64_t out_row = k.p[1];
  parallel_for(
      k.p[0], std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(out_row, 1)),
      [&](int64_t b, int64_t e) {
        int64_t col = 0;
        for (size_t a = 0; a < k.in.size(); ++a) {
          const char* x = at<const char>(s, k.in[a]);
          const int64_t row = k.strides[a];
          for (int64_t r = b; r < e; ++r)
            std::memcpy(y + r * out_row + col, x + r * row, size_t(row));
          col += row;
        }
      },
      1);
}

template <class T>
void k_fill(const Kernel& k, void* const* s) {
  T* y = at<T>(s, k.out);
  const T v = T(ir::attr<Op::full, "value">(k.attrs));
  parallel_for(k.p[0], kCheapGrain, [&](int64_t b, int64_t e) { std::fill(y + b, y + e, v); });
}

// Chunks of the array function: element i depends on x[i] alone, so the
// split never changes a bit.
template <class T, Op op>
void k_unary(const Kernel& k, void* const* s) {
  const T* x = at<T>(s, k.in[0]);
  T* y = at<T>(s, k.out);
  parallel_for(k.p[0], grain_for(elementwise_cost(op)),
               [&](int64_t b, int64_t e) { unary_array<op>(x + b, y + b, e - b); });
}

// p[1], p[2]: 1 when the operand is an array, 0 when it is one value.
template <class T, Op op>
void k_binary(const Kernel& k, void* const* s) {
  using R = decltype(binary_value<op>(T{}, T{}));
  const T *a = at<T>(s, k.in[0]), *b = at<T>(s, k.in[1]);
  R* y = at<R>(s, k.out);
  const bool va = k.p[1], vb = k.p[2];
  parallel_for(k.p[0], grain_for(elementwise_cost(op)),
               [=](int64_t lo, int64_t hi) { binary_range<T, op>(a, b, y, va, vb, lo, hi); });
}

template <class T>
void k_select(const Kernel& k, void* const* s) {
  const uint8_t* c = at<uint8_t>(s, k.in[0]);
  const T *a = at<T>(s, k.in[1]), *b = at<T>(s, k.in[2]);
  T* y = at<T>(s, k.out);
  const int64_t sc = k.p[1], sa = k.p[2], sb = k.p[3];
  parallel_for(k.p[0], kCheapGrain,
               [=](int64_t lo, int64_t hi) { select_range(c, a, b, y, sc, sa, sb, lo, hi); });
}

// A matrix product or convolution: the node's oneDNN primitives.
void k_backend(const Kernel& k, void* const* s) {
  k.backend->run(s[k.in[0]], s[k.in[1]], s[k.out], k.scratch >= 0 ? s[k.scratch] : nullptr);
}

// out = (a @ b) + bias: the bias is the primitive's.
void k_backend_bias(const Kernel& k, void* const* s) {
  k.backend->run(s[k.in[0]], s[k.in[1]], s[k.out], k.scratch >= 0 ? s[k.scratch] : nullptr,
                 s[k.in[2]]);
}

// out = relu((a @ b) + bias): the product, then the relu over its rows while
// they are in cache, each thread over the rows it wrote. oneDNN's relu
// post-op would map NaN to 0; this keeps it, as PyTorch's relu and the
// unfused select(y <= 0, +0, y) do.
void k_backend_bias_relu(const Kernel& k, void* const* s) {
  k_backend_bias(k, s);
  float* y = at<float>(s, k.out);
  parallel_for(k.out_type.numel(), kCheapGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] = y[i] <= 0.0f ? 0.0f : y[i];
  });
}

// out = c + ((a @ b) + bias), accumulated where the result lives (c's
// block, when c dies there): c is copied there first otherwise.
void k_backend_bias_add(const Kernel& k, void* const* s) {
  if (s[k.in[3]] != s[k.out]) std::memcpy(s[k.out], s[k.in[3]], k.out_type.bytes());
  k_backend_bias(k, s);
}

// out = c + alpha * (a @ b), accumulated where the result lives (the
// parameter it updates, when in place): c is copied there first otherwise.
void k_backend_add(const Kernel& k, void* const* s) {
  if (s[k.in[2]] != s[k.out]) std::memcpy(s[k.out], s[k.in[2]], k.out_type.bytes());
  k.backend->run(s[k.in[0]], s[k.in[1]], s[k.out], k.scratch >= 0 ? s[k.scratch] : nullptr,
                 s[k.in[3]], s[k.in[4]]);
}

// Strided gather for broadcast and transpose with precomputed strides.
template <class T>
void k_strided(const Kernel& k, void* const* s) {
  const T* x = at<T>(s, k.in[0]);
  T* y = at<T>(s, k.out);
  parallel_for(k.p[0], kCheapGrain,
               [&](int64_t b, int64_t e) { strided_gather(k.walk, k.strides, x, y + b, b, e); });
}

// Counter-based random numbers: element i depends on (seed, offset + skip + i)
// alone, so chunks continue the stream at offset + begin.
template <class T>
void k_random_uniform(const Kernel& k, void* const* s) {
  const uint64_t seed = uint64_t(*at<const int64_t>(s, k.in[0]));
  const uint64_t offset = uint64_t(*at<const int64_t>(s, k.in[1]) + k.p[1]);
  T* y = at<T>(s, k.out);
  parallel_for(k.p[0], grain_for(kPhiloxCost), [&](int64_t b, int64_t e) {
    philox_uniform(seed, offset + uint64_t(b), y + b, e - b);
  });
}

// Reductions run the functions the reference kernels call (reduce.hpp), so
// every mode sums in the same order; they parallelize themselves.
template <class T, bool is_max>
void k_reduce(const Kernel& k, void* const* s) {
  const T* x = at<T>(s, k.in[0]);
  T* y = at<T>(s, k.out);
  if constexpr (is_max)
    reduce_max(k.walk, k.strides, x, y);
  else
    reduce_sum(k.walk, k.strides, x, y);
}

// Max pooling and its gradient (nn_kernels.hpp), as the reference computes them.
template <class T, bool grad>
void k_max_pool(const Kernel& k, void* const* s) {
  const ir::Pool2dGeom g = ir::pool2d_node_geom(k.op, k.attrs, k.in_types, k.out_type);
  const bool nhwc = g.layout == ir::ImageLayout::nhwc;
  if constexpr (grad)
    (nhwc ? max_pool2d_grad_nhwc<T> : max_pool2d_grad<T>)(g, at<const T>(s, k.in[0]),
                                                          at<const T>(s, k.in[1]), at<T>(s, k.out));
  else
    (nhwc ? max_pool2d_nhwc<T> : max_pool2d<T>)(g, at<const T>(s, k.in[0]), at<T>(s, k.out));
}

// The kernel's name for a reduction walk (reduce_walk_name).
const char* reduce_name(const Kernel& k, bool is_max) {
  const std::string_view w = reduce_walk_name(k.walk, k.strides);
  if (w == "rows") return is_max ? "max_rows" : "sum_rows";
  if (w == "columns") return is_max ? "max_columns" : "sum_columns";
  if (w == "all") return is_max ? "max_all" : "sum_all";
  return is_max ? "max_none" : "sum_none";
}

// A strided walk over `shape` reading at `strides`, with its dims merged.
void set_walk(Kernel& k, Shape shape, std::vector<int64_t> strides) {
  merge_dims(shape, strides);
  k.walk = std::move(shape);
  k.strides = std::move(strides);
}

template <class T>
KernelFn binary_fn(Op op) {
  KernelFn fn = nullptr;
  with_binary_op(op, [&](auto o) { fn = k_binary<T, decltype(o)::value>; });
  return fn;
}

template <class T>
KernelFn unary_fn(Op op) {
  KernelFn fn = nullptr;
  with_unary_op(op, [&](auto o) { fn = k_unary<T, decltype(o)::value>; });
  return fn;
}

template <class T>
bool choose_typed(Kernel& k, const std::vector<bool>& scalar) {
  const Op op = k.op;
  k.p[0] = k.out_type.numel();
  if (KernelFn f = binary_fn<T>(op)) {
    k.fn = f;
    k.name = ir::op_name(op).data();
    k.p[1] = !scalar[0];
    k.p[2] = !scalar[1];
    return true;
  }
  if (KernelFn f = unary_fn<T>(op); f && !scalar[0]) {
    k.fn = f;
    k.name = ir::op_name(op).data();
    return true;
  }
  switch (op) {
    case Op::select:
      k.fn = k_select<T>;
      k.name = "select";
      k.p[1] = !scalar[0], k.p[2] = !scalar[1], k.p[3] = !scalar[2];
      return true;
    case Op::full:
      k.fn = k_fill<T>;
      k.name = "fill";
      return true;
    case Op::reduce_sum:
      set_walk(
          k, k.in_types[0].shape,
          reduce_result_strides(k.in_types[0].shape, ir::attr<Op::reduce_sum, "axes">(k.attrs)));
      k.fn = k_reduce<T, false>;
      k.name = reduce_name(k, false);
      return true;
    case Op::reduce_max:
      set_walk(
          k, k.in_types[0].shape,
          reduce_result_strides(k.in_types[0].shape, ir::attr<Op::reduce_max, "axes">(k.attrs)));
      k.fn = k_reduce<T, true>;
      k.name = reduce_name(k, true);
      return true;
    case Op::max_pool2d:
    case Op::max_pool2d_grad: {
      const Shape& x = k.in_types[0].shape;  // [n, c, h, w]
      if (sizeof(T) == 4 && x[2] * x[3] >= (int64_t(1) << 31)) return false;
      const bool grad = op == Op::max_pool2d_grad;
      k.fn = grad ? k_max_pool<T, true> : k_max_pool<T, false>;
      k.name = grad ? "max_pool2d_grad" : "max_pool2d";
      return true;
    }
    default: return false;
  }
}

}  // namespace

bool takes_scalar_operands(Op op, DType dt) {
  if (dt != DType::f32 && dt != DType::f64) return false;
  return op == Op::select || binary_fn<float>(op) != nullptr;
}

bool computes_in_place(Op op, DType dt) {
  return takes_scalar_operands(op, dt) ||
         ((dt == DType::f32 || dt == DType::f64) && unary_fn<float>(op) != nullptr);
}

void choose_kernel(Kernel& k, const std::vector<bool>& scalar) {
  if (k.op == Op::reshape) {
    k.p[0] = int64_t(k.out_type.bytes());
    k.fn = k_copy;
    k.name = "copy";
    return;
  }
  const int64_t es = int64_t(dtype_size(k.out_type.dtype));
  if (k.op == Op::slice) {
    const SliceDims d = slice_dims(k.in_types[0].shape, k.attrs);
    k.p = {d.outer, d.out_row * es, d.in_row * es, d.start * es};
    k.fn = k_slice;
    k.name = "slice";
    return;
  }
  if (k.op == Op::concat) {
    int64_t axis = ir::attr<Op::concat, "axis">(k.attrs);
    if (axis < 0) axis += k.out_type.rank();
    const int64_t rows = std::max<int64_t>(
        1, dims_product(k.out_type.shape.begin(), k.out_type.shape.begin() + axis));
    k.p = {rows, k.out_type.numel() / rows * es};
    k.strides.clear();
    for (const ir::Type& t : k.in_types) k.strides.push_back(t.numel() / rows * es);
    k.fn = k_concat;
    k.name = "concat";
    return;
  }
  // Moving elements needs no arithmetic: one kernel per element size serves
  // every dtype. Merged dims make a row broadcast or a plain copy memcpys.
  if (k.op == Op::broadcast || k.op == Op::transpose) {
    const Shape& in = k.in_types[0].shape;
    set_walk(k, k.out_type.shape,
             k.op == Op::broadcast
                 ? broadcast_source_strides(in, k.out_type.shape,
                                            ir::attr<Op::broadcast, "dims">(k.attrs))
                 : transpose_source_strides(in, ir::attr<Op::transpose, "perm">(k.attrs)));
    const size_t size = dtype_size(k.out_type.dtype);
    k.fn = size == 1 ? k_strided<uint8_t> : size == 4 ? k_strided<uint32_t> : k_strided<uint64_t>;
    k.name = k.op == Op::broadcast ? "broadcast" : "transpose";
    k.p[0] = k.out_type.numel();
    WS_CHECK(size == 1 || size == 4 || size == 8) << "element size " << size;
    WS_CHECK(int64_t(k.walk.size()) <= kMaxRank) << "rank " << k.walk.size() << " walk";
    return;
  }
  if (k.op == Op::random_uniform) {  // i64 operands, floating result
    k.p[0] = k.out_type.numel();
    k.p[1] = ir::attr<Op::random_uniform, "skip">(k.attrs);
    k.fn = k.out_type.dtype == DType::f32 ? k_random_uniform<float> : k_random_uniform<double>;
    k.name = "random_uniform";
    return;
  }
  if (k.backend) {
    const bool relu = k.op == Op::matmul_bias && ir::attr<Op::matmul_bias, "activation">(k.attrs);
    k.fn = k.op == Op::matmul_add        ? k_backend_add
           : k.op == Op::matmul_bias     ? (relu ? k_backend_bias_relu : k_backend_bias)
           : k.op == Op::matmul_bias_add ? k_backend_bias_add
                                         : k_backend;
    k.name = k.op == Op::matmul_add          ? "dnnl_matmul_add"
             : k.op == Op::matmul_bias       ? (relu ? "dnnl_matmul_bias_relu" : "dnnl_matmul_bias")
             : k.op == Op::matmul_bias_add   ? "dnnl_matmul_bias_add"
             : k.op == Op::matmul            ? "dnnl_matmul"
             : k.op == Op::conv2d            ? "dnnl_conv"
             : k.op == Op::conv2d_input_grad ? "dnnl_conv_input_grad"
                                             : "dnnl_conv_weight_grad";
    return;
  }
  DType dt = k.in_types.empty() ? k.out_type.dtype : k.in_types.back().dtype;
  bool done = false;
  if (dt == DType::f32) done = choose_typed<float>(k, scalar);
  if (dt == DType::f64) done = choose_typed<double>(k, scalar);
  if (!done) {
    for (bool sc : scalar) WS_CHECK(!sc) << "no scalar-operand kernel for " << ir::op_name(k.op);
    k.fn = k_reference;
    k.name = "reference";
  }
}

// Reductions keep their partial sums on the stack (reduce.cpp).
Kernel copy_kernel(int32_t from, int32_t to, const ir::Type& type) {
  Kernel k;
  k.fn = k_copy;
  k.name = "copy";
  k.op = Op::reshape;
  k.in = {from};
  k.in_types = {type};
  k.out = to;
  k.out_type = type;
  k.p[0] = int64_t(type.bytes());
  return k;
}

const char* loop_isa() {
#if defined(__AVX512F__)
  return "AVX-512 (16 floats a vector)";
#elif defined(__AVX2__)
  return "AVX2 (8 floats a vector)";
#elif defined(__AVX__)
  return "AVX (8 floats a vector)";
#else
  return "SSE2 (4 floats a vector)";
#endif
}

}  // namespace ws::exec
