#include "exec/kernels.hpp"

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include <omp.h>

#include <fmt/format.h>

#include "exec/elementwise.hpp"
#include "exec/nn_kernels.hpp"
#include "exec/reference.hpp"

extern "C" void openblas_set_num_threads(int);

namespace ws::exec {
namespace {

using ir::Op;

template <class T>
T* at(void* const* s, int32_t i) {
  return static_cast<T*>(s[i]);
}

void k_reference(const Kernel& k, void* const* s) {
  const void* in[kMaxOperands];
  for (size_t i = 0; i < k.in.size(); ++i) in[i] = s[k.in[i]];
  run_reference(k.op, k.attrs, k.in_types, in, k.out_type, s[k.out], k.loc);
}

void k_copy(const Kernel& k, void* const* s) {
  if (s[k.out] != s[k.in[0]]) std::memcpy(s[k.out], s[k.in[0]], size_t(k.p[0]));
}

template <class T>
void k_fill(const Kernel& k, void* const* s) {
  std::fill_n(at<T>(s, k.out), k.p[0], T(k.attrs.f("value")));
}

template <class T, Op op>
void k_unary(const Kernel& k, void* const* s) {
  const T* x = at<T>(s, k.in[0]);
  T* y = at<T>(s, k.out);
  unary_array<op>(x, y, k.p[0]);
}

template <class T, Op op>
inline auto binop(T a, T b) {
  if constexpr (op == Op::add) return T(a + b);
  if constexpr (op == Op::sub) return T(a - b);
  if constexpr (op == Op::mul) return T(a * b);
  if constexpr (op == Op::div) return T(a / b);
  if constexpr (op == Op::pow) return T(std::pow(double(a), double(b)));  // as the reference
  if constexpr (op == Op::maximum)
    return (std::isnan(a) || std::isnan(b)) ? T(NAN) : (a > b ? a : b);
  if constexpr (op == Op::eq) return uint8_t(a == b);
  if constexpr (op == Op::ne) return uint8_t(a != b);
  if constexpr (op == Op::lt) return uint8_t(a < b);
  if constexpr (op == Op::le) return uint8_t(a <= b);
  if constexpr (op == Op::gt) return uint8_t(a > b);
  if constexpr (op == Op::ge) return uint8_t(a >= b);
}

// p[1], p[2]: 1 when the operand is an array, 0 when it is one value.
template <class T, Op op>
void k_binary(const Kernel& k, void* const* s) {
  using R = decltype(binop<T, op>(T{}, T{}));
  const T *a = at<T>(s, k.in[0]), *b = at<T>(s, k.in[1]);
  R* y = at<R>(s, k.out);
  const int64_t n = k.p[0];
  if (k.p[1] && k.p[2]) {
    for (int64_t i = 0; i < n; ++i) y[i] = binop<T, op>(a[i], b[i]);
  } else if (k.p[1]) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) y[i] = binop<T, op>(a[i], bv);
  } else if (k.p[2]) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) y[i] = binop<T, op>(av, b[i]);
  } else {
    const R v = binop<T, op>(*a, *b);
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

template <class T>
void k_select(const Kernel& k, void* const* s) {
  const uint8_t* c = at<uint8_t>(s, k.in[0]);
  const T *a = at<T>(s, k.in[1]), *b = at<T>(s, k.in[2]);
  T* y = at<T>(s, k.out);
  const int64_t n = k.p[0], sc = k.p[1], sa = k.p[2], sb = k.p[3];
  // The common shapes get loops the compiler vectorizes.
  if (sc && sa && sb) {
    for (int64_t i = 0; i < n; ++i) y[i] = c[i] ? a[i] : b[i];
  } else if (sc && sa) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) y[i] = c[i] ? a[i] : bv;
  } else if (sc && sb) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) y[i] = c[i] ? av : b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = c[i * sc] ? a[i * sa] : b[i * sb];
  }
}

// p = {m, n, k, transpose_a, transpose_b, batch}: `batch` products of
// contiguous matrices.
template <class T>
void k_gemm(const Kernel& k, void* const* s) {
  const int64_t m = k.p[0], n = k.p[1], kk = k.p[2], batch = k.p[5];
  const bool ta = k.p[3], tb = k.p[4];
  if constexpr (std::is_same_v<T, float>) {
    gemm_f32(batch, m, n, kk, ta, tb, at<float>(s, k.in[0]), at<float>(s, k.in[1]),
             at<float>(s, k.out));
  } else {
    const T *a = at<T>(s, k.in[0]), *b = at<T>(s, k.in[1]);
    T* c = at<T>(s, k.out);
    for (int64_t i = 0; i < batch; ++i, a += m * kk, b += kk * n, c += m * n)
      cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                  int(m), int(n), int(kk), 1.0, a, ta ? int(m) : int(kk), b, tb ? int(kk) : int(n),
                  0.0, c, int(n));
  }
}

