// The layers beyond Linear, and the functional forms they are made of. Every
// layer is a composition of graph ops, so autograd, partitioning and lowering
// see nothing new; only the ops below them are primitives.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "wholestep/nn.hpp"

#include "capture/collective.hpp"
#include "wholestep/dist.hpp"

namespace ws::nn {
namespace {

SourceLoc sl(const Loc& l) { return SourceLoc::from(l); }

int64_t norm_axis(const Tensor& x, int64_t axis, const char* what, const Loc& loc) {
  const int64_t r = x.dim();
  if (axis < -r || axis >= r)
    throw Error(
        fmt::format("{}: axis {} is out of range for {}{}", what, axis, x.str(), at(sl(loc))));
  return axis < 0 ? axis + r : axis;
}

// x's shape with `axis` set to 1: the shape of a reduction kept for broadcasting.
Shape kept(const Tensor& x, int64_t axis) {
  Shape s = x.shape();
  s[size_t(axis)] = 1;
  return s;
}

// [C] -> [1, C, 1, 1], to broadcast over NCHW.
Tensor per_channel(const Tensor& v, Loc loc) { return v.reshape({1, v.size(0), 1, 1}, loc); }

}  // namespace

// x minus its maximum along axis: the shift of a softmax, which changes
// nothing in the result, so no gradient flows through the maximum (its
// would be the rounding of a sum that is 0, sent to the largest element).
Tensor shifted(const Tensor& x, int64_t axis, Loc loc) {
  return sub(x, stop_gradient(max(x, {axis}, loc), loc).reshape(kept(x, axis), loc), loc);
}

// x - max - log(sum e^(x - max)) along axis, its gradient formed in one of
// two ways, chosen per row. Where the row's exponentials sum to 2 or more
// (no probability above 1/2): g - p sum(g). Where they sum to less than 2,
// one element m is the maximum with p_m > 1/2, and g_m - p_m sum(g) would
// take 1 - p_m from p_m (at a saturated softmax, p_m within 1e-12 of 1,
// only 4 digits would stay). There the log of the sum is log1p(rest), rest
// the other elements' exponentials, and m's gradient is formed as
// (g_m - sum(g)) + sum(g) rest / (1 + rest), its first term summed on its
// own (through an identity): under a cross-entropy's gradient, one
// element, it is exactly 0, and the second keeps every digit. The same form
// in every row would round worse (a row of a thousand equal logits:
// -sum(g) + sum(g) 0.999). The terms sent to m are per-row values, so the
// backward is one pass over the elements after sum(g), as the plain form's.
Tensor log_softmax(const Tensor& x, int64_t axis, Loc loc) {
  axis = norm_axis(x, axis, "log_softmax", loc);
  const Shape k = kept(x, axis);
  const DType dt = x.dtype();
  Tensor zero = Tensor::scalar(0.0, dt);
  Tensor top = stop_gradient(max(x, {axis}, loc), loc).reshape(k, loc);
  Tensor s = sub(x, top, loc);
  Tensor e = exp(s, loc);
  Tensor total = sum(e, {axis}, loc).reshape(k, loc);
  Tensor saturated = lt(total, Tensor::scalar(2.0, dt), loc);
  // In a saturated row every element but m has its exponential below 1, as
  // their sum is; other rows do not read `below`.
  Tensor below = lt(e, Tensor::scalar(1.0, dt), loc);
  Tensor rest = sum(where(below, e, zero, loc), {axis}, loc).reshape(k, loc);
  Tensor lse = where(saturated, log1p(rest, loc), log(total, loc), loc);
  // v's value at m (in a saturated row), the gradient reaching it sent to m.
  auto at_top = [&](const Tensor& v) {
    return sum(where(below, zero, v, loc), {axis}, loc).reshape(k, loc);
  };
  // Value 0; a gradient G reaching it gives m G rest / (1 + rest).
  Tensor share =
      stop_gradient(where(saturated, div(rest, add(rest, 1.0, loc), loc), zero, loc), loc);
  Tensor to_top = straight_through(broadcast_to(zero, k, loc), mul(share, at_top(x), loc), loc);
  // s's value; its gradient own's, and in a saturated row -sum(g) sent to m.
  Tensor own = identity(x, loc);
  Tensor shifted = straight_through(s, sub(own, where(saturated, at_top(own), top, loc), loc), loc);
  return sub(shifted, sub(lse, to_top, loc), loc);
}

Tensor softmax(const Tensor& x, int64_t axis, Loc loc) {
  axis = norm_axis(x, axis, "softmax", loc);
  Tensor e = exp(shifted(x, axis, loc), loc);
  return div(e, sum(e, {axis}, loc).reshape(kept(x, axis), loc), loc);
}

// x's shape with each of `axes` set to 1 (checked as `what`'s).
Shape kept(const Tensor& x, const std::vector<int64_t>& axes, const char* what, Loc loc) {
  Shape k = x.shape();
  for (int64_t a : axes) k[size_t(norm_axis(x, a, what, loc))] = 1;
  return k;
}

Tensor center(const Tensor& x, const std::vector<int64_t>& axes, Loc loc) {
  Tensor read = identity(x, loc);
  return sub(read, mean(read, axes, loc).reshape(kept(x, axes, "center", loc), loc), loc);
}

Tensor var(const Tensor& x, const std::vector<int64_t>& axes, double correction, bool keepdim,
           Loc loc) {
  const Shape k = kept(x, axes, "var", loc);
  int64_t count = 1;  // the elements of each variance: the dims kept as 1
  for (size_t d = 0; d < k.size(); ++d)
    if (k[d] != x.shape()[d]) count *= x.shape()[d];
  Tensor xc = center(x, axes, loc);
  Tensor v = div(sum(mul(xc, xc, loc), axes, loc), std::max(double(count) - correction, 0.0), loc);
  return keepdim ? v.reshape(k, loc) : v;
}

Tensor gelu(const Tensor& x, bool tanh_approximation, Loc loc) {
  if (tanh_approximation) {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x·x·x))), as torch
    Tensor cube = mul(mul(x, x, loc), x, loc);
    Tensor inner = mul(add(x, mul(cube, 0.044715, loc), loc), std::sqrt(2.0 / M_PI), loc);
    return mul(mul(x, 0.5, loc), add(tanh(inner, loc), 1.0, loc), loc);
  }
  return mul(mul(x, 0.5, loc), add(erf(mul(x, M_SQRT1_2, loc), loc), 1.0, loc), loc);
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Loc loc) {
  return layer_norm(x, 1, weight, bias, eps, loc);
}

Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight,
                  const Tensor& bias, double eps, Loc loc) {
  if (normalized_dims < 1 || normalized_dims > x.dim())
    throw Error(fmt::format("layer_norm: cannot normalize the last {} dims of {}{}",
                            normalized_dims, x.str(), at(sl(loc))));
  std::vector<int64_t> axes;
  Shape k = x.shape();
  for (int64_t a = x.dim() - normalized_dims; a < x.dim(); ++a) {
    axes.push_back(a);
    k[size_t(a)] = 1;
  }
  // The gradient's paths through the mean are written per row, as for
  // batch_norm's channels (see there): x - mean reads the mean held, and the
  // normalized value's part through the mean comes through a term of value
  // (mean - mean) (-1/sqrt(var + eps)) = 0. The input's gradient then needs
  // one level of row sums (of dy w and dy w (x - mean)), not three.
  Tensor read = identity(x, loc);
  Tensor mu = mean(read, axes, loc).reshape(k, loc);
  const Tensor held = stop_gradient(mu, loc);
  Tensor xc = sub(read, held, loc);
  Tensor var = mean(mul(xc, xc, loc), axes, loc).reshape(k, loc);
  Tensor scale = rsqrt(add(var, eps, loc), loc);
  Tensor y = add(mul(xc, scale, loc), mul(sub(mu, held, loc), neg(scale, loc), loc), loc);
  if (weight.defined()) y = mul(y, weight, loc);
  if (bias.defined()) y = add(y, bias, loc);
  return y;
}

