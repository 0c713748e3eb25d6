// Pooling as torch's MaxPool2d and AvgPool2d, on the IR's max_pool2d and
// avg_pool2d (floor mode, symmetric padding): ceil_mode's extra window
// reads rows and columns appended to the input, -inf for max; average
// pooling whose divisor the IR op cannot express (ceil_mode's clipped last
// window, divisor_override) sums each window by a depthwise convolution
// with ones and divides by the divisor of each window. Dilated max pooling
// gathers each window position's elements and keeps the maximum as torch's
// kernel scans a window.
#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wholestep/nn.hpp"

namespace ws::nn {
namespace {

// One value for both dims, or two.
std::vector<int64_t> pair(const std::vector<int64_t>& v, const char* what, const Tensor& x,
                          const Loc& loc) {
  if (v.size() == 1) return {v[0], v[0]};
  if (v.size() == 2) return v;
  throw Error(fmt::format("pooling: {} must be one value or two, got [{}] for input {}{}", what,
                          fmt::join(v, ","), x.str(), at(SourceLoc::from(loc))));
}

struct Axis {
  int64_t n, k, s, p, d;
  int64_t out = 0, extra = 0;  // windows; elements appended for ceil_mode
};

// torch's output size: floor or ceil of (n + 2p - d (k - 1) - 1) / s, plus
// one, the last window starting inside the input or its left padding.
Axis axis_geometry(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  Axis a{n, k, s, p, d};
  const int64_t reach = d * (k - 1) + 1, span = n + 2 * p - reach;
  a.out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (a.out - 1) * s >= n + p) --a.out;
  a.extra = std::max<int64_t>(0, (a.out - 1) * s + reach - (n + 2 * p));
  return a;
}

struct Geometry {
  Axis h, w;
};

Geometry geometry(const Tensor& x, const Pool2dOptions& o, const char* what, const Loc& loc) {
  if (x.dim() != 4)
    throw Error(fmt::format("{}: expected input [N, C, H, W], got {}{}", what, x.str(),
                            at(SourceLoc::from(loc))));
  const auto k = pair(o.kernel, "kernel", x, loc);
  const auto s = o.stride.empty() ? k : pair(o.stride, "stride", x, loc);
  const auto p = pair(o.padding, "padding", x, loc);
  const auto d = pair(o.dilation, "dilation", x, loc);
  for (int i = 0; i < 2; ++i)
    if (k[i] < 1 || s[i] < 1 || p[i] < 0 || d[i] < 1 || 2 * p[i] > k[i] ||
        x.size(2 + i) + 2 * p[i] < d[i] * (k[i] - 1) + 1)
      throw Error(
          fmt::format("{}: kernel [{}], stride [{}], padding [{}] and dilation [{}] do not fit "
                      "input {} (padding at most half the kernel){}",
                      what, fmt::join(k, ","), fmt::join(s, ","), fmt::join(p, ","),
                      fmt::join(d, ","), x.str(), at(SourceLoc::from(loc))));
  Geometry g{axis_geometry(x.size(2), k[0], s[0], p[0], d[0], o.ceil_mode),
             axis_geometry(x.size(3), k[1], s[1], p[1], d[1], o.ceil_mode)};
  // With dilation a window can step over the whole input: torch's pooling
  // then reads no element (its indices point past the input, and its
  // backward writes there), so such a window is refused.
  for (int i = 0; i < 2; ++i) {
    const Axis& a = i == 0 ? g.h : g.w;
    for (int64_t w = 0; w < a.out; ++w) {
      bool reads = false;
      for (int64_t t = 0; t < a.k && !reads; ++t) {
        const int64_t at = w * a.s - a.p + t * a.d;
        reads = at >= 0 && at < a.n;
      }
      if (!reads)
        throw Error(fmt::format(
            "{}: window {} along dim {} of input {} reads only padding (kernel [{}], stride "
            "[{}], padding [{}], dilation [{}]): torch's pooling is undefined there{}",
            what, w, 2 + i, x.str(), fmt::join(k, ","), fmt::join(s, ","), fmt::join(p, ","),
            fmt::join(d, ","), at(SourceLoc::from(loc))));
    }
  }
  return g;
}

// x with `extra` elements of `value` appended to dim `axis`.
Tensor extend(const Tensor& x, int64_t axis, int64_t extra, double value, const Loc& loc) {
  if (extra == 0) return x;
  Shape s = x.shape();
  s[size_t(axis)] = extra;
  return concat({x, broadcast_to(Tensor::scalar(value, x.dtype()), s, loc)}, axis, loc);
}

// Along one axis, the padded input's position each window's tap `t` reads,
// and whether that position is in the input.
std::vector<int64_t> tap_positions(const Axis& a, int64_t t) {
  std::vector<int64_t> at;
  for (int64_t w = 0; w < a.out; ++w) at.push_back(w * a.s + t * a.d);
  return at;
}
bool in_input(const Axis& a, int64_t padded_position) {
  return padded_position >= a.p && padded_position < a.p + a.n;
}

// Max pooling by scanning the windows' taps (with dilation, or where the
// indices are asked for): each tap of the windows (one element of each)
// gathered from x padded with -inf, and kept as torch's kernel scans a
// window, in order: a tap in the input replaces the maximum so far where
// it is larger or NaN, or where no tap in the input came before; a tap in
// the padding never. So the value and the element the gradient goes to
// are torch's: the first maximum, the last NaN, the window's first element
// in the input when all are -inf.
std::pair<Tensor, Tensor> scanned_max_pool2d(const Tensor& x, const Geometry& g, Loc loc) {
  const double inf = std::numeric_limits<double>::infinity();
  const Axis &h = g.h, &w = g.w;
  Tensor in = pad(x, {w.p, w.p + w.extra, h.p, h.p + h.extra}, PadMode::constant, -inf, loc);
  Tensor best, index;  // index: the kept element's position in its [H, W] plane
  // Per window, whether a tap in the input has been kept yet.
  std::vector<bool> kept(size_t(h.out * w.out), false);
  const auto mask = [&](const std::vector<double>& m) {
    return gt(Tensor::from_vector(m, {h.out, w.out}), Tensor::scalar(0.5, DType::f64), loc);
  };
  for (int64_t i = 0; i < h.k; ++i) {
    const std::vector<int64_t> rows = tap_positions(h, i);
    Tensor tap_rows = take(in, 2, rows, loc);
    for (int64_t j = 0; j < w.k; ++j) {
      const std::vector<int64_t> cols = tap_positions(w, j);
      Tensor tap = take(tap_rows, 3, cols, loc);
      // always: in the input, none kept before; compare: in the input after one
      std::vector<double> always, compare;
      std::vector<int64_t> position;
      for (int64_t r = 0; r < h.out; ++r)
        for (int64_t c = 0; c < w.out; ++c) {
          const bool inside = in_input(h, rows[size_t(r)]) && in_input(w, cols[size_t(c)]);
          const size_t at = size_t(r * w.out + c);
          always.push_back(inside && !kept[at]);
          compare.push_back(inside && kept[at]);
          kept[at] = kept[at] || inside;
          position.push_back((rows[size_t(r)] - h.p) * w.n + cols[size_t(c)] - w.p);
        }
      Tensor here = Tensor::from_vector(position, {h.out, w.out});
      if (!best.defined()) {
        best = tap;
        index = broadcast_to(here, tap.shape(), loc);
        continue;
      }
      Tensor nan = ne(tap, tap, loc), first = mask(always), later = mask(compare);
      Tensor wins = where(nan, nan, gt(tap, best, loc), loc);
      Tensor replaces = where(first, first, where(later, wins, later, loc), loc);
      best = where(replaces, tap, best, loc);
      index = where(replaces, here, index, loc);
    }
  }
  return {best, index};
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o, Loc loc) {
  const Geometry g = geometry(x, o, "max_pool2d", loc);
  if (g.h.d != 1 || g.w.d != 1) return scanned_max_pool2d(x, g, loc).first;
  const double inf = std::numeric_limits<double>::infinity();
  Tensor in = extend(extend(x, 2, g.h.extra, -inf, loc), 3, g.w.extra, -inf, loc);
  return ws::max_pool2d(in, {g.h.k, g.w.k}, {g.h.s, g.w.s}, {g.h.p, g.w.p}, loc);
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& o,
                                                  Loc loc) {
  return scanned_max_pool2d(x, geometry(x, o, "max_pool2d", loc), loc);
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o, Loc loc) {
  if (o.dilation != std::vector<int64_t>{1} && o.dilation != std::vector<int64_t>{1, 1})
    throw Error(fmt::format("avg_pool2d: dilation [{}] is not supported (only 1){}",
                            fmt::join(o.dilation, ","), at(SourceLoc::from(loc))));
  const Geometry g = geometry(x, o, "avg_pool2d", loc);
  if (o.divisor_override < 0)
    throw Error(fmt::format("avg_pool2d: divisor_override {} must be positive{}",
                            o.divisor_override, at(SourceLoc::from(loc))));
  if (g.h.extra == 0 && g.w.extra == 0 && o.divisor_override == 0)
    return ws::avg_pool2d(x, {g.h.k, g.w.k}, {g.h.s, g.w.s}, {g.h.p, g.w.p}, o.count_include_pad,
                          loc);
  // Each window's sum (a depthwise convolution with ones over the input
  // extended by zeros), divided by the window's divisor as torch counts it.
  const int64_t c = x.size(1);
  Tensor in = extend(extend(x, 2, g.h.extra, 0, loc), 3, g.w.extra, 0, loc);
  Tensor ones = broadcast_to(Tensor::scalar(1, x.dtype()), {c, 1, g.h.k, g.w.k}, loc);
  ws::Conv2dOptions co;
  co.stride = {g.h.s, g.w.s};
  co.padding = {g.h.p, g.w.p};
  co.groups = c;
  Tensor sums = conv2d(in, ones, co, loc);
  std::vector<double> divisor;
  for (int64_t i = 0; i < g.h.out; ++i)
    for (int64_t j = 0; j < g.w.out; ++j) {
      if (o.divisor_override) {
        divisor.push_back(double(o.divisor_override));
        continue;
      }
      const auto size = [&](const Axis& a, int64_t at) {
        int64_t lo = at * a.s - a.p, hi = std::min(lo + a.k, a.n + a.p);
        if (!o.count_include_pad) lo = std::max<int64_t>(lo, 0), hi = std::min(hi, a.n);
        return hi - lo;
      };
      divisor.push_back(double(size(g.h, i) * size(g.w, j)));
    }
  Tensor div_map = Tensor::from_vector(divisor, {g.h.out, g.w.out});
  return div(sums, cast(div_map, x.dtype(), loc), loc);
}

}  // namespace ws::nn