// Strided gather for broadcast and transpose with precomputed strides.
template <class T>
void k_strided(const Kernel& k, void* const* s) {
  const T* x = at<T>(s, k.in[0]);
  T* y = at<T>(s, k.out);
  strided_rows(k.walk, k.strides, [&](int64_t i, int64_t o, int64_t len, int64_t st) {
    if (st == 1)
      std::memcpy(y + i, x + o, size_t(len) * sizeof(T));
    else if (st == 0)
      std::fill_n(y + i, len, x[o]);
    else
      for (int64_t j = 0; j < len; ++j) y[i + j] = x[o + j * st];
  });
}

// Sum of a [rows, cols] matrix over rows (p[2] = 0: result [cols]) or over
// columns (p[2] = 1: result [rows]).
template <class T>
void k_sum_2d(const Kernel& k, void* const* s) {
  // Sums accumulate in double, as the reference does: rounded once, a sum is
  // (nearly always) the same whatever the order, so modes agree.
  const T* x = at<T>(s, k.in[0]);
  T* y = at<T>(s, k.out);
  const int64_t rows = k.p[0], cols = k.p[1];
  if (k.p[2] == 0) {
    double* acc = at<double>(s, k.scratch);
    std::fill_n(acc, cols, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) acc[c] += double(x[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) y[c] = T(acc[c]);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += double(x[r * cols + c]);
      y[r] = T(acc);
    }
  }
}

// Any reduction, walking the operand with precomputed result strides; sums
// accumulate in double in the scratch.
template <class T, bool is_max>
void k_reduce(const Kernel& k, void* const* s) {
  const T* x = at<T>(s, k.in[0]);
  T* y = at<T>(s, k.out);
  if constexpr (is_max) {
    std::fill_n(y, k.p[0], -std::numeric_limits<T>::infinity());
    strided_rows(k.walk, k.strides, [&](int64_t i, int64_t o, int64_t len, int64_t st) {
      for (int64_t j = 0; j < len; ++j)
        if (std::isnan(x[i + j]) || x[i + j] > y[o + j * st]) y[o + j * st] = x[i + j];
    });
  } else {
    double* acc = at<double>(s, k.scratch);
    std::fill_n(acc, k.p[0], 0.0);
    strided_rows(k.walk, k.strides, [&](int64_t i, int64_t o, int64_t len, int64_t st) {
      if (st == 0) {  // a run of reduced elements: one partial sum
        double part = 0;
        for (int64_t j = 0; j < len; ++j) part += double(x[i + j]);
        acc[o] += part;
      } else {
        for (int64_t j = 0; j < len; ++j) acc[o + j * st] += double(x[i + j]);
      }
    });
    for (int64_t o = 0; o < k.p[0]; ++o) y[o] = T(acc[o]);
  }
}

// Convolutions through im2col and sgemm.
template <Op op>
void k_conv(const Kernel& k, void* const* s) {
  float* scratch = k.scratch >= 0 ? at<float>(s, k.scratch) : nullptr;
  const float *a = at<float>(s, k.in[0]), *b = at<float>(s, k.in[1]);
  float* y = at<float>(s, k.out);
  const Conv2dGeom g = conv2d_node_geom(op, k.attrs, k.in_types, k.out_type);
  if constexpr (op == Op::conv2d) conv2d_f32(g, a, b, y, scratch);
  if constexpr (op == Op::conv2d_input_grad) conv2d_input_grad_f32(g, a, b, y, scratch);
  if constexpr (op == Op::conv2d_weight_grad) conv2d_weight_grad_f32(g, a, b, y, scratch);
}

bool is_conv(Op op) {
  return op == Op::conv2d || op == Op::conv2d_input_grad || op == Op::conv2d_weight_grad;
}

// A strided walk over `shape` reading at `strides`, with its dims merged.
void set_walk(Kernel& k, Shape shape, std::vector<int64_t> strides) {
  merge_dims(shape, strides);
  k.walk = std::move(shape);
  k.strides = std::move(strides);
}

template <class T>
KernelFn binary_fn(Op op) {
  switch (op) {
    case Op::add: return k_binary<T, Op::add>;
    case Op::sub: return k_binary<T, Op::sub>;
    case Op::mul: return k_binary<T, Op::mul>;
    case Op::div: return k_binary<T, Op::div>;
    case Op::pow: return k_binary<T, Op::pow>;
    case Op::maximum: return k_binary<T, Op::maximum>;
    case Op::eq: return k_binary<T, Op::eq>;
    case Op::ne: return k_binary<T, Op::ne>;
    case Op::lt: return k_binary<T, Op::lt>;
    case Op::le: return k_binary<T, Op::le>;
    case Op::gt: return k_binary<T, Op::gt>;
    case Op::ge: return k_binary<T, Op::ge>;
    default: return nullptr;
  }
}

