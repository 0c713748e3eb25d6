// ws::data::FashionMnist on tiny synthetic data sets written to a scratch
// directory, plus one test on the real data set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "data/idx_files.hpp"
#include "wholestep/data.hpp"
#include "wholestep/error.hpp"

namespace ws::data {
namespace {

using test_util::contains_all;
using test_util::error_message;
using test_util::idx_bytes;
using test_util::ScratchDir;
using test_util::write_gzip;

constexpr int kPix = 28 * 28;

uint8_t pixel(int64_t image, int64_t k) { return uint8_t((image * 31 + k * 7) % 256); }
uint8_t label(int64_t image) { return uint8_t((image * 3 + 1) % 10); }
float normalized(uint8_t p) { return (float(p) / 255.0f - 0.2860f) / 0.3530f; }

// Writes `prefix`-images/labels files for `n` synthetic examples into `dir`.
void write_split(const ScratchDir& dir, const std::string& prefix, uint32_t n) {
  std::vector<uint8_t> images(size_t(n) * kPix), labels(n);
  for (uint32_t i = 0; i < n; ++i) {
    for (int k = 0; k < kPix; ++k) images[size_t(i) * kPix + k] = pixel(i, k);
    labels[i] = label(i);
  }
  write_gzip(dir.file(prefix + "-images-idx3-ubyte.gz"), idx_bytes({n, 28, 28}, images));
  write_gzip(dir.file(prefix + "-labels-idx1-ubyte.gz"), idx_bytes({n}, labels));
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST(FashionMnist, LoadsSyntheticTrainSplit) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  FashionMnist ds("train", dir.str());
  EXPECT_EQ(ds.size(), 5);
}

TEST(FashionMnist, TestSplitReadsT10kFiles) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  write_split(dir, "t10k", 3);
  EXPECT_EQ(FashionMnist("test", dir.str()).size(), 3);
  EXPECT_EQ(FashionMnist("train", dir.str()).size(), 5);
}

TEST(FashionMnist, UnknownSplitNamesValidSplits) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  std::string msg = error_message([&] { FashionMnist("validation", dir.str()); });
  EXPECT_TRUE(contains_all(msg, {"\"validation\"", "\"train\"", "\"test\""}));
}

TEST(FashionMnist, BatchHasShapesTypesAndNormalizedValues) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  FashionMnist ds("train", dir.str());
  std::vector<int64_t> idx = {3, 0, 4};
  Batch b = ds.batch(idx);
  EXPECT_EQ(b.images.shape(), (Shape{3, kPix}));
  EXPECT_EQ(b.images.dtype(), DType::f32);
  EXPECT_EQ(b.labels.shape(), (Shape{3}));
  EXPECT_EQ(b.labels.dtype(), DType::i64);
  std::vector<double> images = b.images.to_vector();
  std::vector<double> labels = b.labels.to_vector();
  ASSERT_EQ(images.size(), size_t(3 * kPix));
  ASSERT_EQ(labels.size(), 3u);
  for (size_t r = 0; r < idx.size(); ++r) {
    EXPECT_EQ(labels[r], label(idx[r])) << "row " << r;
    for (int k = 0; k < kPix; ++k) {
      ASSERT_EQ(float(images[r * kPix + k]), normalized(pixel(idx[r], k)))
          << "row " << r << " pixel " << k;
    }
  }
}

TEST(FashionMnist, NormalizationMapsBlackAndWhite) {
  // 0 -> -mean/std, 255 -> (1-mean)/std.
  EXPECT_NEAR(normalized(0), -0.2860 / 0.3530, 1e-6);
  EXPECT_NEAR(normalized(255), (1 - 0.2860) / 0.3530, 1e-6);
  ScratchDir dir;
  std::vector<uint8_t> images(2 * kPix, 0);
  std::fill(images.begin() + kPix, images.end(), 255);
  write_gzip(dir.file("train-images-idx3-ubyte.gz"), idx_bytes({2, 28, 28}, images));
  write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({2}, {0, 9}));
  FashionMnist ds("train", dir.str());
  std::vector<int64_t> idx = {0, 1};
  std::vector<double> v = ds.batch(idx).images.to_vector();
  EXPECT_NEAR(v[0], -0.2860 / 0.3530, 1e-6);
  EXPECT_NEAR(v[kPix], (1 - 0.2860) / 0.3530, 1e-6);
}

TEST(FashionMnist, EmptyBatchHasZeroRows) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  FashionMnist ds("train", dir.str());
  Batch b = ds.batch({});
  EXPECT_EQ(b.images.shape(), (Shape{0, kPix}));
  EXPECT_EQ(b.labels.shape(), (Shape{0}));
}

TEST(FashionMnist, BatchIndexOutOfRangeNamesIndexAndSize) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  FashionMnist ds("train", dir.str());
  std::vector<int64_t> high = {0, 5};
  EXPECT_TRUE(contains_all(error_message([&] { ds.batch(high); }),
                           {"index 5", "position 1", "5 examples"}));
  std::vector<int64_t> negative = {-1};
  EXPECT_TRUE(contains_all(error_message([&] { ds.batch(negative); }), {"index -1", "5 examples"}));
}