Tensor batch_norm(const Tensor& x, Tensor& running_mean, Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps, Loc loc) {
  const int64_t world = training && capture::sync_batch_statistics() ? dist::world_size() : 1;
  BatchNormResult r = batch_norm_functional(x, running_mean, running_var, weight, bias, training,
                                            momentum, eps, world, loc);
  if (r.running_mean.defined()) running_mean.copy_(r.running_mean, loc);
  if (r.running_var.defined()) running_var.copy_(r.running_var, loc);
  return r.y;
}

BatchNormResult batch_norm_functional(const Tensor& x, const Tensor& running_mean,
                                      const Tensor& running_var, const Tensor& weight,
                                      const Tensor& bias, bool training, double momentum,
                                      double eps, int64_t sync_world, Loc loc) {
  if (x.dim() < 2)
    throw Error(
        fmt::format("batch_norm: expected input [N, C, ...], got {}{}", x.str(), at(sl(loc))));
  std::vector<int64_t> axes;  // every dim but the channels'
  for (int64_t a = 0; a < x.dim(); ++a)
    if (a != 1) axes.push_back(a);
  auto channels = [&](const Tensor& v) {
    Shape s(size_t(x.dim()), 1);
    s[1] = x.size(1);
    return v.reshape(s, loc);
  };
  BatchNormResult r;
  if (!training) {
    if (!running_mean.defined() || !running_var.defined())
      throw Error(fmt::format("batch_norm: evaluation needs running statistics{}", at(sl(loc))));
    // One scale and shift per channel, as torch's CPU kernel computes it.
    Tensor scale = rsqrt(add(running_var, eps, loc), loc);
    if (weight.defined()) scale = mul(scale, weight, loc);
    Tensor shift = neg(mul(running_mean, scale, loc), loc);
    if (bias.defined()) shift = add(shift, bias, loc);
    r.y = add(mul(x, channels(scale), loc), channels(shift), loc);
    return r;
  }
  const int64_t count = x.numel() / x.size(1);
  if (count < 2)
    throw Error(
        fmt::format("batch_norm: training needs more than one value per channel, got "
                    "input {}{}",
                    x.str(), at(sl(loc))));
  // Synchronized (a data-parallel step with synchronized batch norm): the
  // statistics of the global batch, each mean averaged over the ranks'
  // equal parts.
  const bool sync = sync_world > 1;
  // The mean is summed in double, as torch's CPU batch norm sums it: a
  // channel of equal values then has exactly that mean, and x - mean is
  // exactly 0 instead of float rounding noise that 1/sqrt(var + eps)
  // magnifies a thousandfold.
  // x is read through an identity, so that its gradient is one value (see
  // center()).
  Tensor read = identity(x, loc);
  Tensor mu = cast(mean(cast(read, DType::f64, loc), axes, loc), x.dtype(), loc);
  if (sync) mu = capture::all_reduce_mean(mu, loc);
  // The gradient is torch's: every path from x through the mean is written
  // per channel. x - mean reads the mean held (no gradient through it), so
  // the variance's gradient leaves the mean out -- its part there,
  // -2/n sum(x - mean) per channel, is exactly 0 -- and the output's part,
  // -scale sum(dy) per channel, comes through the shift below, whose value
  // is (mean - mean) (-scale) = 0. The input's gradient then needs the sums of
  // dy and dy (x - mean) (one pass over the activation, shared with the
  // weight's and the bias's) and one elementwise pass, where a mean read with
  // its gradient would make it wait on a third sum, of dy scale.
  const Tensor held = stop_gradient(mu, loc);
  Tensor xc = sub(read, channels(held), loc);
  Tensor var = mean(mul(xc, xc, loc), axes, loc);
  if (sync) var = capture::all_reduce_mean(var, loc);
  if (running_mean.defined() && running_var.defined()) {
    const int64_t n = count * sync_world;  // values per channel
    r.running_mean = add(mul(running_mean, 1 - momentum, loc), mul(mu, momentum, loc), loc);
    Tensor unbiased = mul(var, double(n) / double(n - 1), loc);
    r.running_var = add(mul(running_var, 1 - momentum, loc), mul(unbiased, momentum, loc), loc);
  }
  // One scale per channel, 1/sqrt(var + eps) times the weight, as torch's
  // CPU kernel scales: the weight's and the variance's gradients share one
  // sum, of dy (x - mean).
  Tensor scale = rsqrt(add(var, eps, loc), loc);
  if (weight.defined()) scale = mul(scale, weight, loc);
  Tensor shift = mul(sub(mu, held, loc), neg(scale, loc), loc);
  if (bias.defined()) shift = add(bias, shift, loc);
  Tensor y = add(mul(xc, channels(scale), loc), channels(shift), loc);
  r.y = y;
  return r;
}

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                  double eps, Loc loc) {
  if (x.dim() < 2 || groups < 1 || x.size(1) % groups != 0)
    throw Error(
        fmt::format("group_norm: {} groups must divide the channels of input {} "
                    "[N, C, ...]{}",
                    groups, x.str(), at(sl(loc))));
  const int64_t n = x.size(0), per_group = x.numel() / std::max<int64_t>(n * groups, 1);
  Tensor y = layer_norm(x.reshape({n, groups, per_group}, loc), 1, Tensor(), Tensor(), eps, loc)
                 .reshape(x.shape(), loc);
  Shape s(size_t(x.dim()), 1);
  s[1] = x.size(1);
  if (weight.defined()) y = mul(y, weight.reshape(s, loc), loc);
  if (bias.defined()) y = add(y, bias.reshape(s, loc), loc);
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Loc loc) {
  if (!(p >= 0 && p <= 1))
    throw Error(fmt::format("dropout: p must be in [0, 1], got {}{}", p, at(sl(loc))));
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, 0.0, loc);
  // As torch: an element is kept where a uniform number is below 1 - p,
  // and scaled by 1/(1 - p) rounded to the dtype.
  Tensor keep = lt(rand_stream(x.shape(), x.dtype(), loc), Tensor::scalar(1 - p, x.dtype()), loc);
  return where(keep, mul(x, 1.0 / (1.0 - p), loc), Tensor::scalar(0, x.dtype()), loc);
}

