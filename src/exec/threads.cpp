#include "exec/threads.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

int g_threads = 0;
int g_team = 0;
std::string g_note;

// The CPUs the cgroup v2 quota of this process allows (cpu.max "QUOTA
// PERIOD", rounded up), or 0 when there is none.
int cgroup_cpus() {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty()) return 0;
  std::ifstream max("/sys/fs/cgroup" + path + "/cpu.max");
  std::string quota;
  double period = 0;
  if (!(max >> quota >> period) || quota == "max" || period <= 0) return 0;
  try {
    return std::max(1, int(std::ceil(std::stod(quota) / period)));
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

void set_num_threads(int n) {
  const int asked = n;
  g_note.clear();
  if (n <= 0) {
    n = omp_get_num_procs();  // the CPUs of this process's affinity mask
    if (const int quota = cgroup_cpus(); quota > 0 && quota < n) {
      n = quota;
      g_note =
          fmt::format("the cgroup's CPU quota allows {} of {} cores", quota, omp_get_num_procs());
    }
  }
  if (const int limit = omp_get_thread_limit(); n > limit) {
    g_note = fmt::format("OMP_THREAD_LIMIT caps the {} asked", asked > 0 ? asked : n);
    n = limit;
  }
  g_threads = g_team = std::max(n, 1);
  pin_team();
}

int num_threads() {
  if (g_threads == 0) set_num_threads(0);
  return g_threads;
}

const std::string& threads_note() {
  num_threads();
  return g_note;
}

int team() {
  if (g_team == 0) set_num_threads(0);
  return g_team;
}

void set_team(int n) { g_team = std::clamp(n, 1, num_threads()); }

TeamScope::TeamScope(int n) : saved_(team()) {
  set_team(n);
  pin_team();
}

TeamScope::~TeamScope() {
  set_team(saved_);
  pin_team();
}

OpenMpCountKept::OpenMpCountKept() : saved_(omp_get_max_threads()) {}
OpenMpCountKept::~OpenMpCountKept() {
  if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
}

void pin_team() {
  const int n = team();
  if (omp_get_dynamic()) omp_set_dynamic(0);
  if (omp_get_max_active_levels() < 1) omp_set_max_active_levels(1);
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

void require_outside_parallel(const char* what) {
  if (omp_in_parallel())
    throw Error(fmt::format(
        "{} was called inside an OpenMP parallel region: a compiled step runs on threads of "
        "its own (ws::set_num_threads); call it from outside the region",
        what));
}

}  // namespace ws::exec
