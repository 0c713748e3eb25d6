#include "options.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "step_flags.hpp"

namespace cli {

using ws::models::DataKind;

void add_common(CLI::App* app, Common& c, bool with_mode) {
  app->add_option("--model", c.model, "reference model: mlp, tiny_mlp, cnn or gpt")
      ->capture_default_str();
  app->add_option("--data", c.data_dir, "Fashion-MNIST directory")->capture_default_str();
  app->add_option("--text", c.text, "text file for gpt (bytes)")->capture_default_str();
  add_integer(app, "--seed", c.seed, "initialization, shuffle and dropout seed")
      ->capture_default_str();
  app->add_option("--optimizer", c.optimizer, "sgd | adam | adamw (default: the model's)");
  app->add_option("--lr", c.lr, "learning rate (default: the model's)");
  app->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  app->add_option("--weight-decay", c.weight_decay, "weight decay (default: 0; AdamW 0.01)");
  app->add_option("--max-grad-norm", c.max_grad_norm, "global-norm gradient clipping (0: off)")
      ->capture_default_str();
  add_integer(app, "--threads", c.threads, "threads (0: all cores)", 0)->capture_default_str();
  app->add_option("--schedule", c.schedule,
                  "learning rate schedule: cosine (decay to 0 over the run) or constant")
      ->capture_default_str();
  add_step_flags(app, c.step, c.comm_progress, with_mode);
}

void canonical_integer(const std::string& flag, std::string& text, bool is_signed, int64_t lo,
                       uint64_t hi, std::optional<int64_t> least) {
  // The sign, then at least one digit and nothing else.
  const bool negative = text.starts_with('-');
  const size_t digits = negative || text.starts_with('+') ? 1 : 0;
  if (text.size() == digits || text.find_first_not_of("0123456789", digits) != std::string::npos)
    throw UsageError(fmt::format("{} {}: is not an integer", flag, text));
  const std::string range =
      fmt::format("must be an integer from {} to {}",
                  least && *least > lo ? *least : (is_signed ? lo : int64_t(0)), hi);
  uint64_t magnitude = 0;
  const auto [end, ec] =
      std::from_chars(text.data() + digits, text.data() + text.size(), magnitude);
  const bool fits =
      ec == std::errc() && end == text.data() + text.size() &&
      (negative ? (magnitude == 0 || (is_signed && magnitude - 1 <= uint64_t(-(lo + 1))))
                : magnitude <= hi);
  if (!fits) throw UsageError(fmt::format("{} {}: out of range; {}", flag, text, range));
  text = negative && magnitude != 0 ? "-" + std::to_string(magnitude) : std::to_string(magnitude);
}

// What an empty value of a flag would have meant, and what to give instead.
void check_no_empty_values(CLI::App* app) {
  for (const CLI::Option* o : app->get_options()) {
    if (o->count() == 0 || o->get_items_expected_min() == 0 || o->get_lnames().empty()) continue;
    const std::string flag = "--" + o->get_lnames().front();
    for (const std::string& value : o->results()) {
      if (!value.empty()) continue;
      const char* what =
          flag == "--resume"   ? "; give a checkpoint, or a directory of them"
          : flag == "--save"   ? "; give a directory, or leave --save out"
          : flag == "--prompt" ? "; give at least one byte to continue"
          : flag == "--data"   ? "; give the Fashion-MNIST directory"
          : flag == "--text"   ? "; give a text file"
          : flag == "--metrics" || flag == "--trace" || flag == "--dot" || flag == "--output"
              ? "; give a file name"
              : "; give a value";
      throw UsageError(fmt::format("{} \"\": is empty{}", flag, what));
    }
  }
}

// ---- the model and optimizer the flags describe ----------------------------

ws::TrainSetup make_setup(const Common& c) {
  ws::manual_seed(c.seed);
  return ws::models::make_setup(ws::models::spec(c.model), {.name = optimizer_name(c),
                                                            .lr = learning_rate(c),
                                                            .momentum = c.momentum,
                                                            .weight_decay = c.weight_decay,
                                                            .max_grad_norm = c.max_grad_norm});
}

std::string optimizer_name(const Common& c) {
  return c.optimizer.value_or(ws::models::spec(c.model).optimizer);
}
double learning_rate(const Common& c) { return c.lr.value_or(ws::models::spec(c.model).lr); }

// A directory `train --save` can write checkpoints into.
void check_writable_dir(const char* flag, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || ::access(dir.c_str(), W_OK) != 0)
    throw UsageError(fmt::format("{} {}: cannot write there ({})", flag, dir,
                                 ec ? ec.message() : std::string(std::strerror(errno))));
}

