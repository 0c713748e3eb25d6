// The subcommands, each in its own file (train.cpp, <name>_cmd.cpp),
// registered by main from one list: each adds its flags, may adopt flags
// from elsewhere, checks them before any work (a UsageError: one line, exit
// status 2) and runs.
#pragma once

#include <memory>
#include <vector>

#include "options.hpp"

namespace cli {

class Command {
 public:
  // Adds the subcommand `name` to `parent`, with the common flags and the
  // step options' (step_flags.hpp; without --mode when `with_mode` is
  // false: the command compiles several modes).
  Command(CLI::App& parent, const char* name, const char* help, Common& c, bool with_mode = true)
      : app_(parent.add_subcommand(name, help)) {
    add_common(app_, c, with_mode);
  }
  // Adds the subcommand `name` to `parent`, without the common flags (it
  // trains no model).
  Command(CLI::App& parent, const char* name, const char* help)
      : app_(parent.add_subcommand(name, help)), common_(false) {}
  virtual ~Command() = default;
  CLI::App* app() const { return app_; }
  bool parsed() const { return app_->parsed(); }
  // Whether it takes the common flags (then checked before check()).
  bool takes_common() const { return common_; }
  // Whether the backend lines (`info`) are printed first: not when stdout
  // is the command's own output (opt's IR text).
  virtual bool prints_backend_info() const { return true; }
  // Called first, before check_common: the command may take flags from
  // elsewhere (train --resume: from the checkpoint).
  virtual void adopt(Common&) {}
  // Called after check_common, before any work.
  virtual void check(const Common& c) = 0;
  // The exit status.
  virtual int run(const Common& c) = 0;
  // When memory runs out: the flag to lower ("; lower --batch ..."), or "".
  virtual std::string memory_hint() const { return ""; }

 protected:
  CLI::App* app_;

 private:
  bool common_ = true;
};

// `wholestep train`: a reference model trained as one compiled step.
std::unique_ptr<Command> make_train_command(CLI::App& app, Common& c);
// `wholestep check`: gradient checks and the modes' agreement.
std::unique_ptr<Command> make_check_command(CLI::App& app, Common& c);
// `wholestep graph`: a Graphviz picture of a compiled step.
std::unique_ptr<Command> make_graph_command(CLI::App& app, Common& c);
// `wholestep opt`: lowering passes run over IR text.
std::unique_ptr<Command> make_opt_command(CLI::App& app, Common& c);
// `wholestep compare`: every mode trained, their time, memory and agreement.
std::unique_ptr<Command> make_compare_command(CLI::App& app, Common& c);
// `wholestep profile`: every kernel of a compiled step timed.
std::unique_ptr<Command> make_profile_command(CLI::App& app, Common& c);
// `wholestep info`: the backends and what they run on.
std::unique_ptr<Command> make_info_command(CLI::App& app, Common& c);
// `wholestep dump`: the compiled graphs and programs as text.
std::unique_ptr<Command> make_dump_command(CLI::App& app, Common& c);

// Every command of this list, added to `app` in this order (--help lists
// them so).
std::vector<std::unique_ptr<Command>> add_commands(CLI::App& app, Common& c);

}  // namespace cli
