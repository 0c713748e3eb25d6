// The command line's shared flags, and the checks made on everything a
// user gives before any work starts: a flag or file that cannot work is a
// UsageError (one line, exit status 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "wholestep/wholestep.hpp"

namespace cli {

// A flag or file the user gave that cannot work: reported before any work
// starts, with exit status 2.
class UsageError : public ws::Error {
 public:
  using ws::Error::Error;
};

struct Common {
  std::string model = "mlp";
  std::string data_dir = ws::data::kFashionMnistDir;
  std::string text = ws::data::kDefaultTextFile;
  uint64_t seed = 0;
  std::optional<std::string> optimizer;
  std::optional<double> lr;
  double momentum = 0.9, weight_decay = -1, max_grad_norm = 0;
  std::string schedule = "cosine";
  int threads = 0;
  double memory_budget = 0;
};

// The options every subcommand takes.
void add_common(CLI::App* app, Common& c);

// The model (initialized from --seed), its optimizer and loss, as the
// flags ask.
ws::TrainSetup make_setup(const Common& c);

// The optimizer and learning rate asked for, or the model's own.
std::string optimizer_name(const Common& c);
double learning_rate(const Common& c);

void require(bool ok, const char* flag, const std::string& value, const char* what);
void require_count(const char* flag, int64_t value, int64_t least);
void require_nonnegative(const char* flag, double value);
// A file a subcommand will write: its directory must exist and be writable.
void check_output_file(const char* flag, const std::string& path);
// Writes `text` to `path`; a ws::Error "<command>: cannot write <path>" when
// it cannot.
void write_text_file(const std::string& path, std::string_view text, const char* command);
// A directory `train --save` can write checkpoints into (made if missing).
void check_writable_dir(const char* flag, const std::string& dir);
void check_common(CLI::App* app, const Common& c);
// The data a training run reads: a directory the user named must exist,
// and a text must hold a window for training and one for validation.
void check_data(CLI::App* app, const Common& c);
void check_mode(const std::string& mode);

}  // namespace cli
