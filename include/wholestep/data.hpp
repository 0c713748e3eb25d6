// Data sets: the IDX format (optionally gzip-compressed) and Fashion-MNIST.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "wholestep/tensor.hpp"

namespace ws::data {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kFashionMnistPackage = "dataset-fashion-mnist";

// An IDX file: unsigned-byte element type only (the type Fashion-MNIST uses).
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> values;
};

// Reads an IDX file, gzip-compressed or not. A missing file, bad magic, an
// unsupported element type, or a truncated body throws ws::Error naming the
// path and the problem; `package` (when given) is named in the missing-file
// message as the Debian package to install.
IdxArray read_idx(const std::string& path, const std::string& package = "");

struct Batch {
  Tensor images;  // f32 [B, 784], normalized
  Tensor labels;  // i64 [B]
};

class FashionMnist {
 public:
  // split: "train" (60000) or "test" (10000). Images are scaled to [0, 1] and
  // normalized with the training set's mean 0.2860 and std 0.3530.
  explicit FashionMnist(const std::string& split, const std::string& dir = kFashionMnistDir);

  int64_t size() const { return int64_t(d_->labels.size()); }
  static constexpr int64_t kPixels = 28 * 28;
  static constexpr int64_t kClasses = 10;

  // The examples at `indices`, in that order.
  Batch batch(std::span<const int64_t> indices) const;

  // One epoch in batches of `batch_size`, shuffled with `shuffle_seed` (the
  // same seed gives the same order), the last short batch kept unless
  // `drop_last`.
  std::vector<std::vector<int64_t>> epoch_indices(int64_t batch_size, uint64_t shuffle_seed,
                                                  bool drop_last = false) const;

  class Batches;
  Batches batches(int64_t batch_size, uint64_t shuffle_seed, bool drop_last = false) const;

 private:
  // Shared, so copies are cheap and a batch range keeps its data set alive
  // (`for (auto& b : FashionMnist("train").batches(...))` is safe).
  struct Data {
    std::vector<float> images;  // normalized, [N*784]
    std::vector<int64_t> labels;
  };
  std::shared_ptr<Data> d_ = std::make_shared<Data>();
};

// A lazy range over one epoch's batches.
class FashionMnist::Batches {
 public:
  Batches(FashionMnist ds, std::vector<std::vector<int64_t>> idx)
      : ds_(std::move(ds)), idx_(std::move(idx)) {}
  struct iterator {
    const Batches* b;
    size_t i;
    Batch operator*() const { return b->ds_.batch(b->idx_[i]); }
    iterator& operator++() { return ++i, *this; }
    bool operator!=(const iterator& o) const { return i != o.i; }
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, idx_.size()}; }
  size_t size() const { return idx_.size(); }

 private:
  FashionMnist ds_;
  std::vector<std::vector<int64_t>> idx_;
};

inline FashionMnist::Batches FashionMnist::batches(int64_t batch_size, uint64_t shuffle_seed,
                                                   bool drop_last) const {
  return Batches(*this, epoch_indices(batch_size, shuffle_seed, drop_last));
}

// ---------------------------------------------------------------------------
// Data parallelism: every rank draws the same global batch (the same order,
// the same windows) and reads its own part of it.

// The examples [begin, end) of a global batch of `n` that rank `rank` of
// `world` reads: contiguous parts in rank order, [rank * n / world,
// (rank + 1) * n / world), all of one size when `world` divides `n`, so the
// parts put back in rank order are the global batch. Throws ws::Error unless
// n >= 0 and 0 <= rank < world.
struct Shard {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
Shard shard(int64_t n, int rank, int world);

// ---------------------------------------------------------------------------
// Byte-level text: a file read as raw bytes (vocabulary 256) for training a
// character/byte language model.

inline constexpr const char* kDefaultTextFile = "/usr/share/common-licenses/GPL-3";

struct TextBatch {
  Tensor inputs;   // i64 [B, T], byte values in [0, 256)
  Tensor targets;  // i64 [B, T], the byte after each input byte
};

class ByteText {
 public:
  // Reads the whole file as bytes. A missing or unreadable file, a directory,
  // or a file of fewer than 2 bytes throws ws::Error naming the path.
  explicit ByteText(const std::string& path = kDefaultTextFile);

  int64_t size() const { return len_; }  // bytes in this view
  static constexpr int64_t kVocab = 256;
  const std::string& path() const { return d_->path; }
  // "" for the whole file, else "train" or "val".
  const std::string& which() const { return which_; }

  // A split by position: "train" is the first (1 - holdout) of the bytes,
  // "val" the rest; holdout must lie in (0, 1). Both views share this one's
  // data. An unknown name, a bad holdout, or a part of fewer than 2 bytes
  // throws ws::Error.
  ByteText split(const std::string& which, double holdout = 0.1) const;

  // `batch` windows of `context` + 1 consecutive bytes; inputs are each
  // window's first `context` bytes, targets its last `context`. The window
  // offsets are uniform over the view, drawn with splitmix64 keyed by
  // (seed, step): the same seed and step give the same batch on every
  // platform and standard library. Needs batch > 0, context > 0, step >= 0
  // and context + 1 <= size().
  TextBatch sample(int64_t batch, int64_t context, uint64_t seed, int64_t step) const;

  // The window offsets sample(batch, context, seed, step) uses, relative to
  // this view (for tests and debugging).
  std::vector<int64_t> offsets(int64_t batch, int64_t context, uint64_t seed, int64_t step) const;

  // `len` bytes from `begin` (relative to this view) as a string.
  std::string text(int64_t begin, int64_t len) const;
  // Byte values (e.g. a row of sampled tokens) back to a string; each must
  // lie in [0, 256).
  static std::string decode(std::span<const int64_t> tokens);

 private:
  struct Data {
    std::string path;
    std::string bytes;
  };
  ByteText(std::shared_ptr<const Data> d, int64_t begin, int64_t len, std::string which)
      : d_(std::move(d)), begin_(begin), len_(len), which_(std::move(which)) {}
  // The path, plus the split name for a split view: for error messages.
  std::string where() const;

  // Shared, so copies and splits are cheap.
  std::shared_ptr<const Data> d_;
  int64_t begin_ = 0;
  int64_t len_ = 0;
  std::string which_;
};

}  // namespace ws::data
