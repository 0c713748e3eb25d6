// The one OpenMP pool that runs our loops and oneDNN's primitives, and the
// team a step asks it for.
//
// oneDNN sizes a primitive's work split when the primitive is made, for the
// team OpenMP would give then, and its kernels assume they get exactly that
// team: given fewer threads they skip the missing threads' share (wrong
// results) or wait for them at a barrier (a hang). OpenMP gives fewer
// threads than asked when its dynamic adjustment is on (OMP_DYNAMIC), under
// a lower thread limit (OMP_THREAD_LIMIT), when no parallel level may be
// active (OMP_MAX_ACTIVE_LEVELS=0), or inside another parallel region. So
// the thread count is capped at the thread limit when it is set, and every
// entry into the backend pins the calling thread's settings (pin_team):
// whatever the environment says, a region gets the team asked for. Our own
// loops read the team they got and never assume one.
#pragma once

#include <string>

namespace ws::exec {

// Threads for everything a step runs; n <= 0 means every core this process
// may run on (its CPU affinity, and its cgroup's CPU quota when one is set).
// Capped at OpenMP's thread limit.
void set_num_threads(int n);
int num_threads();

// Why num_threads() is what it is, for the info lines: "" when it is what
// was asked, else e.g. "OMP_THREAD_LIMIT caps the 4 asked".
const std::string& threads_note();

// The threads the parallel regions of a step use now: num_threads(), or 1
// while running on one thread measures faster (other processes hold the
// cores; TeamChooser decides). Every result is the same bits either way.
int team();
// Sets team(), clamped to [1, num_threads()].
void set_team(int n);

// team() set to `n` for a scope (the one-thread twins of oneDNN primitives
// are made in one), restored after.
class TeamScope {
 public:
  explicit TeamScope(int n);
  ~TeamScope();
  TeamScope(const TeamScope&) = delete;
  TeamScope& operator=(const TeamScope&) = delete;

 private:
  int saved_;
};

// Makes the calling thread's OpenMP settings give a parallel region exactly
// team() threads: dynamic adjustment off, one active level allowed, the
// count set. A few loads when nothing has to change; call it before making
// or running a oneDNN primitive.
void pin_team();

// The calling thread's OpenMP thread count, restored on exit. An entry point
// other than a step (a floor, a profile) pins the team it runs on and would
// leave the runtime's count at it, one thread when the team chooser has
// chosen one; torch reads that count as its own, and wholestep.torch takes a
// changed count for the user's torch.set_num_threads (a benchmark's eager
// side and every later step then ran on one thread).
class OpenMpCountKept {
 public:
  OpenMpCountKept();
  ~OpenMpCountKept();
  OpenMpCountKept(const OpenMpCountKept&) = delete;
  OpenMpCountKept& operator=(const OpenMpCountKept&) = delete;

 private:
  int saved_;
};

// Throws ws::Error when called inside an active OpenMP parallel region: a
// step's primitives were made for a team of their own and would run on one
// thread there, skipping work.
void require_outside_parallel(const char* what);

}  // namespace ws::exec
