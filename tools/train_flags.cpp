#include "train_flags.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ws {

// A step mode in a checkpoint's configuration: its name.
static void to_json(nlohmann::json& j, StepMode m) { j = mode_name(m); }
static void from_json(const nlohmann::json& j, StepMode& m) {
  m = parse_mode(j.get<std::string>());
}

}  // namespace ws

namespace cli {

using nlohmann::json;
using ws::models::DataKind;

namespace {

// What a saved field of the configuration must be (read_saved_run checks it
// before anything is loaded).
enum class Kind {
  model,        // a model's name
  optimizer,    // "sgd", "adam" or "adamw"
  schedule,     // "cosine" or "constant"
  mode,         // a step mode's name
  dir,          // a directory name (not empty)
  file,         // a file name (not empty)
  nonnegative,  // a finite number >= 0
  number,       // a finite number
  seed,         // an integer from 0 to 2^64 - 1
  steps,        // an integer from 1 to 2^63 - 1
};

// What --resume does with a saved field.
enum class Resume {
  keep,   // takes it; the flag given with another value is a usage error
  moved,  // takes it unless the flag is given (the same data, now elsewhere)
  end,    // takes it unless --steps or --epochs is given (a new end)
};

// One field of the configuration a checkpoint keeps ("config" in
// trainer_state.json): its key, the flag that sets it, what a saved value
// must be, what --resume does with it, and where it lives in the flags.
struct ConfigField {
  const char* key;
  const char* flag;
  Kind kind;
  Resume resume;
  // The value, as saved (an optional flag's is set: run_config resolves it).
  json (*save)(const Common& c, const TrainFlags& f);
  // Takes the saved value (checked) as `resume` says; `given`: whether the
  // flag (Resume::end: --steps or --epochs) was given.
  void (*take)(const ConfigField& field, const json& saved, bool given, Common& c, TrainFlags& f,
               const std::string& checkpoint);
};

template <class>
struct MemberOf;
template <class C, class T>
struct MemberOf<T C::*> {
  using Owner = C;
  using Type = T;
};
// A flag's value: an optional one's is set when saved (run_config resolves
// it) and when given.
template <class T>
const T& value_of(const T& v) {
  return v;
}
template <class T>
T value_of(const std::optional<T>& v) {
  return v.value_or(T{});
}

// The member M of Common, of its step options, or of TrainFlags.
template <auto M, class C, class F>
auto& storage(C& c, F& f) {
  using Owner = typename MemberOf<decltype(M)>::Owner;
  if constexpr (std::is_same_v<Owner, Common>)
    return c.*M;
  else if constexpr (std::is_same_v<Owner, ws::StepOptions>)
    return c.step.*M;
  else
    return f.*M;
}

// The field saved under `key`, set by `flag`, kept in the member M (an
// optional one: a flag with a default resolved when the run starts).
template <auto M>
constexpr ConfigField field(const char* key, const char* flag, Kind kind, Resume resume) {
  using T = std::decay_t<decltype(value_of(std::declval<typename MemberOf<decltype(M)>::Type>()))>;
  return {key,
          flag,
          kind,
          resume,
          [](const Common& c, const TrainFlags& f) { return json(value_of(storage<M>(c, f))); },
          [](const ConfigField& field, const json& saved_value, bool given, Common& c,
             TrainFlags& f, const std::string& checkpoint) {
            auto& v = storage<M>(c, f);
            const T saved = saved_value.get<T>();
            if (field.resume == Resume::keep && given && !(value_of(v) == saved))
              throw UsageError(fmt::format(
                  "{} {} differs from the checkpoint's {} ({}); a resumed run keeps its "
                  "configuration",
                  field.flag, json(value_of(v)).dump(), json(saved).dump(), checkpoint));
            if (field.resume == Resume::keep || !given) v = saved;
          }};
}

// The configuration a checkpoint keeps, so a resumed run continues exactly
// as it was set up; read_saved_run checks the fields in this order.
constexpr ConfigField kRunConfig[] = {
    field<&Common::model>("model", "--model", Kind::model, Resume::keep),
    field<&Common::optimizer>("optimizer", "--optimizer", Kind::optimizer, Resume::keep),
    field<&Common::schedule>("schedule", "--schedule", Kind::schedule, Resume::keep),
    field<&ws::StepOptions::mode>("mode", "--mode", Kind::mode, Resume::keep),
    field<&Common::data_dir>("data", "--data", Kind::dir, Resume::moved),
    field<&Common::text>("text", "--text", Kind::file, Resume::moved),
    field<&Common::lr>("lr", "--lr", Kind::nonnegative, Resume::keep),
    field<&Common::momentum>("momentum", "--momentum", Kind::nonnegative, Resume::keep),
    field<&Common::max_grad_norm>("max_grad_norm", "--max-grad-norm", Kind::nonnegative,
                                  Resume::keep),
    field<&ws::StepOptions::memory_budget>("memory_budget", "--memory-budget", Kind::nonnegative,
                                           Resume::keep),
    // Below 0: the optimizer's default.
    field<&Common::weight_decay>("weight_decay", "--weight-decay", Kind::number, Resume::keep),
    field<&Common::seed>("seed", "--seed", Kind::seed, Resume::keep),
    field<&TrainFlags::steps>("steps", "--steps", Kind::steps, Resume::end),
};

// `key` of `object`, or null when `object` is not an object or lacks it.
const json* member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Whether `v` is an integer in [lo, hi] (a JSON number written without a
// fraction).
bool integer_in(const json* v, int64_t lo, uint64_t hi) {
  return v && v->is_number_integer() &&
         (v->is_number_unsigned()
              ? v->get<uint64_t>() <= hi && (lo <= 0 || v->get<uint64_t>() >= uint64_t(lo))
              : v->get<int64_t>() >= lo &&
                    (v->get<int64_t>() < 0 || uint64_t(v->get<int64_t>()) <= hi));
}

// What a saved value of `kind` must be, when `v` (null: missing) is not one.
std::optional<std::string> not_of_kind(Kind kind, const json* v) {
  const bool is_text = v && v->is_string();
  const std::string text = is_text ? v->get<std::string>() : "";
  const bool is_number = v && v->is_number() && std::isfinite(v->get<double>());
  auto must = [](bool ok, std::string what) {
    return ok ? std::nullopt : std::optional<std::string>(std::move(what));
  };
  const uint64_t int64_max = uint64_t(std::numeric_limits<int64_t>::max());
  switch (kind) {
    case Kind::model: {
      const std::vector<std::string>& models = ws::models::names();
      return must(is_text && std::find(models.begin(), models.end(), text) != models.end(),
                  fmt::format("a model name ({})", fmt::join(models, ", ")));
    }
    case Kind::optimizer:
      return must(is_text && (text == "sgd" || text == "adam" || text == "adamw"),
                  "\"sgd\", \"adam\" or \"adamw\"");
    case Kind::schedule:
      return must(is_text && (text == "cosine" || text == "constant"),
                  "\"cosine\" or \"constant\"");
    case Kind::mode: {
      bool known = is_text;
      try {
        if (known) ws::parse_mode(text);
      } catch (const ws::Error&) {
        known = false;
      }
      return must(known, "\"interpret\", \"three_graph\" or \"single_graph\"");
    }
    case Kind::dir: return must(!text.empty(), "a directory name");
    case Kind::file: return must(!text.empty(), "a file name");
    case Kind::nonnegative: return must(is_number && v->get<double>() >= 0, "a finite number >= 0");
    case Kind::number: return must(is_number, "a finite number");
    case Kind::seed:
      return must(integer_in(v, 0, std::numeric_limits<uint64_t>::max()),
                  fmt::format("an integer from 0 to {}", std::numeric_limits<uint64_t>::max()));
    case Kind::steps:
      return must(integer_in(v, 1, int64_max), fmt::format("an integer from 1 to {}", int64_max));
  }
  return std::nullopt;
}

}  // namespace

json run_config(const Common& c, const TrainFlags& f, int64_t steps) {
  // What the run uses: the model's own optimizer and learning rate unless
  // given, the steps it runs.
  Common used = c;
  used.optimizer = optimizer_name(c);
  used.lr = learning_rate(c);
  TrainFlags run = f;
  run.steps = steps;
  json config = json::object();
  for (const ConfigField& field : kRunConfig) config[field.key] = field.save(used, run);
  return config;
}

// train's own flags.
void add_train_flags(CLI::App* tr, TrainFlags& f) {
  add_integer(tr, "--epochs", f.epochs,
              "epochs (Fashion-MNIST models); with --resume, the run's new end", 1)
      ->capture_default_str();
  add_integer(tr, "--steps", f.steps, "steps (default: the epochs, or 300 for gpt)", 1);
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
  // A checkpoint holds the model and the optimizer, not the gradients a
  // cycle has summed (TrainStep::accumulated_gradients), nor the option.
  if (c.step.accumulate > 1 && (!f.save_dir.empty() || !f.resume.empty()))
    throw UsageError(fmt::format(
        "--accumulate {} with {}: a checkpoint holds the model and the optimizer, not the "
        "gradients summed mid-cycle; train with --accumulate 1, or without checkpoints",
        c.step.accumulate, f.save_dir.empty() ? "--resume" : "--save"));
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
  const json* config = member(user, "config");
  if (!config || !config->is_object())
    fail("config", config, "an object (the run's configuration)");
  for (const ConfigField& field : kRunConfig) {
    const json* v = member(*config, field.key);
    const std::optional<std::string> must = not_of_kind(field.kind, v);
    if (must) fail(std::string("config.") + field.key, v, *must);
  }
  const int64_t steps = config->at("steps").get<int64_t>();
  const json* data = member(user, "data");
  if (!data || !data->is_object())
    fail("data", data, "an object (the data position: {\"step\": ...})");
  const json* step = member(*data, "step");
  if (!integer_in(step, st.step, uint64_t(steps)))
    fail("data.step", step,
         fmt::format("an integer from {} (the optimizer's step) to {} (config.steps)", st.step,
                     steps));
  // Saved since data-parallel runs were possible; before, one process.
  const json* world = member(*data, "world_size");
  if (world && !integer_in(world, 1, 1 << 20))
    fail("data.world_size", world, "an integer from 1 to 1048576 (the processes that trained it)");
  return {.config = *config,
          .data_step = step->get<int64_t>(),
          .world_size = world ? world->get<int>() : 1};
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
  for (const ConfigField& field : kRunConfig) {
    // --epochs sets the end from the epochs (train, which knows an epoch's
    // steps); without either flag the run ends where it was to end.
    const bool given = field.resume == Resume::end ? f.steps_given || f.epochs_given
                                                   : tr->get_option(field.flag)->count() > 0;
    field.take(field, cfg.at(field.key), given, c, f, st.path);
  }
}

}  // namespace cli
