#include "train_flags.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace cli {

using nlohmann::json;
using ws::models::DataKind;

// The configuration a checkpoint keeps, so a resumed run continues exactly
// as it was set up.
json run_config(const Common& c, const TrainFlags& f, int64_t steps) {
  return {{"model", c.model},
          {"optimizer", optimizer_name(c)},
          {"lr", learning_rate(c)},
          {"momentum", c.momentum},
          {"weight_decay", c.weight_decay},
          {"max_grad_norm", c.max_grad_norm},
          {"schedule", c.schedule},
          {"seed", c.seed},
          {"mode", f.mode},
          {"memory_budget", c.memory_budget},
          {"steps", steps},
          {"data", c.data_dir},
          {"text", c.text}};
}

// train's own flags.
void add_train_flags(CLI::App* tr, TrainFlags& f) {
  add_integer(tr, "--epochs", f.epochs,
              "epochs (Fashion-MNIST models); with --resume, the run's new end", 1)
      ->capture_default_str();
  add_integer(tr, "--steps", f.steps, "steps (default: the epochs, or 300 for gpt)", 1);
  tr->add_option("--mode", f.mode, "interpret | three_graph | single_graph")->capture_default_str();
  tr->add_option("--save", f.save_dir,
                 "write checkpoints into this directory (checkpoint-<step>/: model.safetensors, "
                 "optimizer.safetensors, trainer_state.json) at the end, every --save-every "
                 "steps, and when stopped by SIGINT or SIGTERM");
  add_integer(tr, "--save-every", f.save_every, "steps between checkpoints (0: at the end only)", 0)
      ->capture_default_str();
  add_integer(tr, "--keep", f.keep, "checkpoints kept, the newest (0: all)", 0)
      ->capture_default_str();
  tr->add_option("--resume", f.resume,
                 "continue the run saved in this checkpoint (or the newest in this directory), "
                 "with its configuration");
  tr->add_flag("--skip-nonfinite", f.skip_nonfinite,
               "skip a step whose loss or gradients are inf or NaN (parameters and state stay "
               "as they were); without it such a step stops training with an error");
  add_integer(tr, "--stop-after", f.stop_after,
              "stop after this many steps of this run (saving when --save is given)", 1);

  tr->add_option("--metrics", f.metrics,
                 "write the run's metrics to this file as JSON Lines, each flushed as written: a "
                 "'run' record (the step it starts from, the configuration), one per logged step "
                 "(step, epoch, loss, lr, ms_per_step, examples_per_s), one per evaluation "
                 "(split, loss, accuracy) and one per sample; --resume appends to it");
  add_integer(tr, "--log-every", f.log_every, "steps between logged steps (progress and metrics)",
              1)
      ->capture_default_str();
  add_integer(tr, "--eval-every", f.eval_every,
              "steps between evaluations on the held-out data, and at the end (default: every "
              "epoch for Fashion-MNIST, the end only for text; 0: the end only)",
              0);
  add_integer(tr, "--sample", f.sample,
              "gpt: after training, generate this many bytes continuing --prompt", 0)
      ->capture_default_str();
  tr->add_option("--temperature", f.temperature,
                 "--sample: 0 picks the likeliest byte, > 0 draws from softmax(logits / T) "
                 "seeded by --seed")
      ->capture_default_str();
  tr->add_option("--prompt", f.prompt,
                 "--sample: the text to continue (default: the start of a paragraph of the "
                 "validation text, one context long)");
}

