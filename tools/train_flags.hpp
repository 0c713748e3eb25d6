// train's own flags, their checks, and what a resumed run takes from its
// checkpoint (train.cpp runs the training they describe).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "options.hpp"
#include "wholestep/wholestep.hpp"

namespace cli {

// What `train` takes beyond the common options.
struct TrainFlags {
  int epochs = 1;
  std::optional<int64_t> steps;
  std::string save_dir;
  int64_t save_every = 0;  // 0: at the end and when interrupted only
  int keep = 3;
  std::string resume;
  std::optional<int64_t> stop_after;
  std::string metrics;  // --metrics FILE: JSON Lines
  int64_t log_every = 50;
  std::optional<int64_t> eval_every;  // default: each epoch (Fashion-MNIST), the end (text)
  int64_t sample = 0;                 // bytes of generated text after training (gpt)
  double temperature = 0;
  std::optional<std::string> prompt;
  // Whether --steps and --epochs were given (a resumed run takes its steps
  // from the checkpoint otherwise).
  bool steps_given = false, epochs_given = false;
};

// What `train` saved in a checkpoint's trainer_state.json besides the
// tensors ("user": the run's configuration and the data position), checked
// field by field before anything is loaded or written: a field that is
// missing, of another type or out of range (a hand-edited file) is a
// UsageError naming the checkpoint, the field, its value and what it must
// be.
struct SavedRun {
  nlohmann::json config;
  int64_t data_step = 0;  // the data position: at or after the optimizer's step
  int world_size = 1;     // the processes that trained it (1 when not saved)
};

// The configuration a checkpoint keeps, so a resumed run continues exactly
// as it was set up. One table (train_flags.cpp) lists its fields: what
// run_config saves, read_saved_run checks and adopt_config takes.
nlohmann::json run_config(const Common& c, const TrainFlags& f, int64_t steps);

// train's own flags.
void add_train_flags(CLI::App* tr, TrainFlags& f);

// Every check of train's flags that can be made before work starts.
void check_train(CLI::App* tr, const Common& c, const TrainFlags& f);

SavedRun read_saved_run(const ws::CheckpointState& st);

// A resumed run goes on from the checkpoint's step `start`: an end (`steps`,
// from --steps or --epochs) before it would train a negative number of
// steps. At it, nothing is trained; the run is evaluated (and sampled).
void check_end_after(const TrainFlags& f, int64_t steps, int64_t start);

// --resume: the run's configuration comes from the checkpoint. A flag given
// on the command line with another value is a usage error (the run would
// not continue as it was); --steps (or --epochs) may extend or shorten the
// run, and --data and --text may point to where the same data now lives.
void adopt_config(CLI::App* tr, const std::string& resume, Common& c, TrainFlags& f);

}  // namespace cli
