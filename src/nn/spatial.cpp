// Positions along a dim, padding and resizing, as torch's F.pad and
// F.interpolate.
// Positions: one gather with a constant index (its gradient sums into the
// positions read): flips, slices with steps, im2col.
// Padding: a pad list of (before, after) pairs, the last dim's first.
// Constant padding joins fills to the input (a negative pad crops);
// reflection, replication and circular padding read the input at constant
// positions along each padded dim (one gather, whose gradient sums into the
// positions read, as torch's backward does). Resizing: nearest reads
// positions (a gather), linear and cubic interpolation is one product with
// a constant [out, in] matrix per spatial dim (torch's weights, clamped taps
// summed), so each output is the same sum of the same terms as torch's.
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wholestep/nn.hpp"

namespace ws::nn {
namespace {

Tensor transposed(const Tensor& x, const std::vector<int64_t>& perm, Loc loc) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i)) return transpose(x, perm, loc);
  return x;
}

// torch's area_pixel_compute_scale: source positions per output position.
double source_scale(int64_t n_in, int64_t n_out, bool align_corners, double scale) {
  if (align_corners) return n_out > 1 ? double(n_in - 1) / double(n_out - 1) : 0.0;
  return scale > 0 ? 1.0 / scale : double(n_in) / double(n_out);
}

// The [n_out, n_in] matrix of torch's linear or cubic (A = -0.75)
// interpolation along one dim, taps beyond the edge clamped to it.
std::vector<double> interpolation(int64_t n_in, int64_t n_out, ResizeMode mode, bool align_corners,
                                  double scale) {
  const double r = source_scale(n_in, n_out, align_corners, scale);
  std::vector<double> m(size_t(n_out * n_in), 0.0);
  auto row = [&](int64_t o, int64_t i) -> double& { return m[size_t(o * n_in + i)]; };
  for (int64_t o = 0; o < n_out; ++o) {
    double src = align_corners ? double(o) * r : (double(o) + 0.5) * r - 0.5;
    if (mode == ResizeMode::linear) {
      src = std::max(src, 0.0);
      const int64_t i0 = std::min(int64_t(std::floor(src)), n_in - 1);
      const int64_t i1 = std::min(i0 + 1, n_in - 1);
      const double l1 = src - double(i0);
      row(o, i0) += 1.0 - l1;
      row(o, i1) += l1;
      continue;
    }
    const double i = std::floor(src), t = src - i, a = -0.75;
    const double w[4] = {((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                         ((a + 2) * t - (a + 3)) * t * t + 1,
                         ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                         ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a};
    for (int64_t k = 0; k < 4; ++k)
      row(o, std::min(std::max(int64_t(i) - 1 + k, int64_t(0)), n_in - 1)) += w[k];
  }
  return m;
}

const char* mode_name(PadMode m) {
  switch (m) {
    case PadMode::constant: return "constant";
    case PadMode::reflect: return "reflect";
    case PadMode::replicate: return "replicate";
    case PadMode::circular: return "circular";
  }
  return "?";
}

}  // namespace

Tensor take(const Tensor& x, int64_t dim, const std::vector<int64_t>& index, Loc loc) {
  const int64_t rank = x.dim(), d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank)
    throw Error(
        fmt::format("take: dim {} is not a dim of {}{}", dim, x.str(), at(SourceLoc::from(loc))));
  for (int64_t i : index)
    if (i < 0 || i >= x.size(d))
      throw Error(fmt::format("take: position {} is outside dim {} of {} (size {}){}", i, d,
                              x.str(), x.size(d), at(SourceLoc::from(loc))));
  bool same = int64_t(index.size()) == x.size(d);
  for (size_t i = 0; same && i < index.size(); ++i) same = index[i] == int64_t(i);
  if (same) return x;
  std::vector<int64_t> perm{d}, back(static_cast<size_t>(rank));
  for (int64_t k = 0; k < rank; ++k)
    if (k != d) perm.push_back(k);
  for (size_t i = 0; i < perm.size(); ++i) back[size_t(perm[i])] = int64_t(i);
  Tensor positions = Tensor::from_vector(index, {int64_t(index.size())});
  return transposed(gather(transposed(x, perm, loc), positions, loc), back, loc);
}

