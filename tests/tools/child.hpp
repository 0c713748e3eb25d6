// The built wholestep run in the background, for tests that signal it or run
// a second one beside it: started, waited for until a line shows it reached
// a phase, signalled, and reaped with its exit status and how long it took.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "cli_run.hpp"

namespace ws::testing {

class Child {
 public:
  // Runs `WS_CLI args` with `env` (assignments) in its environment, its
  // stdout and stderr into files under `dir` named `name`.out and .err.
  Child(const std::string& args, const std::string& dir, const std::string& name = "child",
        const std::string& env = "")
      : out_(dir + "/" + name + ".out"), err_(dir + "/" + name + ".err") {
    const std::string cmd =
        fmt::format("exec env {} {} {} > {} 2> {}", env, WS_CLI, args, out_, err_);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  std::string out() const { return slurp(out_); }
  std::string err() const { return slurp(err_); }

  // Waits (up to `limit`) until stdout holds `marker`; false if it never
  // did or the program ended first.
  bool wait_for(const std::string& marker, std::chrono::seconds limit = std::chrono::seconds(120)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (out().find(marker) != std::string::npos) return true;
      if (::waitpid(pid_, &status_, WNOHANG) == pid_) {
        reaped_ = true;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Sends `sig` and waits for the program to end: its exit status (-1 if a
  // signal ended it) and the seconds from the signal to its end.
  struct Ended {
    int status = -1;
    double seconds = 0;
  };
  Ended signal_and_wait(int sig) {
    const auto t0 = std::chrono::steady_clock::now();
    ::kill(pid_, sig);
    return finish(t0);
  }
  Ended wait() { return finish(std::chrono::steady_clock::now()); }

 private:
  Ended finish(std::chrono::steady_clock::time_point t0) {
    if (!reaped_) ::waitpid(pid_, &status_, 0);
    reaped_ = true;
    return {WIFEXITED(status_) ? WEXITSTATUS(status_) : -1,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  }

  std::string out_, err_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

}  // namespace ws::testing