// Every check of train's flags that can be made before work starts.
void check_train(CLI::App* tr, const Common& c, const TrainFlags& f) {
  require_count("--epochs", f.epochs, 1);
  if (f.epochs_given && ws::models::spec(c.model).data != DataKind::fashion_mnist)
    throw UsageError(fmt::format(
        "--epochs {}: only the Fashion-MNIST models (mlp, cnn) have epochs; --model {} trains "
        "--steps steps (300 unless given)",
        f.epochs, c.model));
  if (f.steps) require_count("--steps", *f.steps, 1);
  if (f.stop_after) require_count("--stop-after", *f.stop_after, 1);
  require_count("--save-every", f.save_every, 0);
  require_count("--keep", f.keep, 0);
  if (f.save_dir.empty() &&
      (tr->get_option("--save-every")->count() > 0 || tr->get_option("--keep")->count() > 0))
    throw UsageError("--save-every and --keep need --save DIR");
  require_count("--log-every", f.log_every, 1);
  if (f.eval_every) require_count("--eval-every", *f.eval_every, 0);
  require_count("--sample", f.sample, 0);
  require_nonnegative("--temperature", f.temperature);
  if (f.sample == 0 &&
      (tr->get_option("--temperature")->count() > 0 || tr->get_option("--prompt")->count() > 0))
    throw UsageError("--temperature and --prompt need --sample N");
  if (f.sample > 0 && ws::models::spec(c.model).data != DataKind::text)
    throw UsageError(
        fmt::format("--sample {}: only a language model generates text (gpt); "
                    "--model {} classifies",
                    f.sample, c.model));
  if (f.prompt && f.prompt->empty())
    throw UsageError("--prompt \"\": is empty; give at least one byte to continue");
  check_mode(f.mode);
  if (!f.save_dir.empty()) check_writable_dir("--save", f.save_dir);
  if (!f.metrics.empty()) check_output_file("--metrics", f.metrics);
  check_data(tr, c);
}

SavedRun read_saved_run(const ws::CheckpointState& st) {
  // read_checkpoint_state has checked that "user" is a JSON object.
  const json user = json::parse(st.user_json);
  auto fail = [&](const std::string& field, const json* value, const std::string& must) {
    throw UsageError(fmt::format("--resume {}: trainer_state.json: {} is {}; must be {}", st.path,
                                 field, value ? value->dump() : "missing", must));
  };
  auto member = [](const json& object, const char* key) -> const json* {
    if (!object.is_object()) return nullptr;
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  };
  // An integer in [lo, hi] (a JSON number written without a fraction).
  auto integer = [&](const std::string& field, const json* v, int64_t lo, uint64_t hi,
                     const std::string& must) {
    const bool ok =
        v && v->is_number_integer() &&
        (v->is_number_unsigned()
             ? v->get<uint64_t>() <= hi && (lo <= 0 || v->get<uint64_t>() >= uint64_t(lo))
             : v->get<int64_t>() >= lo &&
                   (v->get<int64_t>() < 0 || uint64_t(v->get<int64_t>()) <= hi));
    if (!ok) fail(field, v, must);
    return v->is_number_unsigned() ? int64_t(v->get<uint64_t>()) : v->get<int64_t>();
  };
  const json* config = member(user, "config");
  if (!config || !config->is_object())
    fail("config", config, "an object (the run's configuration)");
  auto text = [&](const char* key, const std::function<bool(const std::string&)>& ok,
                  const std::string& must) {
    const json* v = member(*config, key);
    if (!v || !v->is_string() || !ok(v->get<std::string>()))
      fail(std::string("config.") + key, v, must);
  };
  auto number = [&](const char* key, bool nonnegative) {
    const json* v = member(*config, key);
    if (!v || !v->is_number() || !std::isfinite(v->get<double>()) ||
        (nonnegative && v->get<double>() < 0))
      fail(std::string("config.") + key, v,
           nonnegative ? "a finite number >= 0" : "a finite number");
  };
  const std::vector<std::string> models = ws::models::names();
  text(
      "model",
      [&](const std::string& m) {
        return std::find(models.begin(), models.end(), m) != models.end();
      },
      fmt::format("a model name ({})", fmt::join(models, ", ")));
  text(
      "optimizer", [](const std::string& o) { return o == "sgd" || o == "adam" || o == "adamw"; },
      "\"sgd\", \"adam\" or \"adamw\"");
  text(
      "schedule", [](const std::string& v) { return v == "cosine" || v == "constant"; },
      "\"cosine\" or \"constant\"");
  text(
      "mode",
      [](const std::string& m) {
        try {
          ws::parse_mode(m);
          return true;
        } catch (const ws::Error&) {
          return false;
        }
      },
      "\"interpret\", \"three_graph\" or \"single_graph\"");
  text(
      "data", [](const std::string& d) { return !d.empty(); }, "a directory name");
  text(
      "text", [](const std::string& t) { return !t.empty(); }, "a file name");
  for (const char* key : {"lr", "momentum", "max_grad_norm", "memory_budget"}) number(key, true);
  number("weight_decay", false);  // below 0: the optimizer's default
  const uint64_t int64_max = uint64_t(std::numeric_limits<int64_t>::max());
  integer("config.seed", member(*config, "seed"), 0, std::numeric_limits<uint64_t>::max(),
          fmt::format("an integer from 0 to {}", std::numeric_limits<uint64_t>::max()));
  const int64_t steps = integer("config.steps", member(*config, "steps"), 1, int64_max,
                                fmt::format("an integer from 1 to {}", int64_max));
  const json* data = member(user, "data");
  if (!data || !data->is_object())
    fail("data", data, "an object (the data position: {\"step\": ...})");
  SavedRun out;
  out.data_step =
      integer("data.step", member(*data, "step"), st.step, uint64_t(steps),
              fmt::format("an integer from {} (the optimizer's step) to {} (config.steps)", st.step,
                          steps));
  out.config = *config;
  return out;
}

