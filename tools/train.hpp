// The `train` subcommand: trains a reference model as one compiled step,
// with the progress line, periodic evaluation, the metrics file,
// checkpoints, and (for gpt) a sample of generated text.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "options.hpp"

namespace cli {

// Adds `train` and its flags to `app`.
CLI::App* add_train(CLI::App& app, Common& c, TrainFlags& f);

// --resume: the run's configuration comes from the checkpoint. A flag given
// on the command line with another value is a usage error (the run would
// not continue as it was); --steps may extend or shorten the run, and
// --data and --text may point to where the same data now lives.
void adopt_config(CLI::App* tr, const std::string& resume, Common& c, TrainFlags& f);

// Runs the training the flags describe; returns the exit status.
int train(const Common& c, const TrainFlags& f);

}  // namespace cli
