// The command line in a data-parallel job (`mpirun -np 2 wholestep train
// --data-parallel ...`): the launch checked against the flags, the process
// group joined, the checks agreed on by every rank, rank 0 alone printing
// and writing files, and an error on one rank ending the whole job.
//
// Why agreement: a rank that stops while the others are inside a collective
// leaves them waiting forever (even its exit waits for them, in
// MPI_Finalize). So the checks made before any work end in one collective,
// after which every rank goes on or every rank stops with the same usage
// error; a stop asked by a signal is agreed on between steps; and any other
// error on one rank ends the job (dist::abort_job) rather than its process.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "options.hpp"

namespace cli {

// Before any other check: launched by mpirun as one of several processes,
// a command must take --data-parallel (every command that compiles a step)
// and be given it. --data-parallel joins the process group (without mpirun, a
// group of one). A UsageError otherwise, the same on every rank.
void join_process_group(const CLI::App* command, const Common& c);

// Whether this process prints results and writes files: rank 0, or a
// process alone.
bool leads();

// A usage error found by the checks of one rank or more (agree below),
// thrown on every rank alike: each exits with status 2, and only rank 0
// prints it (quiet() on the others).
class AgreedUsageError : public UsageError {
 public:
  AgreedUsageError(const std::string& message, bool quiet) : UsageError(message), quiet_(quiet) {}
  bool quiet() const { return quiet_; }

 private:
  bool quiet_;
};

// Runs `checks` (which makes no collective), then, in a group of several
// ranks, agrees: when any rank's checks threw a UsageError, every rank
// throws an AgreedUsageError naming the ranks that failed and why (one
// line, without rank, when every rank failed alike). In a group of one, a
// UsageError passes through as it is.
void agree(const std::function<void()>& checks);

// After the checks: the stdout of every rank but 0 goes to /dev/null (their
// errors still reach stderr).
void quiet_other_ranks();

// The global batch as the lines of a run print it: "128", or "256 (2 ranks
// x 128)" in a data-parallel run.
std::string batch_text(int64_t per_rank);

// Every failure of a command: `text` ("error: ...") on stderr and the exit
// status `status`. In a group of several ranks, an error of this rank alone
// (`alike` false) ends the job (dist::abort_job, naming the rank); one every
// rank raised alike is printed by rank 0 only and returned.
int fail(const std::string& text, int status, bool alike);

}  // namespace cli
