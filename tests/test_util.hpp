// Helpers shared by tests.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

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