PadMode pad_mode(const std::string& name, Loc loc) {
  for (PadMode m : {PadMode::constant, PadMode::reflect, PadMode::replicate, PadMode::circular})
    if (name == mode_name(m)) return m;
  throw Error(fmt::format("pad: mode '{}' is not constant, reflect, replicate or circular{}", name,
                          at(SourceLoc::from(loc))));
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value, Loc loc) {
  const int64_t rank = x.dim();
  if (pads.size() % 2 != 0 || int64_t(pads.size()) / 2 > rank)
    throw Error(fmt::format("pad: {} is not (before, after) pairs for at most the {} dims of {}{}",
                            pads, rank, x.str(), at(SourceLoc::from(loc))));
  Tensor y = x;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const int64_t dim = rank - 1 - int64_t(i), lo = pads[2 * i], hi = pads[2 * i + 1];
    const int64_t n = y.size(dim);
    if (mode == PadMode::constant) {
      const int64_t first = std::max<int64_t>(0, -lo), end = n - std::max<int64_t>(0, -hi);
      if (end <= first)
        throw Error(fmt::format("pad: {} crops all {} elements of dim {} of {}{}", pads, n, dim,
                                x.str(), at(SourceLoc::from(loc))));
      std::vector<int64_t> kept;
      for (int64_t j = first; j < end; ++j) kept.push_back(j);
      std::vector<Tensor> parts;
      auto fill = [&](int64_t size) {
        if (size <= 0) return;
        Shape s = y.shape();
        s[size_t(dim)] = size;
        parts.push_back(broadcast_to(Tensor::scalar(value, y.dtype()), s, loc));
      };
      Tensor middle = take(y, dim, kept, loc);
      fill(lo);
      parts.push_back(middle);
      fill(hi);
      y = parts.size() > 1 ? concat(parts, dim, loc) : middle;
      continue;
    }
    // torch's limits: a reflection stays inside the dim, a circular pad
    // wraps at most once.
    const int64_t limit = mode == PadMode::reflect ? n - 1 : mode == PadMode::circular ? n : -1;
    if (limit >= 0 && (lo > limit || hi > limit))
      throw Error(fmt::format("pad: {} padding ({}, {}) of dim {} of {}: each must be at most {}{}",
                              mode_name(mode), lo, hi, dim, x.str(), limit,
                              at(SourceLoc::from(loc))));
    if (n == 0 && lo + hi > 0)
      throw Error(fmt::format("pad: {} padding of the empty dim {} of {}{}", mode_name(mode), dim,
                              x.str(), at(SourceLoc::from(loc))));
    std::vector<int64_t> index;
    for (int64_t j = -lo; j < n + hi; ++j) {
      if (mode == PadMode::reflect) {
        const int64_t a = j < 0 ? -j : j;
        index.push_back(a > n - 1 ? 2 * (n - 1) - a : a);
      } else if (mode == PadMode::replicate) {
        index.push_back(std::min(std::max<int64_t>(j, 0), n - 1));
      } else {
        index.push_back(((j % n) + n) % n);
      }
    }
    y = take(y, dim, index, loc);
  }
  return y;
}

ResizeMode resize_mode(const std::string& name, Loc loc) {
  if (name == "nearest") return ResizeMode::nearest;
  if (name == "nearest_exact") return ResizeMode::nearest_exact;
  if (name == "linear") return ResizeMode::linear;
  if (name == "cubic") return ResizeMode::cubic;
  throw Error(fmt::format("interpolate: mode '{}' is not nearest, nearest_exact, linear or cubic{}",
                          name, at(SourceLoc::from(loc))));
}

Tensor interpolate(const Tensor& x, const std::vector<int64_t>& sizes, ResizeMode mode,
                   bool align_corners, const std::vector<double>& scales, Loc loc) {
  const int64_t rank = x.dim(), spatial = rank - 2;
  if (rank < 3 || int64_t(sizes.size()) != spatial ||
      (!scales.empty() && int64_t(scales.size()) != spatial))
    throw Error(fmt::format(
        "interpolate: input {} [N, C, spatial...] needs one size (and one scale, if any) per "
        "spatial dim, got sizes {} and scales {}{}",
        x.str(), sizes, scales, at(SourceLoc::from(loc))));
  const bool nearest = mode == ResizeMode::nearest || mode == ResizeMode::nearest_exact;
  if (align_corners && nearest)
    throw Error(
        fmt::format("interpolate: align_corners applies to linear and cubic resizing, "
                    "not nearest{}",
                    at(SourceLoc::from(loc))));
  Tensor y = x;
  for (int64_t axis = 2; axis < rank; ++axis) {
    const int64_t n_in = y.size(axis), n_out = sizes[size_t(axis - 2)];
    const double scale = scales.empty() ? 0.0 : scales[size_t(axis - 2)];
    if (n_out < 1 || n_in < 1)
      throw Error(fmt::format("interpolate: dim {} of {} to size {}: both must be positive{}", axis,
                              x.str(), n_out, at(SourceLoc::from(loc))));
    if (nearest) {  // torch's index in float: floor(o * scale), exact: floor((o + 0.5) scale)
      const float r = float(scale > 0 ? 1.0 / scale : double(n_in) / double(n_out));
      const float shift = mode == ResizeMode::nearest_exact ? 0.5f : 0.0f;
      std::vector<int64_t> index;
      for (int64_t o = 0; o < n_out; ++o)
        index.push_back(std::min(int64_t(std::floor((float(o) + shift) * r)), n_in - 1));
      y = take(y, axis, index, loc);
      continue;
    }
    if (n_in == n_out && !align_corners && !(scale > 0)) continue;
    const std::vector<double> w = interpolation(n_in, n_out, mode, align_corners, scale);
    Tensor mat = y.dtype() == DType::f64
                     ? Tensor::from_vector(w, {n_out, n_in})
                     : Tensor::from_vector(std::vector<float>(w.begin(), w.end()), {n_out, n_in});
    // The dim last, a product with the matrix transposed, the dim back.
    std::vector<int64_t> perm, back(static_cast<size_t>(rank), 0);
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis) perm.push_back(d);
    perm.push_back(axis);
    for (size_t i = 0; i < perm.size(); ++i) back[size_t(perm[i])] = int64_t(i);
    Tensor moved = transposed(y, perm, loc);
    Shape lead = moved.shape();
    lead.pop_back();
    const int64_t rows = moved.numel() / n_in;
    Shape out = lead;
    out.push_back(n_out);
    Tensor z = matmul(moved.reshape({rows, n_in}, loc), mat, false, true, loc).reshape(out, loc);
    y = transposed(z, back, loc);
  }
  return y;
}

}  // namespace ws::nn