Tensor causal_mask(const Tensor& scores, Loc loc) {
  if (scores.dim() < 2)
    throw Error(fmt::format("causal_mask: scores must be [..., T, S], got {}{}", scores.str(),
                            at(sl(loc))));
  const Shape ts{scores.size(-2), scores.size(-1)};
  Tensor allowed = ge(iota(ts, 0, DType::i64, loc), iota(ts, 1, DType::i64, loc), loc);
  return where(allowed, scores,
               Tensor::scalar(-std::numeric_limits<double>::infinity(), scores.dtype()), loc);
}

// ---------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, Conv2dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), opts(o) {
  if (in <= 0 || out <= 0 || k <= 0 || o.stride <= 0 || o.padding < 0 || o.dilation <= 0 ||
      o.groups <= 0 || in % o.groups != 0 || out % o.groups != 0)
    throw Error(fmt::format(
        "Conv2d({}, {}, {}): channels and kernel must be positive, stride {} and dilation {} "
        ">= 1, padding {} >= 0, and groups {} must divide both channel counts",
        in, out, k, o.stride, o.dilation, o.padding, o.groups));
  const double bound = 1.0 / std::sqrt(double(in / o.groups * k * k));
  weight = register_parameter("weight", rand_uniform({out, in / o.groups, k, k}, -bound, bound));
  if (o.bias) bias = register_parameter("bias", rand_uniform({out}, -bound, bound));
}

