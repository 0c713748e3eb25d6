// The command line's shared flags, and the checks made on everything a
// user gives before any work starts: a flag or file that cannot work is a
// UsageError (one line, exit status 2).
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

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
  // The step options (step_flags.hpp: every command that takes these
  // options compiles a step), and how the process group's collectives
  // move (ws::dist::Progress by name; group.hpp joins the group).
  ws::StepOptions step;
  std::string comm_progress = "kernels";
};

// The options every subcommand that trains a model takes, and the step
// options' flags (but --mode when `with_mode` is false).
void add_common(CLI::App* app, Common& c, bool with_mode);

// `text` with an integer flag's value made canonical: a decimal integer
// (an optional sign, then digits) in [lo, hi] is rewritten without leading
// zeros or '+'; anything else is a UsageError naming the flag, the value
// and the range. `least`, when above `lo`, is the range the message states
// (the flag's own smaller values get require_count's message later).
void canonical_integer(const std::string& flag, std::string& text, bool is_signed, int64_t lo,
                       uint64_t hi, std::optional<int64_t> least);

namespace detail {
template <class T>
struct IntegerOf {
  using type = T;
};
template <class T>
struct IntegerOf<std::optional<T>> {
  using type = T;
};
}  // namespace detail

// Adds an integer flag (`field`: an integer, or an optional one). CLI11
// alone would clamp a value past the type's range (--steps 2^63 runs
// 2^63 - 1 steps), wrap a negative one into an unsigned flag (--seed -1 is
// 2^64 - 1) and read 010 as octal: here each is a usage error naming the
// flag, the value and the range, and only decimal integers are taken.
template <class T>
CLI::Option* add_integer(CLI::App* app, const std::string& flag, T& field, const std::string& help,
                         std::optional<int64_t> least = std::nullopt) {
  using I = typename detail::IntegerOf<T>::type;
  static_assert(std::is_integral_v<I> && sizeof(I) <= 8);
  return app->add_option(flag, field, help)
      ->transform(CLI::Validator(
          [flag, least](std::string& text) {
            canonical_integer(flag, text, std::is_signed_v<I>,
                              int64_t(std::numeric_limits<I>::min()),
                              uint64_t(std::numeric_limits<I>::max()), least);
            return std::string();
          },
          ""));
}

// A value given as an empty string ("--resume ''") is a usage error: every
// option with a value of `app` (an empty path would silently mean "none").
void check_no_empty_values(CLI::App* app);

// The model (initialized from --seed), its optimizer and loss, as the
// flags ask.
ws::TrainSetup make_setup(const Common& c);

// The optimizer and learning rate asked for, or the model's own.
std::string optimizer_name(const Common& c);
double learning_rate(const Common& c);

void require(bool ok, const char* flag, const std::string& value, const char* what);
void require_count(const char* flag, int64_t value, int64_t least);
void require_at_most(const char* flag, int64_t value, int64_t most);
void require_nonnegative(const char* flag, double value);
// A file a subcommand will write: writable if it exists, else its
// directory must exist and be writable.
void check_output_file(const char* flag, const std::string& path);
// Writes `text` to `path`; a ws::Error "<command>: cannot write <path>" when
// it cannot.
void write_text_file(const std::string& path, std::string_view text, const char* command);
// A directory `train --save` can write checkpoints into (made if missing).
void check_writable_dir(const char* flag, const std::string& dir);
// The common options and the step options, checked.
void check_common(CLI::App* app, const Common& c);
// The data a training run reads: a directory the user named must exist,
// and a text must hold a window for training and one for validation.
void check_data(CLI::App* app, const Common& c);
// Reads a data set with `read`: a ws::Error reading it (a missing, short
// or corrupt file) is a UsageError, "--data DIR: ..." or "--text FILE: ...",
// since the data cannot work and no work has started.
template <class F>
auto read_data(const char* flag, const std::string& where, F&& read) {
  try {
    return read();
  } catch (const UsageError&) {
    throw;
  } catch (const ws::Error& e) {
    throw UsageError(std::string(flag) + " " + where + ": " + e.what());
  }
}

}  // namespace cli
