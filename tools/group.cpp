#include "group.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "dist/collectives.hpp"
#include "stop.hpp"
#include "wholestep/dist.hpp"

namespace cli {
namespace {

// stop_by_agreement's collective: a signal some rank received, or 0.
int agreed_signal(int own) {
  for (uint64_t sig : ws::dist::all_gather(uint64_t(own)))
    if (sig) return int(sig);
  return 0;
}

}  // namespace

void join_process_group(const CLI::App* command, const Common& c) {
  const int launched = ws::dist::launched_world_size();
  if (!command->get_option_no_throw("--data-parallel")) {
    if (launched > 1)
      throw UsageError(fmt::format(
          "this process is one of {} that mpirun started, but `wholestep {}` runs in one "
          "process: run it without mpirun (the commands that compile a step take "
          "--data-parallel)",
          launched, command->get_name()));
    return;
  }
  if (!c.step.data_parallel) {
    if (launched > 1)
      throw UsageError(fmt::format(
          "this process is one of {} that mpirun started, but --data-parallel is not given: "
          "each would train alone on the same data; add --data-parallel (or run one process)",
          launched));
    return;
  }
  if (launched > 1 && !ws::dist::built_with_mpi())
    throw UsageError(fmt::format(
        "--data-parallel: this process is one of {} that mpirun started, but this build of "
        "wholestep has no MPI: install Open MPI (libopenmpi-dev, openmpi-bin) and build again, "
        "or run one process",
        launched));
  for (ws::dist::Progress p :
       {ws::dist::Progress::kernels, ws::dist::Progress::thread, ws::dist::Progress::wait})
    if (c.comm_progress == ws::dist::progress_name(p)) ws::dist::set_progress(p);
  ws::dist::init();
  if (ws::dist::world_size() > 1) stop_by_agreement(agreed_signal);
}

bool leads() { return ws::dist::rank() == 0; }

void agree(const std::function<void()>& checks) {
  if (ws::dist::world_size() == 1) return checks();
  std::string mine;
  try {
    checks();
  } catch (const UsageError& e) {
    mine = *e.what() ? e.what() : "a usage error";
  }
  const std::vector<std::string> all = ws::dist::all_gather_text(mine);
  std::vector<size_t> failed;
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) failed.push_back(r);
  if (failed.empty()) return;
  std::string text;
  if (failed.size() == all.size() &&
      std::all_of(all.begin(), all.end(), [&](const std::string& e) { return e == all[0]; })) {
    text = all[0];
  } else {
    for (size_t r : failed)
      text += fmt::format("{}rank {} of {}: {}", text.empty() ? "" : "\nerror: ", r, all.size(),
                          all[r]);
  }
  throw AgreedUsageError(text, !leads());
}

void quiet_other_ranks() {
  if (leads()) return;
  std::fflush(stdout);
  const int fd = ::open("/dev/null", O_WRONLY);
  if (fd < 0) return;
  ::dup2(fd, STDOUT_FILENO);
  ::close(fd);
}

std::string batch_text(int64_t per_rank) {
  if (!ws::dist::initialized()) return std::to_string(per_rank);
  const int w = ws::dist::world_size();
  return fmt::format("{} ({} rank{} x {})", per_rank * w, w, w == 1 ? "" : "s", per_rank);
}

int fail(const std::string& text, int status, bool alike) {
  if (ws::dist::world_size() > 1 && !alike) {
    std::fflush(stdout);  // what rank 0 printed before, kept
    ws::dist::abort_job(text, status);
  }
  if (leads()) fmt::print(stderr, "{}\n", text);
  return status;
}

}  // namespace cli