Tensor Conv2d::forward(const Tensor& x, Loc loc) {
  if (x.dim() != 4 || x.size(1) != in_channels)
    throw Error(fmt::format("Conv2d({}, {}, {}): expected input [N, {}, H, W], got {}{}",
                            in_channels, out_channels, kernel_size, in_channels, x.str(),
                            at(sl(loc))));
  ws::Conv2dOptions o;
  o.stride = {opts.stride, opts.stride};
  o.padding = {opts.padding, opts.padding};
  o.dilation = {opts.dilation, opts.dilation};
  o.groups = opts.groups;
  Tensor y = conv2d(x, weight, o, loc);
  return bias.defined() ? add(y, per_channel(bias, loc), loc) : y;
}

BatchNorm2d::BatchNorm2d(int64_t c, double eps, double momentum)
    : channels(c), eps(eps), momentum(momentum) {
  if (c <= 0) throw Error(fmt::format("BatchNorm2d({}): channels must be positive", c));
  weight = register_parameter("weight", Tensor::full({c}, 1.0));
  bias = register_parameter("bias", Tensor::zeros({c}));
  running_mean = register_buffer("running_mean", Tensor::zeros({c}));
  running_var = register_buffer("running_var", Tensor::full({c}, 1.0));
}

Tensor BatchNorm2d::forward(const Tensor& x, Loc loc) {
  if (x.dim() != 4 || x.size(1) != channels)
    throw Error(fmt::format("BatchNorm2d({}): expected input [N, {}, H, W], got {}{}", channels,
                            channels, x.str(), at(sl(loc))));
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum, eps, loc);
}

