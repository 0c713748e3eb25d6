#include "stop.hpp"

#include <semaphore.h>
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
sem_t g_wake;  // posted by the handler: the watchdog's turn

// What the watchdog reads; changed by the command's thread.
std::mutex g_mutex;
std::string g_phase = "starting", g_left = "nothing saved";
bool g_cooperative = false, g_claimed = false;
int g_saving = 0;

// Set in a data-parallel job of several ranks (stop_by_agreement), and the
// signal the ranks agreed on; used by the command's thread only.
int (*g_agree)(int) = nullptr;
int g_agreed = 0;

// The second signal's line, made before any signal can come (the handler
// writes it with write(2), which is async-signal-safe; formatting is not).
char g_again[2][96];

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

void on_signal(int sig) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig)) {
    const char* line = g_again[sig == SIGINT ? 0 : 1];
    const ssize_t n = ::write(STDERR_FILENO, line, std::strlen(line));
    (void)n;
    ::_exit(128 + sig);
  }
  ::sem_post(&g_wake);
}

// Called with g_mutex held: the line, then the exit, with nothing more
// written.
[[noreturn]] void end_now(int sig, const std::string& why) {
  write_stderr(
      fmt::format("stopped by {} while {}{}; {}\n", signal_name(sig), g_phase, why, g_left));
  ::_exit(128 + sig);
}

void watchdog() {
  while (::sem_wait(&g_wake) != 0) {
  }
  const int sig = g_signal.load();
  const double grace = grace_seconds();
  const auto tick = std::chrono::milliseconds(20);
  double waited = 0;
  for (;;) {
    {
      std::lock_guard<std::mutex> guard(g_mutex);
      if (g_claimed) return;
      if (!g_cooperative) end_now(sig, "");
      if (g_saving == 0 && waited >= grace)
        end_now(sig, fmt::format(" (no point to stop at within {} s)", grace));
      if (g_saving == 0) waited += std::chrono::duration<double>(tick).count();
    }
    std::this_thread::sleep_for(tick);
  }
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
  for (int i = 0; i < 2; ++i)
    fmt::format_to_n(g_again[i], sizeof g_again[i] - 1, "stopped by {} again: exiting at once\n",
                     i == 0 ? "SIGINT" : "SIGTERM");
  ::sem_init(&g_wake, 0, 0);
  std::thread(watchdog).detach();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
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
