// ws::data::ByteText on small text files written to a scratch directory, plus
// one test on the real /usr/share/common-licenses/GPL-3.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "data/idx_files.hpp"
#include "wholestep/data.hpp"
#include "wholestep/error.hpp"

namespace ws::data {
namespace {

using test_util::contains_all;
using test_util::error_message;
using test_util::ScratchDir;
using test_util::write_plain;

// `n` bytes covering all 256 values, in an order without short repeats.
std::string scrambled_bytes(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    s[i] = char(x >> 24);
  }
  return s;
}

// Bytes 0, 1, ..., n-1 (n <= 256): each byte value names its position.
std::string position_bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char(i);
  return s;
}

std::string write_text(const ScratchDir& dir, const std::string& name, const std::string& bytes) {
  std::string path = dir.file(name);
  write_plain(path, bytes);
  return path;
}

std::vector<std::vector<int64_t>> rows(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::i64);
  EXPECT_EQ(t.dim(), 2);
  std::vector<std::vector<int64_t>> out;
  const int64_t* p = t.data<int64_t>();
  for (int64_t b = 0; b < t.size(0); ++b)
    out.emplace_back(p + b * t.size(1), p + (b + 1) * t.size(1));
  return out;
}

TEST(ByteText, ReadsEveryByteOfTheFile) {
  ScratchDir dir;
  std::string bytes = scrambled_bytes(1000);
  bytes[10] = '\0';  // binary-safe: zero bytes and high bytes are kept
  std::string path = write_text(dir, "t.txt", bytes);
  ByteText ds(path);
  EXPECT_EQ(ds.size(), 1000);
  EXPECT_EQ(ds.path(), path);
  EXPECT_EQ(ds.which(), "");
  EXPECT_EQ(ds.text(0, ds.size()), bytes);
  EXPECT_EQ(ds.text(5, 3), bytes.substr(5, 3));
  EXPECT_EQ(ds.text(1000, 0), "");
}

TEST(ByteText, TargetsAreInputsShiftedByOneByte) {
  ScratchDir dir;
  ByteText ds(write_text(dir, "t.txt", scrambled_bytes(1000)));
  TextBatch b = ds.sample(8, 16, 7, 3);
  EXPECT_EQ(b.inputs.shape(), (Shape{8, 16}));
  EXPECT_EQ(b.targets.shape(), (Shape{8, 16}));
  auto in = rows(b.inputs), tg = rows(b.targets);
  auto off = ds.offsets(8, 16, 7, 3);
  for (size_t r = 0; r < in.size(); ++r) {
    for (size_t t = 0; t + 1 < in[r].size(); ++t) EXPECT_EQ(tg[r][t], in[r][t + 1]);
    // The last target is the byte after the window's inputs.
    EXPECT_EQ(tg[r].back(), int64_t(uint8_t(ds.text(off[r] + 16, 1)[0])));
  }
}

TEST(ByteText, WindowsComeFromTheFile) {
  ScratchDir dir;
  ByteText ds(write_text(dir, "t.txt", scrambled_bytes(5000)));
  std::string all = ds.text(0, ds.size());
  TextBatch b = ds.sample(16, 32, 99, 0);
  auto off = ds.offsets(16, 32, 99, 0);
  auto in = rows(b.inputs), tg = rows(b.targets);
  for (size_t r = 0; r < in.size(); ++r) {
    std::string window = ByteText::decode(in[r]);
    EXPECT_EQ(window, ds.text(off[r], 32));
    EXPECT_EQ(ByteText::decode(tg[r]), ds.text(off[r] + 1, 32));
    EXPECT_NE(all.find(window), std::string::npos);
    for (int64_t v : in[r]) {
      EXPECT_GE(v, 0);
      EXPECT_LT(v, ByteText::kVocab);
    }
  }
}

TEST(ByteText, FirstInputByteIsTheWindowOffset) {
  // With byte i == i, each window's first byte is its offset.
  ScratchDir dir;
  ByteText ds(write_text(dir, "t.txt", position_bytes(256)));
  auto in = rows(ds.sample(10, 4, 5, 2).inputs);
  auto off = ds.offsets(10, 4, 5, 2);
  for (size_t r = 0; r < in.size(); ++r) {
    EXPECT_EQ(in[r][0], off[r]);
    EXPECT_EQ(in[r], (std::vector<int64_t>{off[r], off[r] + 1, off[r] + 2, off[r] + 3}));
  }
}

