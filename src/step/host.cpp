// What a step runs on: the thread pool it shares with oneDNN, and each
// backend's CPU and instruction set.
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "exec/dnnl_backend.hpp"
#include "exec/kernels.hpp"
#include "exec/threads.hpp"
#include "wholestep/step.hpp"

namespace ws {

void set_num_threads(int n) { exec::set_num_threads(n); }
int num_threads() { return exec::num_threads(); }

std::string backend_info() {
  std::string cpu = "unknown CPU";
  if (std::FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "model name", 10) == 0) {
        const char* v = std::strchr(line, ':');
        cpu = v ? std::string(v + 2) : cpu;
        if (!cpu.empty() && cpu.back() == '\n') cpu.pop_back();
        break;
      }
    std::fclose(f);
  }
  return fmt::format(
      "cpu: {}\nthreads: {} (one OpenMP pool for oneDNN and our loops{})\n"
      "matrix products and convolutions: {}\nloop kernels: {}\n",
      cpu, exec::num_threads(), exec::threads_note().empty() ? "" : "; " + exec::threads_note(),
      exec::backend_isa(), exec::loop_isa());
}

}  // namespace ws
