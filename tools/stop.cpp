#include "stop.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace cli {
namespace {

std::atomic<int> g_signal{0};

// What the watchdog reads; changed by the command's thread.
std::mutex g_mutex;
std::string g_phase = "starting", g_left = "nothing saved";
bool g_cooperative = false, g_claimed = false;
int g_saving = 0;

// Set in a data-parallel job of several ranks (stop_by_agreement), and the
// signal the ranks agreed on; used by the command's thread only.
int (*g_agree)(int) = nullptr;
int g_agreed = 0;

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

double grace_seconds() {
  const char* env = std::getenv("WHOLESTEP_STOP_GRACE");
  if (!env || !*env) return 2.0;
  char* end = nullptr;
  const double s = std::strtod(env, &end);
  return *end == '\0' && s >= 0 && s < 1e6 ? s : 2.0;
}

void write_stderr(const std::string& line) {
  for (size_t at = 0; at < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + at, line.size() - at);
    if (n <= 0) break;
    at += size_t(n);
  }
}

// A second signal: its line, and the exit, at once.
[[noreturn]] void end_again(int sig) {
  write_stderr(fmt::format("stopped by {} again: exiting at once\n", signal_name(sig)));
  ::_exit(128 + sig);
}

// Called with g_mutex held: the line, then the exit, with nothing more
// written.
[[noreturn]] void end_now(int sig, const std::string& why) {
  write_stderr(
      fmt::format("stopped by {} while {}{}; {}\n", signal_name(sig), g_phase, why, g_left));
  ::_exit(128 + sig);
}

// The only thread that receives SIGINT and SIGTERM: every other thread
// blocks them (install_stop_handlers), so no handler ever interrupts the
// command's thread or a worker inside a kernel or a system call.
void watchdog() {
  const sigset_t signals = stop_signals();
  int sig;
  while ((sig = ::sigwaitinfo(&signals, nullptr)) < 0) {
  }
  g_signal.store(sig);
  const double grace = grace_seconds();
  const auto tick = std::chrono::milliseconds(20);
  double waited = 0;
  for (;;) {
    {
      std::lock_guard<std::mutex> guard(g_mutex);
      if (g_claimed) break;
      if (!g_cooperative) end_now(sig, "");
      if (g_saving == 0 && waited >= grace)
        end_now(sig, fmt::format(" (no point to stop at within {} s)", grace));
      if (g_saving == 0) waited += std::chrono::duration<double>(tick).count();
    }
    // The tick: a second signal while the command stops ends it at once.
    const timespec wait{0, std::chrono::nanoseconds(tick).count()};
    if (const int again = ::sigtimedwait(&signals, nullptr, &wait); again > 0) end_again(again);
  }
  // The command has claimed the stop: a second signal still ends it at once.
  for (;;)
    if (const int again = ::sigwaitinfo(&signals, nullptr); again > 0) end_again(again);
}

}  // namespace

const char* signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

void install_stop_handlers(const std::string& phase) {
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    g_phase = phase;
    g_left = "nothing to save";
  }
  // Blocked here, before any other thread starts (OpenMP's, MPI's): every
  // thread inherits the mask, and the signals wait for the watchdog.
  const sigset_t signals = stop_signals();
  ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread(watchdog).detach();
}

void stop_cooperatively() {
  std::lock_guard<std::mutex> guard(g_mutex);
  g_cooperative = true;
}

int stop_requested() { return g_signal.load(std::memory_order_relaxed); }

void set_phase(const std::string& phase) {
  std::lock_guard<std::mutex> guard(g_mutex);
  g_phase = phase;
}

void set_left_behind(const std::string& left) {
  std::lock_guard<std::mutex> guard(g_mutex);
  g_left = left;
}

SavingScope::SavingScope() {
  std::lock_guard<std::mutex> guard(g_mutex);
  ++g_saving;
}
SavingScope::~SavingScope() {
  std::lock_guard<std::mutex> guard(g_mutex);
  --g_saving;
}

int claim_stop() {
  std::lock_guard<std::mutex> guard(g_mutex);
  g_claimed = true;
  return g_signal.load() ? g_signal.load() : g_agreed;
}

bool stop_here() { return !g_agree && stop_requested(); }

void stop_point() {
  if (stop_here()) throw Interrupted{};
}

void stop_by_agreement(int (*agree)(int own)) { g_agree = agree; }

void agreed_stop_point() {
  if (!g_agree) return stop_point();
  g_agreed = g_agree(stop_requested());
  if (g_agreed) throw Interrupted{};
}

}  // namespace cli
