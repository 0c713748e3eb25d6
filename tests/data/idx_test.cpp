// ws::data::read_idx: round trips through plain and gzip files, and every
// way a file can be wrong produces a ws::Error naming the path and problem.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
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
using test_util::read_all;
using test_util::ScratchDir;
using test_util::write_gzip;
using test_util::write_plain;

std::vector<uint8_t> iota_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 37 + 11);
  return v;
}

TEST(Idx, GzipFileRoundTrips) {
  ScratchDir dir;
  std::string path = dir.file("images.gz");
  auto body = iota_bytes(2 * 3 * 4);
  write_gzip(path, idx_bytes({2, 3, 4}, body));
  IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(a.values, body);
}

TEST(Idx, PlainFileRoundTrips) {
  ScratchDir dir;
  std::string path = dir.file("labels");
  auto body = iota_bytes(7);
  write_plain(path, idx_bytes({7}, body));
  IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{7}));
  EXPECT_EQ(a.values, body);
}

TEST(Idx, FourDimensionsAndLargeBodyRoundTrip) {
  // Larger than the reader's internal chunk and gzip buffer sizes.
  ScratchDir dir;
  std::string path = dir.file("big.gz");
  auto body = iota_bytes(3 * 5 * 300 * 280);
  write_gzip(path, idx_bytes({3, 5, 300, 280}, body));
  IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 5, 300, 280}));
  EXPECT_EQ(a.values, body);
}

TEST(Idx, ZeroSizedDimensionGivesNoValues) {
  ScratchDir dir;
  std::string path = dir.file("empty.gz");
  write_gzip(path, idx_bytes({0, 28, 28}, {}));
  IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{0, 28, 28}));
  EXPECT_TRUE(a.values.empty());
}

TEST(Idx, MissingFileNamesPath) {
  ScratchDir dir;
  std::string path = dir.file("nope.gz");
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "no such file"}));
  EXPECT_EQ(msg.find("apt-get"), std::string::npos) << msg;
}

TEST(Idx, MissingFileNamesDebianPackage) {
  ScratchDir dir;
  std::string path = dir.file("missing-dir/nope.gz");
  std::string msg = error_message([&] { read_idx(path, "dataset-fashion-mnist"); });
  EXPECT_TRUE(
      contains_all(msg, {path, "no such file", "install the Debian package dataset-fashion-mnist",
                         "apt-get install dataset-fashion-mnist"}));
}

TEST(Idx, DirectoryNamesPath) {
  ScratchDir dir;
  std::string msg = error_message([&] { read_idx(dir.str()); });
  EXPECT_TRUE(contains_all(msg, {dir.str(), "is a directory"}));
}

TEST(Idx, CorruptGzipHeaderNamesPathAndZlibError) {
  ScratchDir dir;
  std::string path = dir.file("corrupt.gz");
  write_gzip(path, idx_bytes({4}, iota_bytes(4)));
  std::string bytes = read_all(path);
  ASSERT_GT(bytes.size(), 3u);
  bytes[2] = 0x07;  // compression method: only 8 (deflate) exists
  write_plain(path, bytes);
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "corrupt gzip file", "zlib:"}));
}

TEST(Idx, GzipChecksumMismatchNamesPath) {
  ScratchDir dir;
  std::string path = dir.file("badcrc.gz");
  write_gzip(path, idx_bytes({4}, iota_bytes(4)));
  std::string bytes = read_all(path);
  ASSERT_GT(bytes.size(), 8u);
  bytes[bytes.size() - 8] ^= 0x5a;  // the CRC-32 in the gzip trailer
  write_plain(path, bytes);
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "corrupt gzip file"}));
}

TEST(Idx, GzipWithoutTrailerNamesPath) {
  ScratchDir dir;
  std::string path = dir.file("notrailer.gz");
  write_gzip(path, idx_bytes({4}, iota_bytes(4)));
  std::string bytes = read_all(path);
  ASSERT_GT(bytes.size(), 8u);
  bytes.resize(bytes.size() - 8);  // body intact, CRC and length gone
  write_plain(path, bytes);
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "corrupt gzip file", "cut off"}));
}

TEST(Idx, CutOffGzipStreamNamesPathAndByteCounts) {
  ScratchDir dir;
  std::string path = dir.file("cut.gz");
  // Incompressible-ish data so the compressed stream is long enough to cut.
  std::vector<uint8_t> body(20000);
  uint32_t x = 12345;
  for (auto& b : body) b = uint8_t((x = x * 1103515245u + 12345u) >> 24);
  write_gzip(path, idx_bytes({20000}, body));
  std::string bytes = read_all(path);
  bytes.resize(bytes.size() / 2);
  write_plain(path, bytes);
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "truncated body", "need 20000 bytes", "cut off"}));
}

TEST(Idx, BadMagicNamesPathAndBytesFound) {
  ScratchDir dir;
  std::string path = dir.file("text");
  write_plain(path, "hello, world");
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "bad magic", "0x68 0x65 0x6c 0x6c"}));
}