// A resumed run goes on from the checkpoint's step `start`: an end (`steps`,
// from --steps or --epochs) before it would train a negative number of
// steps. At it, nothing is trained; the run is evaluated (and sampled).
void check_end_after(const TrainFlags& f, int64_t steps, int64_t start) {
  if (steps < start)
    throw UsageError(fmt::format(
        "{}: the checkpoint {} is at step {}; a resumed run goes on from there, so its end must "
        "be step {} or later",
        f.steps_given ? fmt::format("--steps {}", steps)
                      : fmt::format("--epochs {} ({} steps)", f.epochs, steps),
        f.resume, start, start));
}

// --resume: the run's configuration comes from the checkpoint. A flag given
// on the command line with another value is a usage error (the run would
// not continue as it was); --steps (or --epochs) may extend or shorten the
// run, and --data and --text may point to where the same data now lives.
void adopt_config(CLI::App* tr, const std::string& resume, Common& c, TrainFlags& f) {
  ws::CheckpointState st;
  try {
    st = ws::read_checkpoint_state(resume);
  } catch (const ws::Error& e) {
    throw UsageError(fmt::format("--resume {}: {}", resume, e.what()));
  }
  const SavedRun saved_run = read_saved_run(st);
  const json& cfg = saved_run.config;
  f.resume = st.path;
  // An --epochs end is checked by train, which knows an epoch's steps.
  if (f.steps_given) check_end_after(f, *f.steps, saved_run.data_step);
  auto given = [&](const char* flag) { return tr->get_option(flag)->count() > 0; };
  auto take = [&](const char* flag, const char* key, auto& field) {
    using T = std::decay_t<decltype(field)>;
    const T saved = cfg.at(key).get<T>();  // read_saved_run checked its type
    if (given(flag) && !(field == saved))
      throw UsageError(fmt::format(
          "{} {} differs from the checkpoint's {} ({}); a resumed run keeps its configuration",
          flag, json(field).dump(), json(saved).dump(), st.path));
    field = saved;
  };
  take("--model", "model", c.model);
  take("--seed", "seed", c.seed);
  take("--momentum", "momentum", c.momentum);
  take("--weight-decay", "weight_decay", c.weight_decay);
  take("--max-grad-norm", "max_grad_norm", c.max_grad_norm);
  take("--schedule", "schedule", c.schedule);
  take("--memory-budget", "memory_budget", c.memory_budget);
  take("--mode", "mode", f.mode);
  std::string opt = c.optimizer.value_or("");
  double lr = c.lr.value_or(0);
  take("--optimizer", "optimizer", opt);
  take("--lr", "lr", lr);
  c.optimizer = opt;
  c.lr = lr;
  // --epochs sets the end from the epochs (train, which knows an epoch's
  // steps); without either flag the run ends where it was to end.
  if (!f.steps_given && !f.epochs_given) f.steps = cfg.at("steps").get<int64_t>();
  if (!given("--data")) c.data_dir = cfg.at("data").get<std::string>();
  if (!given("--text")) c.text = cfg.at("text").get<std::string>();
}

}  // namespace cli
