// One writer per directory of checkpoints (wholestep/checkpoint.hpp):
// flock(2) on a lock file inside it, and who holds it written in that file.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wholestep/checkpoint.hpp"

namespace ws {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kLockFile = ".wholestep.lock";

// The locks this process holds: a second lock of the same file from the
// same process would be refused by flock itself (each open file takes its
// own), so it is recognized here first.
struct Held {
  dev_t dev;
  ino_t ino;
  DirectoryLock::Mode mode;
  int fd;
};
std::mutex g_mutex;
std::vector<Held> g_held;

std::optional<DirectoryLock::Mode> held_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  std::lock_guard<std::mutex> guard(g_mutex);
  for (const Held& h : g_held)
    if (h.dev == st.st_dev && h.ino == st.st_ino) return h.mode;
  return std::nullopt;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

std::string local_time(std::time_t t) {
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char text[64];
  return std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S %Z", &tm) ? text : "";
}

// Who holds the lock of `fd` exclusively, as its line says; pid 0 when the
// file says nothing (readers hold it, or a writer has not written its line
// yet) or names a process of this host that no longer runs (a writer that
// died: the kernel released its lock, its line stayed).
struct Holder {
  int64_t pid = 0;
  std::string what, since;
};
Holder read_holder(int fd) {
  std::string text(4096, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  if (n <= 0) return {};
  text.resize(size_t(n));
  const json line = json::parse(text, nullptr, false);
  if (!line.is_object()) return {};
  Holder h;
  h.pid = line.value("pid", int64_t(0));
  h.what = line.value("holder", std::string());
  h.since = line.value("since", std::string());
  const std::string host = line.value("host", std::string());
  if (h.pid > 0 && host == host_name() && ::kill(pid_t(h.pid), 0) != 0 && errno == ESRCH) return {};
  return h;
}

// "process 12345 (wholestep train, since ...)".
std::string who_text(int64_t pid, const std::string& holder, const std::string& since) {
  if (pid == 0) return holder.empty() ? "another process" : holder;
  std::string about = holder;
  if (!since.empty()) about += (about.empty() ? "since " : ", since ") + since;
  return about.empty() ? fmt::format("process {}", pid)
                       : fmt::format("process {} ({})", pid, about);
}

}  // namespace

DirectoryInUse::DirectoryInUse(std::string dir, int64_t pid, std::string holder, std::string since,
                               bool to_read)
    : Error(fmt::format("the directory {} is {} {}", dir,
                        to_read ? "being written by" : "in use by", who_text(pid, holder, since))),
      dir_(std::move(dir)),
      pid_(pid),
      holder_(std::move(holder)),
      since_(std::move(since)) {}

std::string DirectoryInUse::who() const { return who_text(pid_, holder_, since_); }

std::string DirectoryLock::file(const std::string& dir) {
  return (fs::path(dir) / kLockFile).string();
}

std::optional<DirectoryLock::Mode> DirectoryLock::held(const std::string& dir) {
  return held_file(file(dir));
}

DirectoryLock::DirectoryLock(const std::string& dir, Mode mode, const std::string& holder,
                             std::chrono::milliseconds wait_for_readers)
    : dir_(dir), mode_(mode) {
  const std::string path = file(dir);
  const bool exclusive = mode == Mode::exclusive;
  if (const std::optional<Mode> mine = held_file(path)) {
    if (!exclusive) return;  // nested in this process's lock
    throw Error(fmt::format("the directory {} is locked by this process already ({} it)", dir,
                            *mine == Mode::exclusive ? "writing" : "reading"));
  }
  int fd = -1;
  if (exclusive) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw Error(fmt::format("cannot create {}: {}", dir, ec.message()));
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } else {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) return;  // no writer ever locked it
  }
  if (fd < 0) throw Error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  // A writer is refused at once; readers are waited for (a load is short),
  // and so is a writer that has locked but not yet written its line.
  const auto deadline =
      std::chrono::steady_clock::now() +
      (exclusive ? wait_for_readers
                 : std::chrono::milliseconds(std::min<int64_t>(wait_for_readers.count(), 1000)));
  for (;;) {
    if (::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0) break;
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EWOULDBLOCK) {
      ::close(fd);
      throw Error(fmt::format("cannot lock {}: {}", path, std::strerror(err)));
    }
    const Holder h = read_holder(fd);
    if (h.pid != 0) {
      ::close(fd);
      throw DirectoryInUse(dir, h.pid, h.what, h.since, !exclusive);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      throw DirectoryInUse(dir, 0, exclusive ? "processes reading it" : "", "", !exclusive);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (exclusive) {
    const json line = {
        {"pid", int64_t(::getpid())},
        {"holder", holder.empty() ? std::string(program_invocation_short_name) : holder},
        {"host", host_name()},
        {"since", local_time(std::time(nullptr))}};
    const std::string text = line.dump() + "\n";
    // Who holds it is only for messages: a failure to say so is no failure
    // to lock.
    if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, text.data(), text.size(), 0) < 0) {
    }
  }
  struct stat st {};
  ::fstat(fd, &st);
  fd_ = fd;
  std::lock_guard<std::mutex> guard(g_mutex);
  g_held.push_back({st.st_dev, st.st_ino, mode, fd});
}

void DirectoryLock::release() {
  if (fd_ < 0) return;
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    std::erase_if(g_held, [&](const Held& h) { return h.fd == fd_; });
  }
  if (mode_ == Mode::exclusive && ::ftruncate(fd_, 0) != 0) {
  }
  ::close(fd_);  // releases the flock
  fd_ = -1;
}

DirectoryLock::~DirectoryLock() { release(); }

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : dir_(std::move(other.dir_)), mode_(other.mode_), fd_(std::exchange(other.fd_, -1)) {}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    release();
    dir_ = std::move(other.dir_);
    mode_ = other.mode_;
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

std::string checkpoint_run_dir(const std::string& path) {
  fs::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  std::error_code ec;
  if (!fs::exists(p / "trainer_state.json", ec)) return p.string();
  const fs::path parent = p.parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace ws
