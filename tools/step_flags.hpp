// The step options (include/wholestep/step_options.def) as flags of every
// command that compiles a step: an option's flag is its name with '-' for
// '_' ("--memory-budget N"); a flag option's is the one that changes its
// default ("--zero", "--no-fuse"); a choice takes a name ("--mode
// three_graph"). --help shows each with its default and its meaning, and
// docs/cli.md's table of them is generated from the same table.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "wholestep/step_options.hpp"

namespace cli {

// Adds the flag of every step option of `o` to `app` (but --mode when
// `with_mode` is false: compare and check compile several modes), and
// --comm-progress, which sets how the process group's collectives move
// (`comm_progress`, a ws::dist::Progress by name).
void add_step_flags(CLI::App* app, ws::StepOptions& o, std::string& comm_progress, bool with_mode);

// Checks the step options `app`'s flags gave, before any work: each value
// in its option's range, none given while the option it needs is off, and
// what a TrainStep checks of them together; a UsageError naming the flag,
// the value and what it must be.
void check_step_flags(const CLI::App* app, const ws::StepOptions& o,
                      const std::string& comm_progress);

}  // namespace cli
