#include "io/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "wholestep/error.hpp"

namespace ws::io {
namespace {

std::string why() { return std::strerror(errno); }

// Writes all of `parts` to fd (retrying short writes), then fsyncs it.
void write_all(int fd, const std::string& path, std::span<const std::span<const std::byte>> parts) {
  for (std::span<const std::byte> part : parts) {
    const std::byte* p = part.data();
    size_t left = part.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(fmt::format("cannot write {}: {}", path, why()));
      p += n;
      left -= size_t(n);
    }
  }
  if (::fsync(fd) != 0) throw Error(fmt::format("cannot sync {}: {}", path, why()));
}

}  // namespace

std::string parent_directory(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot open directory {}: {}", dir, why()));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error(fmt::format("cannot sync directory {}: {}", dir, std::strerror(err)));
}

void write_new_file(const std::string& path, std::span<const std::span<const std::byte>> parts) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("cannot create {}: {}", path, why()));
  try {
    write_all(fd, path, parts);
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  if (::close(fd) != 0) throw Error(fmt::format("cannot write {}: {}", path, why()));
}

void write_file_atomically(const std::string& path,
                           std::span<const std::span<const std::byte>> parts) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  ::unlink(tmp.c_str());  // left by a crashed writer of this process id
  write_new_file(tmp, parts);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = why();
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot rename {} to {}: {}", tmp, path, err));
  }
  sync_directory(parent_directory(path));
}

std::vector<std::byte> read_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(fmt::format("{}: {} is not a file{}", what, path,
                            std::filesystem::exists(path, ec) ? "" : " (it does not exist)"));
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(fmt::format("{}: cannot open {}: {}", what, path, why()));
  const std::streamsize size = in.tellg();
  if (size < 0) throw Error(fmt::format("{}: cannot read {}", what, path));
  std::vector<std::byte> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size))
    throw Error(fmt::format("{}: cannot read {}", what, path));
  return bytes;
}

}  // namespace ws::io
