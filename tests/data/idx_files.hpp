// Test helpers for the data tests: a scratch directory, IDX files written
// plain or gzip-compressed, and checks on ws::Error messages.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>
#include <zlib.h>
#include "test_util.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "wholestep/error.hpp"

namespace ws::data::test_util {

// A fresh directory under the system temp dir, removed at destruction.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "ws_data_test_" + std::to_string(::getpid());
    if (info) name += std::string("_") + info->test_suite_name() + "_" + info->name();
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// The bytes of an IDX file: magic (0, 0, type, dims.size()), big-endian
// dimensions, then `body`.
inline std::string idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& body,
                             uint8_t type = 0x08) {
  std::string s;
  s += char(0);
  s += char(0);
  s += char(type);
  s += char(dims.size());
  for (uint32_t d : dims) {
    s += char(d >> 24);
    s += char(d >> 16);
    s += char(d >> 8);
    s += char(d);
  }
  s.append(body.begin(), body.end());
  return s;
}

inline void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot gzopen " + path);
  if (!bytes.empty() && gzwrite(f, bytes.data(), unsigned(bytes.size())) != int(bytes.size())) {
    gzclose(f);
    throw std::runtime_error("gzwrite failed on " + path);
  }
  if (gzclose(f) != Z_OK) throw std::runtime_error("gzclose failed on " + path);
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The message of the ws::Error that `f` throws; a test failure (and "") when
// it throws nothing. Other exception types propagate and fail the test.
template <class F>
std::string error_message(F&& f) {
  return ws::testing::error_of(std::forward<F>(f));
}

inline ::testing::AssertionResult contains_all(const std::string& msg,
                                               const std::vector<std::string>& parts) {
  for (const auto& p : parts) {
    if (msg.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ws::data::test_util
