// The wholestep command line: train a reference model, compare the modes,
// print the compiled graphs, run lowering passes over IR text. Each
// subcommand is in its own file (commands.hpp); the shared flags and every
// check made before work starts are in options.hpp. main parses, checks,
// runs the one subcommand given, and turns every failure into one line and
// an exit status.
#include <new>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "stop.hpp"
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
  // 70 with a request to report it.
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
    for (CLI::App* sub : app.get_subcommands())
      if (sub->parsed()) check_no_empty_values(sub);
    for (const auto& cmd : commands)
      if (cmd->parsed()) {
        if (cmd->takes_common()) {
          cmd->adopt(c);
          check_common(cmd->app(), c);
        }
        cmd->check(c);
      }

    set_phase(fmt::format("running {}", app.get_subcommands().front()->get_name()));
    ws::set_num_threads(c.threads);
    for (const auto& cmd : commands)
      if (cmd->parsed()) {
        if (cmd->prints_backend_info())
          fmt::print("{}", ws::backend_info());  // what runs, before any figure
        return cmd->run(c);
      }
  } catch (const UsageError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const ws::OutOfMemory& e) {
    // The user's sizes, not a bug: how much was asked for, and what to lower.
    fmt::print(stderr, "error: {} ({:.1f} GiB){}\n", e.what(), double(e.bytes()) / double(1 << 30),
               memory_hint(commands));
    return 1;
  } catch (const ws::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (const ws::InternalError& e) {
    fmt::print(stderr,
               "internal error: {}\nThis is a bug in wholestep, not in your input; please report "
               "it with the command line that caused it.\n",
               e.what());
    return 70;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "error: out of memory{}\n", memory_hint(commands));
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