TEST(ByteText, OffsetsCoverEveryWindowIncludingTheLast) {
  // 10 bytes, context 3: windows of 4 bytes start at 0..6, all reachable.
  ScratchDir dir;
  ByteText ds(write_text(dir, "t.txt", position_bytes(10)));
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 50; ++step) {
    for (int64_t o : ds.offsets(8, 3, 1, step)) {
      EXPECT_GE(o, 0);
      EXPECT_LE(o, 6);
      seen.insert(o);
    }
  }
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  // Context size() - 1 leaves exactly one window: the whole text.
  auto b = ds.sample(3, 9, 42, 0);
  for (const auto& r : rows(b.inputs)) EXPECT_EQ(ByteText::decode(r), ds.text(0, 9));
  for (const auto& r : rows(b.targets)) EXPECT_EQ(ByteText::decode(r), ds.text(1, 9));
}

TEST(ByteText, SameSeedAndStepGiveTheSameBatch) {
  ScratchDir dir;
  std::string path = write_text(dir, "t.txt", scrambled_bytes(4000));
  ByteText a(path), b(path);
  TextBatch x = a.sample(4, 20, 1234, 17), y = b.sample(4, 20, 1234, 17);
  EXPECT_EQ(rows(x.inputs), rows(y.inputs));
  EXPECT_EQ(rows(x.targets), rows(y.targets));
  EXPECT_EQ(a.offsets(4, 20, 1234, 17), b.offsets(4, 20, 1234, 17));
}

TEST(ByteText, DifferentStepsAndSeedsGiveDifferentBatches) {
  ScratchDir dir;
  ByteText ds(write_text(dir, "t.txt", scrambled_bytes(4000)));
  auto base = ds.offsets(8, 20, 1234, 0);
  EXPECT_NE(base, ds.offsets(8, 20, 1234, 1));
  EXPECT_NE(base, ds.offsets(8, 20, 1235, 0));
  EXPECT_NE(rows(ds.sample(8, 20, 1234, 0).inputs), rows(ds.sample(8, 20, 1234, 1).inputs));
  // Consecutive steps of one seed all differ from each other.
  std::set<std::vector<int64_t>> distinct;
  for (int64_t step = 0; step < 100; ++step) distinct.insert(ds.offsets(8, 20, 7, step));
  EXPECT_EQ(distinct.size(), 100u);
}

TEST(ByteText, OffsetsArePinnedAcrossPlatforms) {
  // splitmix64 is fully specified, so these values must never change: a
  // training run restarted elsewhere sees the same batches.
  ScratchDir dir;
  ByteText ds(write_text(dir, "t.txt", position_bytes(256)));
  EXPECT_EQ(ds.offsets(6, 8, 0, 0), (std::vector<int64_t>{47, 180, 95, 4, 35, 210}));
  EXPECT_EQ(ds.offsets(6, 8, 42, 3), (std::vector<int64_t>{104, 245, 132, 62, 6, 86}));
}

TEST(ByteText, CopiesShareTheData) {
  ScratchDir dir;
  std::string path = write_text(dir, "t.txt", scrambled_bytes(300));
  ByteText a(path);
  std::filesystem::remove(path);  // the copy must not need the file again
  ByteText b = a;
  EXPECT_EQ(b.size(), 300);
  EXPECT_EQ(b.text(0, 300), a.text(0, 300));
}

TEST(ByteText, SplitSizesAndDisjointness) {
  ScratchDir dir;
  std::string bytes = scrambled_bytes(1000);
  ByteText ds(write_text(dir, "t.txt", bytes));
  ByteText train = ds.split("train");
  ByteText val = ds.split("val");
  EXPECT_EQ(train.size(), 900);
  EXPECT_EQ(val.size(), 100);
  EXPECT_EQ(train.which(), "train");
  EXPECT_EQ(val.which(), "val");
  EXPECT_EQ(val.path(), ds.path());
  // Train is the beginning of the file, val the rest: together the whole,
  // with no byte in both.
  EXPECT_EQ(train.text(0, train.size()), bytes.substr(0, 900));
  EXPECT_EQ(val.text(0, val.size()), bytes.substr(900));
  EXPECT_EQ(train.text(0, train.size()) + val.text(0, val.size()), bytes);

  ByteText train25 = ds.split("train", 0.25), val25 = ds.split("val", 0.25);
  EXPECT_EQ(train25.size(), 750);
  EXPECT_EQ(val25.size(), 250);
  EXPECT_EQ(train25.size() + val25.size(), ds.size());
}