template <class T>
KernelFn unary_fn(Op op) {
  switch (op) {
    case Op::neg: return k_unary<T, Op::neg>;
    case Op::exp: return k_unary<T, Op::exp>;
    case Op::log: return k_unary<T, Op::log>;
    case Op::tanh: return k_unary<T, Op::tanh>;
    case Op::sigmoid: return k_unary<T, Op::sigmoid>;
    case Op::sqrt: return k_unary<T, Op::sqrt>;
    case Op::rsqrt: return k_unary<T, Op::rsqrt>;
    case Op::erf: return k_unary<T, Op::erf>;
    default: return nullptr;
  }
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
    case Op::matmul:
      if constexpr (std::is_floating_point_v<T>) {
        const MatmulDims d = matmul_dims(k.in_types[0].shape, k.in_types[1].shape, k.attrs);
        k.p = {d.m, d.n, d.k, d.ta, d.tb, d.batch};
        k.fn = k_gemm<T>;
        k.name = d.batch > 1 ? (std::is_same_v<T, float> ? "sgemm_batched" : "dgemm_batched")
                             : (std::is_same_v<T, float> ? "sgemm" : "dgemm");
        return true;
      }
      return false;
    case Op::reduce_sum: {
      const Shape& in = k.in_types[0].shape;
      const std::vector<int64_t>& axes = k.attrs.ints("axes");
      if (in.size() == 2 && axes.size() == 1) {
        k.p = {in[0], in[1], axes[0] == 1 || axes[0] == -1};
        k.fn = k_sum_2d<T>;
        k.name = "sum_2d";
        return true;
      }
      if (axes.size() == in.size()) {  // everything: one row
        k.p = {1, k.in_types[0].numel(), 1};
        k.fn = k_sum_2d<T>;
        k.name = "sum_all";
        return true;
      }
      set_walk(k, in, reduce_result_strides(in, axes));
      k.fn = k_reduce<T, false>;
      k.name = "reduce_sum";
      return true;
    }
    case Op::conv2d:
    case Op::conv2d_input_grad:
    case Op::conv2d_weight_grad:
      if constexpr (std::is_same_v<T, float>) {
        k.fn = op == Op::conv2d              ? k_conv<Op::conv2d>
               : op == Op::conv2d_input_grad ? k_conv<Op::conv2d_input_grad>
                                             : k_conv<Op::conv2d_weight_grad>;
        k.name = op == Op::conv2d              ? "conv_im2col_sgemm"
                 : op == Op::conv2d_input_grad ? "conv_dx_sgemm_col2im"
                                               : "conv_dw_im2col_sgemm";
        return true;
      }
      return false;
    case Op::reduce_max:
      set_walk(k, k.in_types[0].shape,
               reduce_result_strides(k.in_types[0].shape, k.attrs.ints("axes")));
      k.fn = k_reduce<T, true>;
      k.name = "reduce_max";
      return true;
    default: return false;
  }
}

}  // namespace

bool takes_scalar_operands(Op op, DType dt) {
  if (dt != DType::f32 && dt != DType::f64) return false;
  return op == Op::select || binary_fn<float>(op) != nullptr;
}

void choose_kernel(Kernel& k, const std::vector<bool>& scalar) {
  if (k.in.size() > kMaxOperands)
    throw Error(fmt::format("{}: {} operands; a kernel reads at most {}{}", ir::op_name(k.op),
                            k.in.size(), kMaxOperands, at(k.loc)));
  if (k.op == Op::reshape) {
    k.p[0] = int64_t(k.out_type.bytes());
    k.fn = k_copy;
    k.name = "copy";
    return;
  }
  // Moving elements needs no arithmetic: one kernel per element size serves
  // every dtype. Merged dims make a row broadcast or a plain copy memcpys.
  if (k.op == Op::broadcast || k.op == Op::transpose) {
    const Shape& in = k.in_types[0].shape;
    set_walk(k, k.out_type.shape,
             k.op == Op::broadcast
                 ? broadcast_source_strides(in, k.out_type.shape, k.attrs.ints("dims"))
                 : transpose_source_strides(in, k.attrs.ints("perm")));
    const size_t size = dtype_size(k.out_type.dtype);
    k.fn = size == 1 ? k_strided<uint8_t> : size == 4 ? k_strided<uint32_t> : k_strided<uint64_t>;
    k.name = k.op == Op::broadcast ? "broadcast" : "transpose";
    WS_CHECK(size == 1 || size == 4 || size == 8) << "element size " << size;
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

int64_t scratch_bytes(Op op, const ir::Attrs& attrs, const std::vector<ir::Type>& in_types,
                      const ir::Type& out_type) {
  if (op == Op::reduce_sum && is_floating(out_type.dtype))
    return std::max<int64_t>(out_type.numel(), 1) * int64_t(sizeof(double));
  if (is_conv(op) && out_type.dtype == DType::f32)
    return conv2d_scratch_floats(conv2d_node_geom(op, attrs, in_types, out_type)) *
           int64_t(sizeof(float));
  return 0;
}

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

namespace {
int g_threads = 0;
}

void set_num_threads(int n) {
  if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
  g_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() {
  if (g_threads == 0) set_num_threads(0);
  return g_threads;
}

}  // namespace ws::exec
