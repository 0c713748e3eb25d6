// Running programs from a test, the built wholestep above all: the exit
// status and what was written, the shape every usage error must have, and
// checkpoints compared to the bit.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace ws::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Result {
  int status = -1;
  std::string out, err;
};

// Runs a shell command line, capturing its exit status, stdout and stderr.
inline Result run_command(const std::string& command) {
  const std::string dir = temp_dir("run");
  const std::string cmd = fmt::format("{} > {}/out 2> {}/err", command, dir, dir);
  const int st = std::system(cmd.c_str());
  Result r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(dir + "/out"), slurp(dir + "/err")};
  std::filesystem::remove_all(dir);
  return r;
}

// Runs the wholestep binary with `args` (a shell word list), and `env`
// (assignments such as "PATH=/x") in its environment.
inline Result run(const std::string& args, const std::string& env = "") {
  return run_command(fmt::format("{} {} {}", env, WS_CLI, args));
}

// A usage error: exit status 2, `message` in one line on stderr, and no
// work started.
inline void expect_usage_error(const std::string& args, const std::string& message) {
  SCOPED_TRACE(args);
  const Result r = run(args);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "work started: " << r.out;
}

// Fashion-MNIST IDX files (uncompressed; the reader takes both) holding n
// all-zero examples of class 0, in `dir`.
inline void write_fashion_mnist(const std::string& dir, int n) {
  auto idx = [](const std::vector<int32_t>& dims, uint8_t type_dims) {
    std::string b = {0, 0, 8, char(type_dims)};
    for (int32_t d : dims)
      for (int s = 24; s >= 0; s -= 8) b.push_back(char((d >> s) & 0xff));
    int64_t count = 1;
    for (int32_t d : dims) count *= d;
    b.append(size_t(count), '\0');
    return b;
  };
  for (const char* split : {"train", "t10k"}) {
    std::ofstream(fmt::format("{}/{}-images-idx3-ubyte.gz", dir, split), std::ios::binary)
        << idx({n, 28, 28}, 3);
    std::ofstream(fmt::format("{}/{}-labels-idx1-ubyte.gz", dir, split), std::ios::binary)
        << idx({n}, 1);
  }
}

// Two checkpoint directories hold the same parameters and optimizer state,
// to the bit.
inline void expect_same_checkpoint(const std::string& a, const std::string& b) {
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string x = slurp(a + "/" + file), y = slurp(b + "/" + file);
    EXPECT_FALSE(x.empty()) << a << "/" << file;
    EXPECT_TRUE(x == y) << file << " differs between " << a << " and " << b;
  }
}

}  // namespace ws::testing