TEST(Idx, DoublyGzippedFileHintsAtIt) {
  ScratchDir dir;
  std::string inner = dir.file("inner.gz");
  write_gzip(inner, idx_bytes({4}, iota_bytes(4)));
  std::string path = dir.file("twice.gz");
  write_gzip(path, read_all(inner));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "bad magic", "0x1f 0x8b", "gzip-compressed twice"}));
}

TEST(Idx, EmptyFileIsTruncatedHeader) {
  ScratchDir dir;
  std::string path = dir.file("empty");
  write_plain(path, "");
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "truncated header", "expected 4 magic bytes, found 0"}));
}

TEST(Idx, UnsupportedTypeNamesTypeCode) {
  ScratchDir dir;
  std::string path = dir.file("floats.gz");
  write_gzip(path, idx_bytes({1}, {0, 0, 0x80, 0x3f}, 0x0D));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "unsupported IDX element type 0x0d", "float32", "0x08"}));
}

TEST(Idx, UnknownTypeNamesTypeCode) {
  ScratchDir dir;
  std::string path = dir.file("weird");
  write_plain(path, idx_bytes({1}, {0}, 0x42));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "unsupported IDX element type 0x42", "unknown"}));
}

TEST(Idx, ZeroDimensionsNamesPath) {
  ScratchDir dir;
  std::string path = dir.file("scalar.gz");
  write_gzip(path, idx_bytes({}, {7}));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "declares 0 dimensions", "expected 1 to 4"}));
}

TEST(Idx, TooManyDimensionsNamesPath) {
  ScratchDir dir;
  std::string path = dir.file("5d.gz");
  write_gzip(path, idx_bytes({1, 1, 1, 1, 1}, {7}));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "declares 5 dimensions", "expected 1 to 4"}));
}

TEST(Idx, TruncatedDimensionsNamesPathAndByteCounts) {
  ScratchDir dir;
  std::string path = dir.file("shortdims");
  std::string bytes = idx_bytes({10, 28, 28}, {});
  bytes.resize(4 + 6);  // the magic and 6 of the 12 dimension bytes
  write_plain(path, bytes);
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "truncated header", "need 12 bytes", "found 6"}));
}

TEST(Idx, TooManyElementsNamesPathAndDimensions) {
  ScratchDir dir;
  std::string path = dir.file("huge.gz");
  write_gzip(path, idx_bytes({65536, 32769}, {}));  // 2^31 + 2^16 elements
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "[65536,32769]", "2147549184 elements", "2147483648"}));
}

TEST(Idx, OverflowingElementCountNamesPathAndDimensions) {
  ScratchDir dir;
  std::string path = dir.file("overflow.gz");
  write_gzip(path, idx_bytes({0xffffffffu, 0xffffffffu, 0xffffffffu, 2}, {}));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "[4294967295,4294967295,4294967295,2]", "overflows"}));
}

TEST(Idx, ExactlyTheElementLimitIsAcceptedUntilTheBodyIsShort) {
  // 2^31 elements is allowed; the file just does not hold them. The reader
  // must not allocate the claimed size up front for this to be cheap.
  ScratchDir dir;
  std::string path = dir.file("limit.gz");
  write_gzip(path, idx_bytes({32768, 65536}, iota_bytes(100)));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "truncated body", "need 2147483648 bytes", "found 100"}));
}

TEST(Idx, TruncatedBodyNamesPathAndByteCounts) {
  ScratchDir dir;
  std::string path = dir.file("short.gz");
  write_gzip(path, idx_bytes({3, 28, 28}, iota_bytes(2 * 28 * 28 + 5)));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(
      contains_all(msg, {path, "truncated body", "[3,28,28]", "need 2352 bytes", "found 1573"}));
  // A well-formed gzip file holding too little data is not a gzip problem.
  EXPECT_EQ(msg.find("cut off"), std::string::npos) << msg;
}

TEST(Idx, TruncatedPlainBodyNamesPathAndByteCounts) {
  ScratchDir dir;
  std::string path = dir.file("short");
  write_plain(path, idx_bytes({10}, iota_bytes(9)));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "truncated body", "need 10 bytes", "found 9"}));
}

TEST(Idx, TrailingGarbageNamesPathAndExtraBytes) {
  ScratchDir dir;
  std::string path = dir.file("long.gz");
  write_gzip(path, idx_bytes({10}, iota_bytes(13)));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "trailing garbage", "3 extra bytes", "10-byte body"}));
}

TEST(Idx, TrailingGarbageInPlainFileNamesPath) {
  ScratchDir dir;
  std::string path = dir.file("long");
  write_plain(path, idx_bytes({2, 2}, iota_bytes(5)));
  std::string msg = error_message([&] { read_idx(path); });
  EXPECT_TRUE(contains_all(msg, {path, "trailing garbage", "1 extra byte after"}));
}

}  // namespace
}  // namespace ws::data
