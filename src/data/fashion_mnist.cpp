// Fashion-MNIST: 28x28 grey images of clothing in 10 classes, stored as IDX
// files (the Debian package dataset-fashion-mnist installs them).
#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wholestep/data.hpp"
#include "wholestep/error.hpp"

namespace ws::data {
namespace {

constexpr int64_t kSide = 28;
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

// A uniform integer in [0, n) from raw 64-bit outputs, without bias: draws
// below 2^64 mod n are rejected, leaving a range that is a multiple of n.
// Unlike std::uniform_int_distribution this is the same on every standard
// library, since std::mt19937_64 itself is fully specified.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  uint64_t reject_below = (0 - n) % n;  // 2^64 mod n
  uint64_t x = rng();
  while (x < reject_below) x = rng();
  return x % n;
}

}  // namespace

FashionMnist::FashionMnist(const std::string& split, const std::string& dir) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    throw Error(fmt::format(
        "FashionMnist: unknown split \"{}\"; valid splits are \"train\" and \"test\"", split));
  }
  std::filesystem::path base(dir);
  std::string images_path = (base / (prefix + "-images-idx3-ubyte.gz")).string();
  std::string labels_path = (base / (prefix + "-labels-idx1-ubyte.gz")).string();

  // The Debian package is named only where it installs the files.
  const std::string package = dir == kFashionMnistDir ? kFashionMnistPackage : "";
  IdxArray images = read_idx(images_path, package);
  IdxArray labels = read_idx(labels_path, package);

  if (images.dims.size() != 3 || images.dims[1] != kSide || images.dims[2] != kSide) {
    throw Error(fmt::format("FashionMnist: {}: images have shape {}; expected [N,{},{}]",
                            images_path, shape_str(images.dims), kSide, kSide));
  }
  if (labels.dims.size() != 1) {
    throw Error(fmt::format("FashionMnist: {}: labels have shape {}; expected [N]", labels_path,
                            shape_str(labels.dims)));
  }
  if (images.dims[0] != labels.dims[0]) {
    throw Error(fmt::format(
        "FashionMnist: {} images in {} (shape {}) but {} labels in {} (shape {}); the counts "
        "must match",
        images.dims[0], images_path, shape_str(images.dims), labels.dims[0], labels_path,
        shape_str(labels.dims)));
  }

  d_->labels.reserve(labels.values.size());
  for (size_t i = 0; i < labels.values.size(); ++i) {
    uint8_t v = labels.values[i];
    if (v >= kClasses) {
      throw Error(fmt::format("FashionMnist: {}: label {} at index {} is out of range [0, {})",
                              labels_path, v, i, kClasses));
    }
    d_->labels.push_back(v);
  }

  std::array<float, 256> table;
  for (int p = 0; p < 256; ++p) table[p] = (float(p) / 255.0f - kMean) / kStd;
  d_->images.resize(images.values.size());
  for (size_t i = 0; i < images.values.size(); ++i) d_->images[i] = table[images.values[i]];
}

Batch FashionMnist::batch(std::span<const int64_t> indices) const {
  int64_t n = size();
  int64_t b = int64_t(indices.size());
  std::vector<float> images(size_t(b * kPixels));
  std::vector<int64_t> labels(static_cast<size_t>(b));
  for (int64_t k = 0; k < b; ++k) {
    int64_t i = indices[k];
    if (i < 0 || i >= n) {
      throw Error(fmt::format(
          "FashionMnist::batch: index {} (at position {}) is out of range for a data set of {} "
          "examples",
          i, k, n));
    }
    std::copy_n(d_->images.begin() + i * kPixels, kPixels, images.begin() + k * kPixels);
    labels[k] = d_->labels[i];
  }
  return Batch{Tensor::from_vector(images, {b, kPixels}), Tensor::from_vector(labels, {b})};
}

std::vector<std::vector<int64_t>> FashionMnist::epoch_indices(int64_t batch_size,
                                                              uint64_t shuffle_seed,
                                                              bool drop_last) const {
  if (batch_size <= 0) {
    throw Error(fmt::format("FashionMnist::epoch_indices: batch_size must be positive, got {}",
                            batch_size));
  }
  int64_t n = size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Fisher-Yates, back to front.
  std::mt19937_64 rng(shuffle_seed);
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = int64_t(uniform_below(rng, uint64_t(i) + 1));
    std::swap(order[i], order[j]);
  }

  std::vector<std::vector<int64_t>> out;
  for (int64_t start = 0, len = 0; start < n; start += len) {
    len = std::min(batch_size, n - start);  // never overflows, unlike start + batch_size
    if (len < batch_size && drop_last) break;
    out.emplace_back(order.begin() + start, order.begin() + start + len);
  }
  return out;
}

}  // namespace ws::data
