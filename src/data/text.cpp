// Byte-level text data: a file read as raw bytes (vocabulary 256), sampled in
// random windows for training a character/byte language model.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/random.hpp"
#include "wholestep/data.hpp"
#include "wholestep/error.hpp"

namespace ws::data {
namespace {

// The largest batch * context sample() will build (each element is 8 bytes).
constexpr int64_t kMaxSampleElements = int64_t{1} << 28;
constexpr size_t kReadChunk = size_t{1} << 20;

[[noreturn]] void text_fail(const std::string& path, const std::string& problem) {
  throw Error(fmt::format("ByteText: {}: {}", path, problem));
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

std::string read_bytes(const std::string& path) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) text_fail(path, "no such file");
  if (status.type() == std::filesystem::file_type::directory)
    text_fail(path, "is a directory, not a text file");
  errno = 0;
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    if (errno == ENOENT || errno == ENOTDIR) text_fail(path, "no such file");
    text_fail(path, fmt::format("cannot open: {}", errno ? std::strerror(errno) : "unknown error"));
  }
  std::string bytes;
  for (;;) {
    size_t have = bytes.size();
    bytes.resize(have + kReadChunk);
    size_t r = std::fread(bytes.data() + have, 1, kReadChunk, f.get());
    bytes.resize(have + r);
    if (r < kReadChunk) break;
  }
  if (std::ferror(f.get())) text_fail(path, fmt::format("read error: {}", std::strerror(errno)));
  return bytes;
}

}  // namespace

ByteText::ByteText(const std::string& path) {
  auto d = std::make_shared<Data>();
  d->path = path;
  d->bytes = read_bytes(path);
  if (d->bytes.size() < 2) {
    text_fail(path,
              fmt::format("the file has {} byte{}; a text data set needs at least 2 (one input "
                          "and its next-byte target)",
                          d->bytes.size(), d->bytes.size() == 1 ? "" : "s"));
  }
  len_ = int64_t(d->bytes.size());
  d_ = std::move(d);
}

std::string ByteText::where() const {
  return which_.empty() ? d_->path : fmt::format("{} (\"{}\" split)", d_->path, which_);
}

ByteText ByteText::split(const std::string& which, double holdout) const {
  if (which != "train" && which != "val") {
    throw Error(fmt::format(
        "ByteText::split: {}: unknown split \"{}\"; valid splits are \"train\" and \"val\"",
        where(), which));
  }
  if (!(holdout > 0.0 && holdout < 1.0)) {  // also rejects NaN
    throw Error(
        fmt::format("ByteText::split: {}: holdout must lie in (0, 1), got {}", where(), holdout));
  }
  int64_t n_train = int64_t(std::floor(double(len_) * (1.0 - holdout)));
  n_train = std::min(std::max<int64_t>(n_train, 0), len_);
  int64_t begin = which == "train" ? 0 : n_train;
  int64_t len = which == "train" ? n_train : len_ - n_train;
  if (len < 2) {
    throw Error(fmt::format(
        "ByteText::split: {}: the \"{}\" part of {} bytes with holdout {} has {} byte{}; it needs "
        "at least 2",
        where(), which, len_, holdout, len, len == 1 ? "" : "s"));
  }
  return ByteText(d_, begin_ + begin, len, which);
}

std::vector<int64_t> ByteText::offsets(int64_t batch, int64_t context, uint64_t seed,
                                       int64_t step) const {
  if (batch <= 0) {
    throw Error(
        fmt::format("ByteText::sample: {}: batch must be positive, got {}", where(), batch));
  }
  if (context <= 0) {
    throw Error(
        fmt::format("ByteText::sample: {}: context must be positive, got {}", where(), context));
  }
  if (step < 0) {
    throw Error(
        fmt::format("ByteText::sample: {}: step must be non-negative, got {}", where(), step));
  }
  if (context >= len_) {  // context + 1 > len_, without overflow
    throw Error(fmt::format(
        "ByteText::sample: {}: context {} needs windows of {} bytes, but the text has only {} "
        "byte{}",
        where(), context, uint64_t(context) + 1, len_, len_ == 1 ? "" : "s"));
  }
  if (batch > kMaxSampleElements / context) {
    throw Error(fmt::format(
        "ByteText::sample: {}: batch {} x context {} is too large; at most {} elements are "
        "supported",
        where(), batch, context, kMaxSampleElements));
  }
  // Key the stream by (seed, step): mix64 is a bijection, so for a fixed seed
  // every step starts from a different state.
  base::SplitMix64 rng(base::mix64(base::mix64(seed) ^ uint64_t(step)));
  uint64_t n_offsets = uint64_t(len_ - context);  // offsets 0 .. len_ - context - 1
  std::vector<int64_t> out(static_cast<size_t>(batch));
  for (auto& o : out) o = int64_t(rng.below(n_offsets));
  return out;
}

TextBatch ByteText::sample(int64_t batch, int64_t context, uint64_t seed, int64_t step) const {
  std::vector<int64_t> starts = offsets(batch, context, seed, step);
  std::vector<int64_t> inputs(size_t(batch * context)), targets(size_t(batch * context));
  const auto* bytes = reinterpret_cast<const unsigned char*>(d_->bytes.data()) + begin_;
  for (int64_t b = 0; b < batch; ++b) {
    const unsigned char* w = bytes + starts[b];
    int64_t* in = inputs.data() + b * context;
    int64_t* tg = targets.data() + b * context;
    for (int64_t t = 0; t < context; ++t) {
      in[t] = w[t];
      tg[t] = w[t + 1];
    }
  }
  return TextBatch{Tensor::from_vector(inputs, {batch, context}),
                   Tensor::from_vector(targets, {batch, context})};
}

std::string ByteText::text(int64_t begin, int64_t len) const {
  if (begin < 0 || len < 0 || begin > len_ || len > len_ - begin) {
    throw Error(fmt::format(
        "ByteText::text: {}: range [{}, {} + {}) is out of bounds for a text of {} bytes", where(),
        begin, begin, len, len_));
  }
  return d_->bytes.substr(size_t(begin_ + begin), size_t(len));
}

std::string ByteText::decode(std::span<const int64_t> tokens) {
  std::string s;
  s.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    int64_t t = tokens[i];
    if (t < 0 || t >= kVocab) {
      throw Error(fmt::format(
          "ByteText::decode: token {} at position {} is not a byte; tokens must lie in [0, {})", t,
          i, kVocab));
    }
    s += char(static_cast<unsigned char>(t));
  }
  return s;
}

}  // namespace ws::data