TEST(FashionMnist, SameSeedGivesSameOrder) {
  ScratchDir dir;
  write_split(dir, "train", 100);
  FashionMnist ds("train", dir.str());
  EXPECT_EQ(ds.epoch_indices(8, 42), ds.epoch_indices(8, 42));
  // The batch size only cuts the order; it does not change it.
  EXPECT_EQ(flatten(ds.epoch_indices(8, 42)), flatten(ds.epoch_indices(7, 42)));
}

TEST(FashionMnist, DifferentSeedGivesDifferentOrder) {
  ScratchDir dir;
  write_split(dir, "train", 100);
  FashionMnist ds("train", dir.str());
  auto a = flatten(ds.epoch_indices(10, 1));
  auto b = flatten(ds.epoch_indices(10, 2));
  EXPECT_NE(a, b);
  EXPECT_NE(a, iota(100)) << "the order is not shuffled";
}

TEST(FashionMnist, ShuffleIsPinnedAcrossStandardLibraries) {
  // mt19937_64 is fully specified and the shuffle uses only its raw outputs,
  // so this order must be identical with every compiler and library.
  ScratchDir dir;
  write_split(dir, "train", 10);
  FashionMnist ds("train", dir.str());
  EXPECT_EQ(flatten(ds.epoch_indices(10, 0)), (std::vector<int64_t>{7, 2, 0, 8, 3, 9, 6, 1, 5, 4}));
  EXPECT_EQ(flatten(ds.epoch_indices(10, 12345)),
            (std::vector<int64_t>{3, 1, 7, 4, 9, 2, 0, 8, 5, 6}));
}

TEST(FashionMnist, EveryIndexAppearsOncePerEpoch) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  FashionMnist ds("train", dir.str());
  for (int64_t bs : {1, 2, 3, 4, 5, 6, 100}) {
    for (uint64_t seed : {0ull, 1ull, 99ull, ~0ull}) {
      auto batches = ds.epoch_indices(bs, seed);
      size_t expected_batches = size_t((5 + bs - 1) / bs);
      EXPECT_EQ(batches.size(), expected_batches) << "batch size " << bs;
      for (size_t i = 0; i + 1 < batches.size(); ++i) EXPECT_EQ(int64_t(batches[i].size()), bs);
      auto all = flatten(batches);
      std::sort(all.begin(), all.end());
      EXPECT_EQ(all, iota(5)) << "batch size " << bs << " seed " << seed;
    }
  }
}

TEST(FashionMnist, DropLastDropsShortFinalBatch) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  FashionMnist ds("train", dir.str());
  auto kept = ds.epoch_indices(2, 7, /*drop_last=*/false);
  auto dropped = ds.epoch_indices(2, 7, /*drop_last=*/true);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept.back().size(), 1u);
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_EQ(dropped[0], kept[0]);
  EXPECT_EQ(dropped[1], kept[1]);
  EXPECT_TRUE(ds.epoch_indices(6, 7, /*drop_last=*/true).empty());
}

TEST(FashionMnist, DropLastKeepsFullFinalBatch) {
  ScratchDir dir;
  write_split(dir, "train", 6);
  FashionMnist ds("train", dir.str());
  EXPECT_EQ(ds.epoch_indices(3, 7, /*drop_last=*/true), ds.epoch_indices(3, 7));
  EXPECT_EQ(ds.epoch_indices(3, 7, /*drop_last=*/true).size(), 2u);
}

TEST(FashionMnist, HugeBatchSizeGivesOneBatch) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  FashionMnist ds("train", dir.str());
  EXPECT_EQ(ds.epoch_indices(INT64_MAX, 3).size(), 1u);
  EXPECT_TRUE(ds.epoch_indices(INT64_MAX, 3, /*drop_last=*/true).empty());
}

TEST(FashionMnist, NonPositiveBatchSizeIsAnError) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  FashionMnist ds("train", dir.str());
  EXPECT_TRUE(contains_all(error_message([&] { ds.epoch_indices(0, 1); }),
                           {"batch_size must be positive", "got 0"}));
  EXPECT_TRUE(contains_all(error_message([&] { ds.batches(-3, 1); }), {"got -3"}));
}

TEST(FashionMnist, BatchesRangeFollowsEpochIndices) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  FashionMnist ds("train", dir.str());
  auto idx = ds.epoch_indices(2, 11);
  auto range = ds.batches(2, 11);
  ASSERT_EQ(range.size(), idx.size());
  size_t i = 0;
  for (Batch b : range) {
    ASSERT_LT(i, idx.size());
    EXPECT_EQ(b.labels.shape(), (Shape{int64_t(idx[i].size())}));
    std::vector<double> labels = b.labels.to_vector();
    for (size_t r = 0; r < idx[i].size(); ++r) EXPECT_EQ(labels[r], label(idx[i][r]));
    ++i;
  }
  EXPECT_EQ(i, idx.size());
}

