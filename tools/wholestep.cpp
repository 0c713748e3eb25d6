// The wholestep command line: train a reference model, compare the modes,
// print the compiled graphs, run lowering passes over IR text. Each
// subcommand is in its own file (commands.hpp); the shared flags and every
// check made before work starts are in options.hpp, what a data-parallel
// job adds in group.hpp. main parses, checks, runs the one subcommand
// given, and turns every failure into one line and an exit status.
#include <new>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "group.hpp"
#include "options.hpp"
#include "stop.hpp"
#include "wholestep/dist.hpp"
#include "wholestep/wholestep.hpp"

namespace {

using namespace cli;

// What to lower when memory runs out ("; lower --batch ..."), from the
// command that ran, or "".
std::string memory_hint(const std::vector<std::unique_ptr<Command>>& commands) {
  for (const auto& cmd : commands)
    if (cmd->parsed()) return cmd->memory_hint();
  return "";
}

// The one command given (the parser requires one).
Command& parsed(const std::vector<std::unique_ptr<Command>>& commands) {
  for (const auto& cmd : commands)
    if (cmd->parsed()) return *cmd;
  throw ws::InternalError("no command parsed");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wholestep: compile a whole training step into one graph"};
  app.require_subcommand(1);
  Common c;
  const std::vector<std::unique_ptr<Command>> commands = add_commands(app, c);
  app.set_version_flag("--version",
                       [] { return "wholestep " WS_VERSION "\n" + ws::backend_info(); });

  // Every failure is one line on stderr: usage errors (a flag, a file, a
  // data set that cannot work) exit 2, other errors 1, a bug in wholestep
  // 70 with a request to report it. In a data-parallel job, an error of one
  // rank ends the job, naming the rank (group.hpp).
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
      fmt::print(stderr, "error: {} (see --help)\n", e.what());
      return 2;
    }
    // SIGINT and SIGTERM stop every command promptly, with 130 or 143 and
    // a line saying where (stop.hpp); train stops between steps and saves.
    install_stop_handlers("checking the flags, files and data");
    Command& cmd = parsed(commands);
    join_process_group(cmd.app(), c);
    agree([&] {
      check_no_empty_values(cmd.app());
      if (cmd.takes_common()) {
        cmd.adopt(c);
        check_common(cmd.app(), c);
      }
      cmd.check(c);
    });
    quiet_other_ranks();

    set_phase(fmt::format("running {}", cmd.app()->get_name()));
    ws::set_num_threads(c.threads);
    if (cmd.prints_backend_info())
      fmt::print("{}", ws::backend_info());  // what runs, before any figure
    return cmd.run(c);
  } catch (const AgreedUsageError& e) {
    if (!e.quiet()) fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const UsageError& e) {
    return fail(fmt::format("error: {}", e.what()), 2, false);
  } catch (const ws::OutOfMemory& e) {
    // The user's sizes, not a bug: how much was asked for, and what to lower.
    return fail(fmt::format("error: {} ({:.1f} GiB){}", e.what(),
                            double(e.bytes()) / double(1 << 30), memory_hint(commands)),
                1, false);
  } catch (const ws::dist::GroupError& e) {
    return fail(fmt::format("error: {}", e.what()), 1, true);
  } catch (const ws::Error& e) {
    return fail(fmt::format("error: {}", e.what()), 1, false);
  } catch (const ws::InternalError& e) {
    return fail(fmt::format("internal error: {}\nThis is a bug in wholestep, not in your input; "
                            "please report it with the command line that caused it.",
                            e.what()),
                70, false);
  } catch (const std::bad_alloc&) {
    return fail(fmt::format("error: out of memory{}", memory_hint(commands)), 1, false);
  } catch (const std::exception& e) {
    return fail(fmt::format("error: {}", e.what()), 1, false);
  }
}