TEST(ByteText, SplitSamplesStayInsideTheSplit) {
  // With byte i == i the sampled bytes show their position in the file.
  ScratchDir dir;
  ByteText ds(write_text(dir, "t.txt", position_bytes(200)));
  ByteText train = ds.split("train", 0.5), val = ds.split("val", 0.5);
  for (int64_t step = 0; step < 20; ++step) {
    for (const auto& r : rows(train.sample(8, 10, 3, step).targets))
      for (int64_t v : r) EXPECT_LT(v, 100);
    for (const auto& r : rows(val.sample(8, 10, 3, step).inputs))
      for (int64_t v : r) EXPECT_GE(v, 100);
  }
  // Offsets are relative to the split.
  auto off = val.offsets(8, 10, 3, 0);
  auto in = rows(val.sample(8, 10, 3, 0).inputs);
  for (size_t r = 0; r < in.size(); ++r) EXPECT_EQ(in[r][0], 100 + off[r]);
}

TEST(ByteText, MissingFileNamesThePath) {
  ScratchDir dir;
  std::string path = dir.file("no_such.txt");
  std::string msg = error_message([&] { ByteText ds(path); });
  EXPECT_TRUE(contains_all(msg, {path, "no such file"}));
}

TEST(ByteText, DirectoryIsRejected) {
  ScratchDir dir;
  std::string msg = error_message([&] { ByteText ds(dir.str()); });
  EXPECT_TRUE(contains_all(msg, {dir.str(), "directory"}));
}

TEST(ByteText, TooShortFileIsRejected) {
  ScratchDir dir;
  std::string empty = write_text(dir, "empty.txt", "");
  std::string one = write_text(dir, "one.txt", "x");
  EXPECT_TRUE(
      contains_all(error_message([&] { ByteText ds(empty); }), {empty, "0 bytes", "at least 2"}));
  EXPECT_TRUE(
      contains_all(error_message([&] { ByteText ds(one); }), {one, "1 byte;", "at least 2"}));
  EXPECT_EQ(ByteText(write_text(dir, "two.txt", "xy")).size(), 2);
}

TEST(ByteText, ContextTooLongForTheText) {
  ScratchDir dir;
  std::string path = write_text(dir, "t.txt", "hello");
  ByteText ds(path);
  EXPECT_TRUE(contains_all(error_message([&] { ds.sample(2, 5, 0, 0); }),
                           {path, "context 5", "6 bytes", "only 5 bytes"}));
  EXPECT_TRUE(
      contains_all(error_message([&] { ds.sample(2, std::numeric_limits<int64_t>::max(), 0, 0); }),
                   {path, "9223372036854775808 bytes"}));
  EXPECT_NO_THROW(ds.sample(2, 4, 0, 0));
  // In a split, the message names the split.
  ScratchDir dir2;
  std::string p2 = write_text(dir2, "t.txt", scrambled_bytes(100));
  ByteText val = ByteText(p2).split("val");
  EXPECT_TRUE(contains_all(error_message([&] { val.sample(1, 10, 0, 0); }),
                           {p2, "\"val\" split", "context 10", "only 10 bytes"}));
}

TEST(ByteText, BadBatchContextOrStep) {
  ScratchDir dir;
  std::string path = write_text(dir, "t.txt", scrambled_bytes(100));
  ByteText ds(path);
  EXPECT_TRUE(contains_all(error_message([&] { ds.sample(0, 8, 0, 0); }),
                           {path, "batch must be positive, got 0"}));
  EXPECT_TRUE(contains_all(error_message([&] { ds.sample(-3, 8, 0, 0); }),
                           {path, "batch must be positive, got -3"}));
  EXPECT_TRUE(contains_all(error_message([&] { ds.sample(4, 0, 0, 0); }),
                           {path, "context must be positive, got 0"}));
  EXPECT_TRUE(contains_all(error_message([&] { ds.sample(4, -1, 0, 0); }),
                           {path, "context must be positive, got -1"}));
  EXPECT_TRUE(contains_all(error_message([&] { ds.sample(4, 8, 0, -1); }),
                           {path, "step must be non-negative, got -1"}));
  EXPECT_TRUE(
      contains_all(error_message([&] { ds.sample(std::numeric_limits<int64_t>::max(), 8, 0, 0); }),
                   {path, "too large"}));
}