LayerNorm::LayerNorm(int64_t f, double eps) : features(f), eps(eps) {
  if (f <= 0) throw Error(fmt::format("LayerNorm({}): features must be positive", f));
  weight = register_parameter("weight", Tensor::full({f}, 1.0));
  bias = register_parameter("bias", Tensor::zeros({f}));
}

Tensor LayerNorm::forward(const Tensor& x, Loc loc) {
  if (x.dim() < 1 || x.size(-1) != features)
    throw Error(fmt::format("LayerNorm({}): the input's last dim must be {}, got {}{}", features,
                            features, x.str(), at(sl(loc))));
  return layer_norm(x, weight, bias, eps, loc);
}

Embedding::Embedding(int64_t n, int64_t d) : num_embeddings(n), embedding_dim(d) {
  if (n <= 0 || d <= 0) throw Error(fmt::format("Embedding({}, {}): sizes must be positive", n, d));
  weight = register_parameter("weight", randn({n, d}));
}

Tensor Embedding::forward(const Tensor& indices, Loc loc) {
  if (indices.dtype() != DType::i64)
    throw Error(fmt::format("Embedding({}, {}): indices must be i64, got {}{}", num_embeddings,
                            embedding_dim, indices.str(), at(sl(loc))));
  return gather(weight, indices, loc);
}

Dropout::Dropout(double p) : p(p) {
  if (!(p >= 0 && p <= 1)) throw Error(fmt::format("Dropout({}): p must be in [0, 1]", p));
}

Tensor Dropout::forward(const Tensor& x, Loc loc) { return dropout(x, p, is_training(), loc); }
Tensor GELU::forward(const Tensor& x, Loc loc) { return gelu(x, tanh_approximation, loc); }
Tensor ReLU::forward(const Tensor& x, Loc loc) { return relu(x, loc); }

Tensor GlobalAvgPool2d::forward(const Tensor& x, Loc loc) {
  if (x.dim() != 4)
    throw Error(fmt::format("GlobalAvgPool2d: expected input [N, C, H, W], got {}{}", x.str(),
                            at(sl(loc))));
  return mean(x, {2, 3}, loc);
}

Sequential& Sequential::add(std::shared_ptr<Layer> layer) {
  if (!layer) throw Error("Sequential::add: the layer is null");
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
  return *this;
}

Tensor Sequential::forward(const Tensor& x, Loc loc) {
  Tensor h = x;
  for (auto& l : layers_) h = l->forward(h, loc);
  return h;
}

CausalSelfAttention::CausalSelfAttention(int64_t d, int64_t h, double p)
    : qkv(d, 3 * d), proj(d, d), attn_dropout(p), d_model(d), heads(h) {
  if (h <= 0 || d % h != 0)
    throw Error(fmt::format(
        "CausalSelfAttention({}, {}): the model width must be a multiple of the heads", d, h));
  register_module("qkv", qkv);
  register_module("proj", proj);
  register_module("attn_dropout", attn_dropout);
}

Tensor CausalSelfAttention::forward(const Tensor& x, Loc loc) {
  if (x.dim() != 3 || x.size(2) != d_model)
    throw Error(fmt::format("CausalSelfAttention({}, {}): expected input [B, T, {}], got {}{}",
                            d_model, heads, d_model, x.str(), at(sl(loc))));
  const int64_t B = x.size(0), T = x.size(1), hd = d_model / heads;
  Tensor qkv_out = qkv(x, loc);
  auto head_view = [&](int64_t i) {  // [B, T, D] slice -> [B, H, T, hd]
    Tensor part = slice(qkv_out, 2, i * d_model, (i + 1) * d_model, loc);
    return transpose(part.reshape({B, T, heads, hd}, loc), {0, 2, 1, 3}, loc);
  };
  Tensor q = head_view(0), k = head_view(1), v = head_view(2);
  Tensor att = mul(matmul(q, k, false, true, loc), 1.0 / std::sqrt(double(hd)), loc);
  att = attn_dropout(softmax(causal_mask(att, loc), -1, loc), loc);
  Tensor y = transpose(matmul(att, v, false, false, loc), {0, 2, 1, 3}, loc);
  return proj(y.reshape({B, T, d_model}, loc), loc);
}

}  // namespace ws::nn
