// Helpers shared by tests.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "ir/text.hpp"
#include "wholestep/error.hpp"

namespace ws::testing {

// Runs `f`, expects a ws::Error, and returns its message.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ws::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ws::Error";
  return "";
}

// Whether `s` contains `sub`; the failure shows both.
inline ::testing::AssertionResult Contains(const std::string& s, const std::string& sub) {
  if (s.find(sub) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << sub << "' not found in: " << s;
}

// A fresh empty directory under the system's temporary directory, named
// after `name` and this process, and removed with everything in it when the
// process that made it exits (a child forked from it removes nothing).
inline std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  struct Made {
    pid_t owner = ::getpid();
    std::set<fs::path> dirs;
    ~Made() {
      if (::getpid() != owner) return;
      std::error_code ec;
      for (const fs::path& d : dirs) fs::remove_all(d, ec);
    }
  };
  static Made made;
  const fs::path p = fs::temp_directory_path() / fmt::format("ws_{}_{}", name, ::getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  made.dirs.insert(p);
  return p.string();
}

// The bytes of a vector's elements.
template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Print -> parse -> print is exact.
inline void expect_round_trip(const ir::Graph& g) {
  std::string text = ir::print(g);
  EXPECT_EQ(ir::print(ir::parse(text)), text);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Compares `text` with the golden file beside the test. With
// WS_UPDATE_GOLDEN=1 the file is rewritten instead.
inline void expect_golden(const std::string& text, const std::string& file) {
  const std::string path = std::string(WS_TEST_DIR) + "/" + file;
  if (const char* u = std::getenv("WS_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path) << text;
    return;
  }
  EXPECT_EQ(text, read_file(path))
      << "golden file " << path << " differs (WS_UPDATE_GOLDEN=1 rewrites it)";
}

}  // namespace ws::testing
