// What every fuzz target shares: the input as a file (the readers take
// paths), and the one kind of failure bad input may cause.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace ws::fuzz {

// A file of this process's own, named after `what`, removed when the process
// exits.
struct OwnFile {
  explicit OwnFile(const std::string& what)
      : path("/tmp/ws_fuzz_" + what + "_" + std::to_string(::getpid())) {}
  ~OwnFile() { std::remove(path.c_str()); }
  OwnFile(const OwnFile&) = delete;
  OwnFile& operator=(const OwnFile&) = delete;
  const std::string path;
};

// The input written to a file of this process's own, rewritten per input.
inline std::string as_file(const uint8_t* data, size_t size) {
  static const OwnFile input("input");
  const std::string& path = input.path;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

}  // namespace ws::fuzz
