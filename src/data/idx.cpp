// Reading IDX files (the format of MNIST and Fashion-MNIST), gzip-compressed
// or not: zlib's gzread passes uncompressed files through unchanged.
//
// Layout: two zero bytes, an element-type byte, a dimension-count byte, one
// big-endian uint32 per dimension, then the elements in row-major order.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wholestep/data.hpp"
#include "wholestep/error.hpp"

namespace ws::data {
namespace {

constexpr int kMaxDims = 4;
constexpr uint64_t kMaxElements = uint64_t{1} << 31;
constexpr uint8_t kTypeUnsignedByte = 0x08;
// Read in pieces so a header that claims a huge body cannot make us allocate
// more than the file actually holds, and so each gzread length fits an int.
constexpr size_t kChunk = size_t{1} << 20;

const char* idx_type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return nullptr;
  }
}

std::string bytes_str(const uint8_t* b, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}0x{:02x}", i ? " " : "", b[i]);
  return s;
}

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw Error(fmt::format("read_idx: {}: {}", path, problem));
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// A gzFile that reports zlib errors as ws::Error naming the path.
class GzReader {
 public:
  GzReader(const std::string& path, const std::string& package) : path_(path) {
    std::error_code ec;
    auto status = std::filesystem::status(path, ec);
    if (status.type() == std::filesystem::file_type::not_found) missing(package);
    if (status.type() == std::filesystem::file_type::directory)
      fail(path_, "is a directory, not an IDX file");
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) {
      if (errno == ENOENT || errno == ENOTDIR) missing(package);
      fail(path_,
           fmt::format("cannot open: {}", errno ? std::strerror(errno) : "out of memory in zlib"));
    }
    gzbuffer(file_.get(), 1 << 17);
  }

  // Reads up to `n` bytes, fewer only at the end of the data. A zlib error
  // (corrupt gzip data, an I/O error) throws.
  size_t read(void* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
      unsigned want = unsigned(std::min(n - got, kChunk));
      int r = gzread(file_.get(), static_cast<char*>(buf) + got, want);
      if (r < 0) corrupt();
      if (r == 0) break;
      got += size_t(r);
    }
    return got;
  }

  // After a short read: a note when the file is a gzip stream cut off in the
  // middle (so the data did not simply end), else "".
  std::string short_read_note() const {
    int errnum = Z_OK;
    gzerror(file_.get(), &errnum);
    return errnum == Z_BUF_ERROR ? " (the gzip data is cut off: unexpected end of file)" : "";
  }

  // Raises an error if the compressed stream ended early (no trailer).
  void check_complete() const {
    int errnum = Z_OK;
    gzerror(file_.get(), &errnum);
    if (errnum == Z_BUF_ERROR)
      fail(path_, "corrupt gzip file: the compressed data is cut off (unexpected end of file)");
  }

 private:
  [[noreturn]] void missing(const std::string& package) const {
    if (package.empty()) fail(path_, "no such file");
    fail(path_, fmt::format("no such file; install the Debian package {} (apt-get install {})",
                            package, package));
  }

  [[noreturn]] void corrupt() const {
    int errnum = Z_OK;
    const char* msg = gzerror(file_.get(), &errnum);
    if (errnum == Z_ERRNO) fail(path_, fmt::format("read error: {}", std::strerror(errno)));
    // zlib's message starts with "<path>: "; the path is already in ours.
    std::string detail = msg && *msg ? msg : "unknown error";
    if (detail.starts_with(path_ + ": ")) detail.erase(0, path_.size() + 2);
    fail(path_, fmt::format("corrupt gzip file (zlib: {})", detail));
  }

  std::string path_;
  std::unique_ptr<gzFile_s, GzCloser> file_;
};

}  // namespace

IdxArray read_idx(const std::string& path, const std::string& package) {
  GzReader in(path, package);

  uint8_t magic[4];
  size_t got = in.read(magic, sizeof magic);
  if (got < sizeof magic) {
    fail(path, fmt::format("truncated header: expected 4 magic bytes, found {}{}", got,
                           in.short_read_note()));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    std::string hint = magic[0] == 0x1f && magic[1] == 0x8b ? " (gzip-compressed twice?)" : "";
    fail(path,
         fmt::format("bad magic: expected 0x00 0x00 <type> <dims>, found {}{}; not an IDX file",
                     bytes_str(magic, 4), hint));
  }
  uint8_t type = magic[2];
  if (type != kTypeUnsignedByte) {
    const char* name = idx_type_name(type);
    fail(path, fmt::format("unsupported IDX element type 0x{:02x}{}; only 0x08 (unsigned byte) is "
                           "supported",
                           type, name ? fmt::format(" ({})", name) : std::string(" (unknown)")));
  }
  int ndims = magic[3];
  if (ndims == 0 || ndims > kMaxDims) {
    fail(path, fmt::format("the header declares {} dimensions; expected 1 to {}", ndims, kMaxDims));
  }

  uint8_t raw[4 * kMaxDims];
  size_t dims_bytes = 4 * size_t(ndims);
  got = in.read(raw, dims_bytes);
  if (got < dims_bytes) {
    fail(path, fmt::format("truncated header: {} dimensions need {} bytes of sizes, found {}{}",
                           ndims, dims_bytes, got, in.short_read_note()));
  }
  IdxArray out;
  bool has_zero = false;
  for (int d = 0; d < ndims; ++d) {
    const uint8_t* b = raw + 4 * d;
    uint32_t v = uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
    out.dims.push_back(int64_t(v));
    has_zero |= v == 0;
  }
  uint64_t count = has_zero ? 0 : 1;  // a zero dimension makes the others irrelevant
  for (size_t i = 0; i < out.dims.size() && count != 0; ++i) {
    uint64_t d = uint64_t(out.dims[i]);
    if (count > std::numeric_limits<uint64_t>::max() / d) {
      fail(path, fmt::format("dimensions {}: the element count overflows; at most {} elements are "
                             "supported",
                             shape_str(out.dims), kMaxElements));
    }
    count *= d;
  }
  if (count > kMaxElements) {
    fail(path, fmt::format("dimensions {} give {} elements; at most {} are supported",
                           shape_str(out.dims), count, kMaxElements));
  }

  // Grow as data arrives, so a lying header on a short file stays cheap.
  size_t want = size_t(count);
  size_t have = 0;
  while (have < want) {
    size_t step = std::min(want - have, kChunk);
    out.values.resize(have + step);
    size_t r = in.read(out.values.data() + have, step);
    have += r;
    if (r < step) break;
  }
  if (have < want) {
    fail(path, fmt::format("truncated body: dimensions {} need {} bytes, found {}{}",
                           shape_str(out.dims), want, have, in.short_read_note()));
  }

  // Reading to the end also makes zlib verify the gzip checksum.
  uint64_t extra = 0;
  std::vector<uint8_t> scratch(4096);
  while (size_t r = in.read(scratch.data(), scratch.size())) extra += r;
  if (extra > 0) {
    fail(path,
         fmt::format("trailing garbage: {} extra byte{} after the {}-byte body of dimensions {}",
                     extra, extra == 1 ? "" : "s", want, shape_str(out.dims)));
  }
  in.check_complete();
  return out;
}

}  // namespace ws::data