// The Debian package is named only for its own directory: a directory the
// user chose is theirs to fix (idx_test checks the package's message).
TEST(FashionMnist, MissingDirNamesThePathNotThePackage) {
  ScratchDir dir;
  std::string missing = dir.file("no-such-dir");
  std::string msg = error_message([&] { FashionMnist("train", missing); });
  EXPECT_TRUE(contains_all(msg, {missing + "/train-images-idx3-ubyte.gz", "no such file"}));
  EXPECT_EQ(msg.find("apt-get"), std::string::npos) << msg;
}

TEST(FashionMnist, MissingLabelsFileNamesItsPath) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  std::filesystem::remove(dir.file("train-labels-idx1-ubyte.gz"));
  std::string msg = error_message([&] { FashionMnist("train", dir.str()); });
  EXPECT_TRUE(contains_all(msg, {dir.file("train-labels-idx1-ubyte.gz"), "no such file"}));
}

TEST(FashionMnist, WrongImageSizeNamesPathAndShape) {
  ScratchDir dir;
  write_split(dir, "train", 2);
  write_gzip(dir.file("train-images-idx3-ubyte.gz"),
             idx_bytes({2, 28, 27}, std::vector<uint8_t>(2 * 28 * 27)));
  std::string msg = error_message([&] { FashionMnist("train", dir.str()); });
  EXPECT_TRUE(contains_all(
      msg, {dir.file("train-images-idx3-ubyte.gz"), "[2,28,27]", "expected [N,28,28]"}));
}

TEST(FashionMnist, ImagesNotThreeDimensionalNamesPathAndShape) {
  ScratchDir dir;
  write_split(dir, "train", 2);
  write_gzip(dir.file("train-images-idx3-ubyte.gz"),
             idx_bytes({2, kPix}, std::vector<uint8_t>(2 * kPix)));
  std::string msg = error_message([&] { FashionMnist("train", dir.str()); });
  EXPECT_TRUE(
      contains_all(msg, {dir.file("train-images-idx3-ubyte.gz"), "[2,784]", "expected [N,28,28]"}));
}

TEST(FashionMnist, LabelsNotOneDimensionalNamesPathAndShape) {
  ScratchDir dir;
  write_split(dir, "train", 2);
  write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({2, 1}, {1, 2}));
  std::string msg = error_message([&] { FashionMnist("train", dir.str()); });
  EXPECT_TRUE(contains_all(msg, {dir.file("train-labels-idx1-ubyte.gz"), "[2,1]", "expected [N]"}));
}

TEST(FashionMnist, CountMismatchNamesBothPathsAndShapes) {
  ScratchDir dir;
  write_split(dir, "train", 5);
  write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({4}, {1, 2, 3, 4}));
  std::string msg = error_message([&] { FashionMnist("train", dir.str()); });
  EXPECT_TRUE(contains_all(msg, {dir.file("train-images-idx3-ubyte.gz"), "[5,28,28]",
                                 dir.file("train-labels-idx1-ubyte.gz"), "[4]", "must match"}));
}

TEST(FashionMnist, LabelOutOfRangeNamesPathIndexAndValue) {
  ScratchDir dir;
  write_split(dir, "train", 3);
  write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({3}, {0, 9, 10}));
  std::string msg = error_message([&] { FashionMnist("train", dir.str()); });
  EXPECT_TRUE(contains_all(msg, {dir.file("train-labels-idx1-ubyte.gz"), "label 10", "index 2",
                                 "out of range [0, 10)"}));
}

TEST(FashionMnist, RealDataSetHasExpectedSizesAndBalancedLabels) {
  // Needs the Debian package dataset-fashion-mnist (installed on CI); when it
  // is missing, the error says how to install it.
  for (auto [split, n] : {std::pair{"train", 60000}, std::pair{"test", 10000}}) {
    FashionMnist ds(split);
    ASSERT_EQ(ds.size(), n) << split;
    std::vector<int64_t> counts(10, 0);
    double sum = 0, sum_sq = 0;
    // Examine the data in chunks to keep the double copies small.
    for (int64_t start = 0; start < n; start += 5000) {
      std::vector<int64_t> idx(5000);
      std::iota(idx.begin(), idx.end(), start);
      Batch b = ds.batch(idx);
      for (double l : b.labels.to_vector()) {
        ASSERT_GE(l, 0) << split;
        ASSERT_LT(l, 10) << split;
        counts[size_t(l)]++;
      }
      for (double v : b.images.to_vector()) {
        sum += v;
        sum_sq += v * v;
      }
    }
    // Fashion-MNIST has the same number of examples of every class.
    for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c], n / 10) << split << " class " << c;
    double count = double(n) * kPix;
    double mean = sum / count;
    double std = std::sqrt(sum_sq / count - mean * mean);
    if (std::string(split) == "train") {
      // The normalization constants are the training set's own statistics.
      EXPECT_NEAR(mean, 0.0, 1e-3);
      EXPECT_NEAR(std, 1.0, 1e-3);
    } else {
      EXPECT_NEAR(mean, 0.0, 0.02);
      EXPECT_NEAR(std, 1.0, 0.02);
    }
  }
}

}  // namespace
}  // namespace ws::data
