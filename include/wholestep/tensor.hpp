// ws::Tensor: a small handle to a typed, shaped array.
//
// A concrete tensor owns (shares) storage and computes eagerly with the
// reference kernels. While a function is being traced, the same calls record
// graph nodes instead and return traced tensors, which have a type but no
// values: reading one (item(), to_vector(), data()) throws a ws::Error that
// says why and where. The same user code runs both ways.
//
// Binary operations broadcast numpy-style. Every operation records the user's
// source location, so errors and graph nodes point at the user's line.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "wholestep/dtype.hpp"
#include "wholestep/error.hpp"

namespace ws {

namespace detail {
struct TensorImpl;
}

using Loc = std::source_location;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}

  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  static Tensor scalar(double value, DType dtype = DType::f32) { return full({}, value, dtype); }
  static Tensor from_vector(const std::vector<float>& v, const Shape& shape);
  static Tensor from_vector(const std::vector<double>& v, const Shape& shape);
  static Tensor from_vector(const std::vector<int64_t>& v, const Shape& shape);

  bool defined() const { return impl_ != nullptr; }
  bool is_traced() const;
  const Shape& shape() const;
  DType dtype() const;
  int64_t dim() const { return int64_t(shape().size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return ws::numel(shape()); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  std::string str() const;  // "f32[2,3]"

  // Element access on concrete tensors. T must match dtype() (bool: uint8_t).
  template <class T>
  T* data(Loc loc = Loc::current());
  template <class T>
  const T* data(Loc loc = Loc::current()) const;
  double item(Loc loc = Loc::current()) const;
  std::vector<double> to_vector(Loc loc = Loc::current()) const;

  Tensor clone(Loc loc = Loc::current()) const;
  // Copies `src`'s values into this tensor's storage (same type). While a
  // step is traced, copying into a registered buffer records the mutation:
  // the buffer becomes an output aliased to its input (running statistics).
  void copy_(const Tensor& src, Loc loc = Loc::current());

  Tensor reshape(const Shape& shape, Loc loc = Loc::current()) const;
  Tensor t(Loc loc = Loc::current()) const;  // 2-d transpose
  Tensor sum(std::vector<int64_t> axes, Loc loc = Loc::current()) const;
  Tensor mean(std::vector<int64_t> axes, Loc loc = Loc::current()) const;
  Tensor max(std::vector<int64_t> axes, Loc loc = Loc::current()) const;

  detail::TensorImpl* impl() const { return impl_.get(); }

 private:
  std::shared_ptr<detail::TensorImpl> impl_;
};

// An operand of an operator that remembers the user's source line: operators
// cannot take a defaulted location, but a converting constructor can.
struct Arg {
  Arg(const Tensor& t, Loc loc = Loc::current()) : t(t), loc(loc) {}  // NOLINT: implicit
  const Tensor& t;
  Loc loc;
};

Tensor add(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor sub(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor mul(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor div(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor maximum(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor pow(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
// The angle of the point (b, a) in (-pi, pi], a the ordinate (std::atan2).
Tensor atan2(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
// a - trunc(a / b) b, with a's sign (std::fmod; integers: a % b).
Tensor fmod(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
// With a scalar second operand of the tensor's dtype.
Tensor add(const Tensor& a, double b, Loc loc = Loc::current());
Tensor sub(const Tensor& a, double b, Loc loc = Loc::current());
Tensor mul(const Tensor& a, double b, Loc loc = Loc::current());
Tensor div(const Tensor& a, double b, Loc loc = Loc::current());
Tensor neg(const Tensor& x, Loc loc = Loc::current());
Tensor exp(const Tensor& x, Loc loc = Loc::current());
Tensor log(const Tensor& x, Loc loc = Loc::current());
Tensor relu(const Tensor& x, Loc loc = Loc::current());
Tensor tanh(const Tensor& x, Loc loc = Loc::current());
Tensor sigmoid(const Tensor& x, Loc loc = Loc::current());
Tensor sqrt(const Tensor& x, Loc loc = Loc::current());
Tensor rsqrt(const Tensor& x, Loc loc = Loc::current());
Tensor erf(const Tensor& x, Loc loc = Loc::current());
Tensor erfinv(const Tensor& x, Loc loc = Loc::current());   // erf(y) = x
Tensor lgamma(const Tensor& x, Loc loc = Loc::current());   // log |Gamma(x)|
Tensor digamma(const Tensor& x, Loc loc = Loc::current());  // lgamma's derivative
Tensor expm1(const Tensor& x, Loc loc = Loc::current());    // e^x - 1, exact near 0
Tensor log1p(const Tensor& x, Loc loc = Loc::current());    // log(1 + x), exact near 0
Tensor sin(const Tensor& x, Loc loc = Loc::current());      // of radians, any finite x
// tan, the inverse trigonometric and the hyperbolic functions, as std::'s
Tensor tan(const Tensor& x, Loc loc = Loc::current());
Tensor asin(const Tensor& x, Loc loc = Loc::current());
Tensor acos(const Tensor& x, Loc loc = Loc::current());
Tensor atan(const Tensor& x, Loc loc = Loc::current());
Tensor sinh(const Tensor& x, Loc loc = Loc::current());
Tensor cosh(const Tensor& x, Loc loc = Loc::current());
Tensor asinh(const Tensor& x, Loc loc = Loc::current());
Tensor acosh(const Tensor& x, Loc loc = Loc::current());
Tensor atanh(const Tensor& x, Loc loc = Loc::current());
Tensor cos(const Tensor& x, Loc loc = Loc::current());
// x itself, through which no gradient flows (torch's detach()).
Tensor stop_gradient(const Tensor& x, Loc loc = Loc::current());
// x itself; the gradients of its readers reach x summed into one value
// before x's other gradients join them. A composite reads its operand
// through one, so that its gradient is one value, as an eager op's
// backward gives it: y = x + layer_norm(x) over one element gets exactly
// y's gradient, the normalization's two opposite terms cancelling first.
Tensor identity(const Tensor& x, Loc loc = Loc::current());
// `value` itself; the gradient reaching it goes whole to `via` (of the same
// shape and dtype), none to `value`: a composite's value from one formula,
// its gradient from another.
Tensor straight_through(const Tensor& value, const Tensor& via, Loc loc = Loc::current());
// a to the power e, elementwise; pow(a, b) with a tensor exponent broadcasts.
Tensor pow(const Tensor& a, double exponent, Loc loc = Loc::current());
// a @ b over the last two dims, with either operand transposed first. Leading
// (batch) dims must be equal: [..., m, k] @ [..., k, n] -> [..., m, n].
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false,
              Loc loc = Loc::current());
Tensor sum(const Tensor& x, std::vector<int64_t> axes, Loc loc = Loc::current());
Tensor mean(const Tensor& x, std::vector<int64_t> axes, Loc loc = Loc::current());
Tensor max(const Tensor& x, std::vector<int64_t> axes, Loc loc = Loc::current());
Tensor broadcast_to(const Tensor& x, const Shape& shape, Loc loc = Loc::current());
Tensor reshape(const Tensor& x, const Shape& shape, Loc loc = Loc::current());
Tensor transpose(const Tensor& x, std::vector<int64_t> perm, Loc loc = Loc::current());
// i64 labels [..] -> one-hot [.., num_classes] of `dtype`.
Tensor one_hot(const Tensor& labels, int64_t num_classes, DType dtype = DType::f32,
               Loc loc = Loc::current());
Tensor eq(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor ne(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor lt(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor le(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor gt(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor ge(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
// x itself when every element of the bool `ok` is true; otherwise the
// computation (traced: the step, which then changes nothing) fails with
// `message`, the position of ok's first false element and the caller's
// line. Its gradient is x's.
Tensor checked(const Tensor& x, const Tensor& ok, const std::string& message,
               Loc loc = Loc::current());
// cond ? a : b, elementwise (broadcast).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor cast(const Tensor& x, DType dtype, Loc loc = Loc::current());

// Elements [start, end) of `axis`.
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, Loc loc = Loc::current());
// Joins tensors along `axis` (all other dims equal).
Tensor concat(const std::vector<Tensor>& xs, int64_t axis, Loc loc = Loc::current());
// Rows of `table` ([V, D...]) at i64 `indices` ([I...]) -> [I..., D...]. An
// index outside [0, V) is an error naming it.
Tensor gather(const Tensor& table, const Tensor& indices, Loc loc = Loc::current());
// The i64 positions along `axis` (negative from the end) that sort x
// stably: ascending or descending, equal elements in their order, NaN above
// every number (torch.sort(stable=True)'s indices). Floating-point x.
Tensor argsort(const Tensor& x, int64_t axis, bool descending = false, Loc loc = Loc::current());
// The connectionist temporal classification loss of each sample (op
// ctc_loss, docs/ops.md): log_probs [T, N, C], i64 targets [N, S] or 1-d
// (the samples' targets one after another), i64 input_lengths and
// target_lengths [N] -> [N]; inf where no alignment exists (0 with
// zero_infinity). A length or a target out of range is an error naming it.
// Its gradient is torch's, exact through log-probabilities (log_softmax).
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank = 0, bool zero_infinity = false,
                Loc loc = Loc::current());
// A tensor whose elements are their index along `axis`.
Tensor iota(const Shape& shape, int64_t axis, DType dtype = DType::i64, Loc loc = Loc::current());

// 2-d convolution of x [N, C, H, W] with w [O, C/groups, KH, KW] (no bias),
// as torch.nn.functional.conv2d. Pairs are {height, width}.
struct Conv2dOptions {
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};
Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dOptions& opts = {},
              Loc loc = Loc::current());
// 3-d convolution of x [N, C, D, H, W] with w [O, C/groups, KD, KH, KW] (no
// bias), as torch.nn.functional.conv3d: op conv2d of 5-d operands. Triples
// are {depth, height, width}.
struct Conv3dOptions {
  std::vector<int64_t> stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};
  int64_t groups = 1;
};
Tensor conv3d(const Tensor& x, const Tensor& w, const Conv3dOptions& opts = {},
              Loc loc = Loc::current());
// Pooling over [N, C, H, W]; stride defaults to the kernel size (pass {}).
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, Loc loc = Loc::current());
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, bool count_include_pad = true,
                  Loc loc = Loc::current());

// Uniform numbers in [0, 1) from the counter-based generator: each call
// consumes numel(shape) numbers of the stream set by manual_seed. Inside a
// compiled step the seed and offset are graph inputs and the step advances
// the offset, so every mode draws the same numbers.
Tensor rand_stream(const Shape& shape, DType dtype = DType::f32, Loc loc = Loc::current());

Tensor operator+(const Tensor& a, Arg b);
Tensor operator-(const Tensor& a, Arg b);
Tensor operator*(const Tensor& a, Arg b);
Tensor operator/(const Tensor& a, Arg b);
Tensor operator-(Arg a);
// With a scalar of the tensor's dtype.
Tensor operator+(Arg a, double b);
Tensor operator-(Arg a, double b);
Tensor operator*(Arg a, double b);
Tensor operator/(Arg a, double b);
Tensor operator*(double a, Arg b);

// Seeds both generators: the one for initialization (rand_uniform, randn)
// and the counter-based stream (rand_stream, dropout), whose offset restarts
// at 0.
void manual_seed(uint64_t seed);
// The counter-based stream's position, to save and restore (runs that must
// draw the same numbers, like the modes of a comparison, each restore their
// own).
struct RandomStream {
  uint64_t seed = 0, offset = 0;
};
RandomStream random_stream();
void set_random_stream(const RandomStream& s);
// Random numbers for initialization, from a seeded generator.
Tensor rand_uniform(const Shape& shape, double lo, double hi, DType dtype = DType::f32);
Tensor randn(const Shape& shape, double mean = 0, double std = 1, DType dtype = DType::f32);

}  // namespace ws
