// The activations beyond relu and gelu, each as PyTorch computes it. Where a
// function is piecewise, it is a select of its pieces, so its gradient at a
// kink is the piece torch's backward takes there; a piece that could
// overflow where it is not selected reads a clamped input instead (a zero
// gradient times an infinite derivative would be NaN).
#include <cmath>

#include <fmt/format.h>

#include "wholestep/nn.hpp"

namespace ws::nn {
namespace {

Tensor scalar(const Tensor& x, double v) { return Tensor::scalar(v, x.dtype()); }

// a·b as torch multiplies two Python floats it has cast to the tensor's
// dtype: each rounded first, then their product rounded once.
double product_in(DType dtype, double a, double b) {
  if (dtype == DType::f32) return double(float(double(float(a)) * double(float(b))));
  return a * b;
}

}  // namespace

Tensor leaky_relu(const Tensor& x, double negative_slope, Loc loc) {
  return where(gt(x, scalar(x, 0), loc), x, mul(x, negative_slope, loc), loc);
}

Tensor elu(const Tensor& x, double alpha, double scale, double input_scale, Loc loc) {
  // x <= 0: expm1(input_scale·x)·(alpha·scale); else x·scale.
  Tensor neg_side = le(x, scalar(x, 0), loc);
  Tensor xs = where(neg_side, x, scalar(x, 0), loc);
  if (input_scale != 1.0) xs = mul(xs, input_scale, loc);
  Tensor low = mul(expm1(xs, loc), product_in(x.dtype(), alpha, scale), loc);
  Tensor high = scale == 1.0 ? x : mul(x, scale, loc);
  return where(neg_side, low, high, loc);
}

Tensor hardtanh(const Tensor& x, double min_value, double max_value, Loc loc) {
  if (!(min_value <= max_value))
    throw Error(fmt::format("hardtanh: min_value {} is above max_value {}{}", min_value, max_value,
                            at(SourceLoc::from(loc))));
  Tensor upper = where(ge(x, scalar(x, max_value), loc), scalar(x, max_value), x, loc);
  return where(le(x, scalar(x, min_value), loc), scalar(x, min_value), upper, loc);
}

Tensor clamp(const Tensor& x, double min_value, double max_value, Loc loc) {
  Tensor out = x;
  if (!std::isnan(min_value))
    out = where(lt(x, scalar(x, min_value), loc), scalar(x, min_value), out, loc);
  if (!std::isnan(max_value))
    out = where(gt(out, scalar(x, max_value), loc), scalar(x, max_value), out, loc);
  return out;
}

Tensor hardsigmoid(const Tensor& x, Loc loc) {
  // Gradient 1/6 strictly inside (-3, 3), 0 at and beyond the ends.
  Tensor inner = div(add(x, 3.0, loc), 6.0, loc);
  Tensor upper = where(ge(x, scalar(x, 3), loc), scalar(x, 1), inner, loc);
  return where(le(x, scalar(x, -3), loc), scalar(x, 0), upper, loc);
}

Tensor hardswish(const Tensor& x, Loc loc) {
  // The pieces as torch's vectorized backward takes them, the one nearly
  // every element sees: the middle on [-3, 3), so x/3 + 1/2 at -3 and 1 at
  // 3 (its scalar loop, run on the last few elements of a tensor, takes
  // the middle at 3 too).
  Tensor inner = div(mul(x, add(x, 3.0, loc), loc), 6.0, loc);
  Tensor upper = where(lt(x, scalar(x, 3), loc), inner, x, loc);
  return where(lt(x, scalar(x, -3), loc), scalar(x, 0), upper, loc);
}

Tensor softplus(const Tensor& x, double beta, double threshold, Loc loc) {
  if (!(beta > 0))
    throw Error(
        fmt::format("softplus: beta must be positive, got {}{}", beta, at(SourceLoc::from(loc))));
  Tensor bx = beta == 1.0 ? x : mul(x, beta, loc);
  Tensor linear = gt(bx, scalar(x, threshold), loc);
  Tensor safe = where(linear, scalar(x, 0), bx, loc);
  Tensor smooth = log1p(exp(safe, loc), loc);
  if (beta != 1.0) smooth = div(smooth, beta, loc);
  return where(linear, x, smooth, loc);
}

Tensor mish(const Tensor& x, Loc loc) {
  // torch: x·tanh(log1p(exp(x))); above 20 log1p(exp(x)) rounds to x in
  // either float type, so softplus's threshold changes no value.
  return mul(x, tanh(softplus(x, 1.0, 20.0, loc), loc), loc);
}

Tensor log_sigmoid(const Tensor& x, Loc loc) {
  // |x| differentiated as -1 below 0 and 1 from 0 on: torch's backward
  // gives 1/2 at 0.
  Tensor negative = lt(x, scalar(x, 0), loc);
  Tensor low = where(negative, x, scalar(x, 0), loc);
  Tensor magnitude = where(negative, neg(x, loc), x, loc);
  return sub(low, log1p(exp(neg(magnitude, loc), loc), loc), loc);
}

Tensor silu(const Tensor& x, Loc loc) { return mul(x, sigmoid(x, loc), loc); }

Tensor prelu(const Tensor& x, const Tensor& weight, Loc loc) {
  Tensor w = weight;
  if (weight.numel() != 1) {
    if (x.dim() < 2 || weight.dim() != 1 || weight.size(0) != x.size(1))
      throw Error(
          fmt::format("prelu: weight {} must have one value or one per channel of the "
                      "input {} (dim 1){}",
                      weight.str(), x.str(), at(SourceLoc::from(loc))));
    Shape s(size_t(x.dim()), 1);
    s[1] = weight.size(0);
    w = weight.reshape(s, loc);
  } else if (weight.dim() != 0) {
    w = weight.reshape({}, loc);
  }
  return where(gt(x, scalar(x, 0), loc), x, mul(x, w, loc), loc);
}

}  // namespace ws::nn