// ---- what the user gave, checked before any work --------------------------

void require(bool ok, const char* flag, const std::string& value, const char* what) {
  if (!ok) throw UsageError(fmt::format("{} {}: {}", flag, value, what));
}
void require_count(const char* flag, int64_t value, int64_t least) {
  if (value < least)
    throw UsageError(fmt::format("{} {}: must be at least {}", flag, value, least));
}
void require_at_most(const char* flag, int64_t value, int64_t most) {
  if (value > most) throw UsageError(fmt::format("{} {}: must be at most {}", flag, value, most));
}
void require_nonnegative(const char* flag, double value) {
  require(std::isfinite(value) && value >= 0, flag, fmt::format("{}", value),
          "must be a finite number >= 0");
}

// A file a subcommand will write: writable if it exists, else its
// directory must exist and be writable.
void check_output_file(const char* flag, const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError(fmt::format("{} {}: is a directory", flag, path));
  if (std::filesystem::exists(path, ec)) {
    if (::access(path.c_str(), W_OK) != 0)
      throw UsageError(
          fmt::format("{} {}: cannot write it ({})", flag, path, std::strerror(errno)));
    return;
  }
  if (::access(dir.empty() ? "." : dir.c_str(), W_OK) != 0)
    throw UsageError(fmt::format("{} {}: cannot write in {} ({})", flag, path,
                                 dir.empty() ? "." : dir, std::strerror(errno)));
}

void write_text_file(const std::string& path, std::string_view text, const char* command) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.flush()) throw ws::Error(fmt::format("{}: cannot write {}", command, path));
}

void check_common(CLI::App* app, const Common& c) {
  try {
    ws::models::spec(c.model);
  } catch (const ws::Error& e) {
    throw UsageError(fmt::format("--model {}: {}", c.model, e.what()));
  }
  const std::string opt = optimizer_name(c);
  require(opt == "sgd" || opt == "adam" || opt == "adamw", "--optimizer", opt,
          "expected sgd, adam or adamw");
  require_nonnegative("--lr", learning_rate(c));
  require_nonnegative("--momentum", c.momentum);
  if (app->get_option("--weight-decay")->count() > 0)
    require_nonnegative("--weight-decay", c.weight_decay);
  require_nonnegative("--max-grad-norm", c.max_grad_norm);
  require(c.threads >= 0, "--threads", std::to_string(c.threads), "must be >= 0 (0: all cores)");
  // OpenMP would try to start every one of them at the first parallel region.
  require(c.threads <= 1024, "--threads", std::to_string(c.threads), "must be at most 1024");
  require(c.schedule == "cosine" || c.schedule == "constant", "--schedule", c.schedule,
          "expected cosine or constant");
  check_step_flags(app, c.step, c.comm_progress);
}

// The data a training run reads: a directory the user named must exist,
// and a text must hold a window for training and one for validation.
void check_data(CLI::App* app, const Common& c) {
  const ws::models::Spec spec = ws::models::spec(c.model);
  std::error_code ec;
  if (spec.data == DataKind::fashion_mnist && app->get_option("--data")->count() > 0 &&
      !std::filesystem::is_directory(c.data_dir, ec))
    throw UsageError(fmt::format("--data {}: no such directory", c.data_dir));
  if (spec.data == DataKind::text) {
    try {
      const ws::data::ByteText text(c.text);
      for (const char* part : {"train", "val"}) {
        const int64_t bytes = text.split(part).size();
        if (bytes <= spec.gpt.context)
          throw UsageError(fmt::format(
              "--text {}: its {} part ({} of {} bytes) is shorter than one window of {} bytes",
              c.text, part, bytes, text.size(), spec.gpt.context + 1));
      }
    } catch (const UsageError&) {
      throw;
    } catch (const ws::Error& e) {
      throw UsageError(fmt::format("--text {}: {}", c.text, e.what()));
    }
  }
}

}  // namespace cli
