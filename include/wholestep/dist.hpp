// The process group of data-parallel training: this process's rank among the
// processes an MPI launcher (`mpirun -np 2 ...`) started. A data-parallel
// step (StepOptions::data_parallel) reduces its gradients over it, inside
// the step graph. Without MPI (a build without Open MPI, or a process not
// started by a launcher) the group is this process alone.
#pragma once

#include <string>

#include "wholestep/error.hpp"

namespace ws::dist {

// An error every rank of the group raises alike, found by a collective (a
// data-parallel step whose ranks traced different graphs): it is thrown on
// every rank, not turned into an abort, since no rank waits for another.
class GroupError : public Error {
 public:
  using Error::Error;
};

// Whether this build of wholestep has MPI (Open MPI's libopenmpi-dev when it
// was configured).
bool built_with_mpi();

// How many processes the launcher started this one among, from the
// launcher's environment (Open MPI's OMPI_COMM_WORLD_SIZE, PMI_SIZE); 1 when
// it was not started by a launcher. Known before init().
int launched_world_size();

// How a collective in flight moves while the step computes. MPI moves a
// non-blocking collective's data only inside MPI calls on this process
// (Open MPI over TCP or shared memory has no progress thread of its own):
enum class Progress {
  // The step tests the collectives in flight between its kernels (the
  // default): a test costs well under a microsecond, and a reduction
  // advances at least once per kernel.
  kernels,
  // Only waiting moves them: a reduction hardly advances before the step
  // waits for it (for comparison).
  wait,
  // A thread of its own tests them every 50 microseconds while any is in
  // flight, sleeping between tests (MPI initialized for several threads).
  thread,
};
// Chooses how, for every step of the process; `thread` before init() (or
// after an init() that chose it).
void set_progress(Progress p);
Progress progress_mode();
const char* progress_name(Progress p);

// Joins the process group (initializes MPI, once per process; later calls
// do nothing). Throws ws::Error when this build has no MPI and the launcher
// started more than one process. A process started alone, or a build
// without MPI, is a group of one.
void init();
bool initialized();

int rank();        // 0 before init()
int world_size();  // 1 before init()

// "rank R of W" for messages; "" in a group of one.
std::string rank_label();

// Ends every process of the job: prints `message` on stderr, prefixed with
// this rank, then aborts the job (MPI_Abort: the launcher stops every rank
// within seconds) with exit status `code`. In a group of one, prints and
// exits. Used where one rank fails while the others would wait forever in
// a collective.
[[noreturn]] void abort_job(const std::string& message, int code);

}  // namespace ws::dist