TEST(ByteText, BadSplitName) {
  ScratchDir dir;
  std::string path = write_text(dir, "t.txt", scrambled_bytes(100));
  ByteText ds(path);
  EXPECT_TRUE(contains_all(error_message([&] { ds.split("test"); }),
                           {path, "unknown split \"test\"", "\"train\"", "\"val\""}));
  EXPECT_TRUE(contains_all(error_message([&] { ds.split(""); }), {path, "unknown split \"\""}));
}

TEST(ByteText, BadHoldout) {
  ScratchDir dir;
  std::string path = write_text(dir, "t.txt", scrambled_bytes(100));
  ByteText ds(path);
  for (double h : {0.0, 1.0, -0.5, 1.5, std::nan("")}) {
    EXPECT_TRUE(contains_all(error_message([&] { ds.split("train", h); }),
                             {path, "holdout must lie in (0, 1)"}))
        << h;
  }
}

TEST(ByteText, SplitPartTooSmall) {
  ScratchDir dir;
  std::string path = write_text(dir, "t.txt", scrambled_bytes(10));
  ByteText ds(path);
  // 10 bytes, holdout 0.1: "val" gets 1 byte.
  EXPECT_TRUE(contains_all(error_message([&] { ds.split("val"); }),
                           {path, "\"val\" part", "1 byte;", "at least 2"}));
  EXPECT_EQ(ds.split("train").size(), 9);
  EXPECT_EQ(ds.split("val", 0.2).size(), 2);
}

TEST(ByteText, TextOutOfRange) {
  ScratchDir dir;
  std::string path = write_text(dir, "t.txt", scrambled_bytes(10));
  ByteText ds(path);
  for (auto [b, n] : {std::pair<int64_t, int64_t>{-1, 2},
                      {0, 11},
                      {5, 6},
                      {11, 0},
                      {3, -1},
                      {2, std::numeric_limits<int64_t>::max()}}) {
    EXPECT_TRUE(contains_all(error_message([&] { ds.text(b, n); }), {path, "out of bounds"}))
        << b << " " << n;
  }
}

TEST(ByteText, DecodeRoundTripsAndRejectsNonBytes) {
  std::vector<int64_t> toks = {72, 105, 0, 255};
  EXPECT_EQ(ByteText::decode(toks), std::string("Hi\0\xff", 4));
  std::vector<int64_t> bad = {65, 256};
  EXPECT_TRUE(contains_all(error_message([&] { ByteText::decode(bad); }),
                           {"token 256", "position 1", "[0, 256)"}));
  std::vector<int64_t> neg = {-1};
  EXPECT_TRUE(contains_all(error_message([&] { ByteText::decode(neg); }), {"token -1"}));
}

TEST(ByteText, RealGpl3License) {
  if (!std::filesystem::exists(kDefaultTextFile))
    GTEST_SKIP() << kDefaultTextFile << " is not installed";
  ByteText ds;  // the default file
  EXPECT_EQ(ds.path(), kDefaultTextFile);
  EXPECT_GT(ds.size(), 30000);
  EXPECT_NE(ds.text(0, 200).find("GNU GENERAL PUBLIC LICENSE"), std::string::npos);

  ByteText train = ds.split("train"), val = ds.split("val");
  EXPECT_EQ(train.size() + val.size(), ds.size());
  EXPECT_EQ(train.text(0, train.size()) + val.text(0, val.size()), ds.text(0, ds.size()));

  TextBatch b = train.sample(4, 64, 2024, 0);
  EXPECT_EQ(b.inputs.shape(), (Shape{4, 64}));
  auto in = rows(b.inputs), tg = rows(b.targets);
  std::string all = train.text(0, train.size());
  for (size_t r = 0; r < in.size(); ++r) {
    EXPECT_NE(all.find(ByteText::decode(in[r])), std::string::npos);
    for (size_t t = 0; t + 1 < in[r].size(); ++t) EXPECT_EQ(tg[r][t], in[r][t + 1]);
    // The license is plain ASCII.
    for (int64_t v : in[r]) EXPECT_LT(v, 128);
  }
}

}  // namespace
}  // namespace ws::data
