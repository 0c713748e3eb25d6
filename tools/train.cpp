#include "commands.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "run.hpp"
#include "train_log.hpp"
#include "wholestep/wholestep.hpp"

namespace cli {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using ws::models::DataKind;

// What `train` takes beyond the common options.
struct TrainFlags {
  int epochs = 1;
  std::optional<int64_t> steps;
  std::string mode = "single_graph";
  std::string save_dir;
  int64_t save_every = 0;  // 0: at the end and when interrupted only
  int keep = 3;
  std::string resume;
  std::optional<int64_t> stop_after;
  bool skip_nonfinite = false;
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

// The held-out evaluation of a run: the Fashion-MNIST test set (loss and
// accuracy) or 20 batches of windows of the text's last 10% (loss), through
// a forward compiled once that shares the trained parameters' storage.
// Random data has none.
class Evaluator {
 public:
  struct Result {
    double loss = 0;
    std::optional<double> accuracy;
  };

  // The held-out data is read here, before training, so a broken test set
  // stops nothing.
  Evaluator(const Common& c, const ws::models::Spec& spec, ws::models::Model& model)
      : spec_(spec), model_(model) {
    if (spec.data == DataKind::fashion_mnist) {
      test_.emplace(read_data("--data", c.data_dir,
                              [&] { return ws::data::FashionMnist("test", c.data_dir); }));
      if (test_->size() == 0)
        throw UsageError(fmt::format("--data {}: the test set holds no examples", c.data_dir));
    } else if (spec.data == DataKind::text) {
      val_.emplace(
          read_data("--text", c.text, [&] { return ws::data::ByteText(c.text).split("val"); }));
    }
  }
  bool enabled() const { return test_ || val_; }
  // The metrics' name for the held-out part: "test" or "val".
  const char* split() const { return test_ ? "test" : "val"; }
  const std::optional<ws::data::ByteText>& val() const { return val_; }

  Result run() {
    return test_ ? classify() : Result{.loss = text_loss(), .accuracy = std::nullopt};
  }

 private:
  // Mean cross-entropy (in f64 from the logits) and accuracy over the test set.
  Result classify() {
    if (!fwd_)
      fwd_.emplace(ws::compile_forward(model_, [&](const ws::Tensor& x) { return model_(x); }));
    int64_t correct = 0;
    double loss = 0;
    for (const ws::data::Batch& b : test_->batches(500, 0)) {
      ws::Tensor logits = (*fwd_)(b.images);
      const float* z = logits.data<float>();
      const int64_t* y = b.labels.data<int64_t>();
      const int64_t n = logits.size(0), k = logits.size(1);
      for (int64_t i = 0; i < n; ++i, z += k) {
        const float* top = std::max_element(z, z + k);
        double sum = 0;
        for (int64_t j = 0; j < k; ++j) sum += std::exp(double(z[j]) - double(*top));
        loss += double(*top) + std::log(sum) - double(z[y[i]]);
        correct += top - z == y[i];
      }
    }
    const double n = double(test_->size());
    return {.loss = loss / n, .accuracy = double(correct) / n};
  }

  double text_loss() {
    if (!fwd_)
      fwd_.emplace(ws::compile_forward(
          model_, [&](const ws::Tensor& x, const ws::Tensor& y) { return model_.loss(x, y); }));
    const int batches = 20;
    double total = 0;
    for (int i = 0; i < batches; ++i) {
      ws::data::TextBatch b = val_->sample(spec_.batch, spec_.gpt.context, 12345, i);
      total += (*fwd_)(b.inputs, b.targets).item();
    }
    return total / batches;
  }

  ws::models::Spec spec_;
  ws::models::Model& model_;
  std::optional<ws::data::FashionMnist> test_;
  std::optional<ws::data::ByteText> val_;
  std::optional<ws::Forward> fwd_;
};

// The signal that asked `train` to stop (SIGINT, SIGTERM), or 0.
std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) {
  g_stop_signal = sig;
  ::signal(sig, SIG_DFL);  // a second one stops at once
}

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

// The default prompt: `context` bytes of the validation text from the start
// of its second paragraph (after its first blank line), else of its second
// line, else from its start.
std::string default_prompt(const ws::data::ByteText& val, int64_t context) {
  const std::string head = val.text(0, std::min<int64_t>(val.size(), 1024));
  size_t at = head.find("\n\n");
  if (at != std::string::npos)
    at += 2;
  else if ((at = head.find('\n')) != std::string::npos)
    at += 1;
  else
    at = 0;
  if (int64_t(at) >= val.size()) at = 0;
  return val.text(int64_t(at), std::min<int64_t>(context, val.size() - int64_t(at)));
}

// Bytes for a terminal: control characters other than a line break or a
// tab as \xNN.
std::string printable(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if ((u < 0x20 && ch != '\n' && ch != '\t') || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += ch;
  }
  return out;
}

// --sample: text the trained model generates after a prompt (--prompt, or
// from the validation text), printed and written to the metrics.
void print_sample(ws::models::Model& model, const TrainFlags& f, const Common& c,
                  const ws::data::ByteText& val, int64_t step, MetricsLog& metrics) {
  auto& gpt = dynamic_cast<ws::models::Gpt&>(model);
  const std::string prompt = f.prompt.value_or(default_prompt(val, gpt.config.context));
  std::vector<int64_t> tokens(prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) tokens[i] = static_cast<unsigned char>(prompt[i]);
  const std::vector<int64_t> out = ws::models::generate(
      gpt, tokens, {.length = f.sample, .temperature = f.temperature, .seed = c.seed});
  const std::string text = ws::data::ByteText::decode(out);
  const std::string how = f.temperature == 0
                              ? std::string("greedy")
                              : fmt::format("temperature {}, seed {}", f.temperature, c.seed);
  fmt::print("prompt ({} bytes{}):\n{}\nsample ({} bytes, {}):\n{}\n", prompt.size(),
             f.prompt ? "" : " of the validation text", printable(prompt), out.size(), how,
             printable(text));
  metrics.write({{"kind", "sample"},
                 {"step", step},
                 {"prompt", prompt},
                 {"text", text},
                 {"temperature", f.temperature},
                 {"seed", c.seed}});
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

// What `train` saved in a checkpoint's trainer_state.json besides the
// tensors ("user": the run's configuration and the data position), checked
// field by field before anything is loaded or written: a field that is
// missing, of another type or out of range (a hand-edited file) is a
// UsageError naming the checkpoint, the field, its value and what it must
// be.
struct SavedRun {
  json config;
  int64_t data_step = 0;  // the data position: at or after the optimizer's step
};

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

// A loss as the messages about it print it ("NaN", "inf").
std::string loss_text(double loss) {
  return std::isnan(loss) ? std::string("NaN") : fmt::format("{}", loss);
}

// Runs the training the flags describe; returns the exit status.
int train(const Common& c, const TrainFlags& f) {
  const ws::models::Spec spec = ws::models::spec(c.model);
  BatchSource source(c, spec);
  const int64_t steps =
      f.steps.value_or(source.epoch_steps() > 0 ? int64_t(f.epochs) * source.epoch_steps() : 300);
  ws::TrainSetup s = make_setup(c);
  auto& model = static_cast<ws::models::Model&>(*s.model);
  ws::TrainStep step(
      *s.model, *s.opt, s.loss_fn,
      {.mode = ws::parse_mode(f.mode),
       .memory_budget = c.memory_budget,
       .on_nonfinite = f.skip_nonfinite ? ws::NonFinite::skip : ws::NonFinite::ignore});
  int64_t skipped = 0;
  Evaluator evaluator(c, spec, model);
  const int64_t eval_every = f.eval_every.value_or(source.epoch_steps());
  // The data position: the step index of the run, which runs ahead of the
  // optimizer's step count when steps were skipped.
  int64_t start = 0;
  if (!f.resume.empty()) {
    // Checked again as loaded (adopt_config read the same file).
    const ws::CheckpointState st = ws::load_checkpoint(f.resume, *s.model, *s.opt);
    start = read_saved_run(st).data_step;
    check_end_after(f, steps, start);
    fmt::print("resumed from {} at step {}\n", f.resume, start);
  }
  int64_t next = start;
  // --stop-after past the end (even INT64_MAX) means "until the end".
  const int64_t end = f.stop_after && *f.stop_after < steps - start ? start + *f.stop_after : steps;
  MetricsLog metrics;
  if (!f.metrics.empty()) {
    metrics = MetricsLog(f.metrics, /*append=*/!f.resume.empty());
    ordered_json run = {{"kind", "run"},
                        {"step", start},
                        {"config", ordered_json::parse(run_config(c, f, steps).dump())}};
    if (!f.resume.empty()) run["resumed_from"] = f.resume;
    metrics.write(run);
  }
  const char* data = spec.data == DataKind::fashion_mnist ? "Fashion-MNIST"
                     : spec.data == DataKind::text        ? c.text.c_str()
                                                          : "random data";
  fmt::print("training {} on {}: {} steps, batch {}, {} lr {} ({}), mode {}\n", c.model, data,
             steps, spec.batch, optimizer_name(c), learning_rate(c), c.schedule, f.mode);
  if (!f.metrics.empty())
    fmt::print("metrics: {} ({})\n", f.metrics, f.resume.empty() ? "written anew" : "appended");
  // The epoch step `i` (0-based) belongs to, from 1; the epochs done after
  // `done` steps, a fraction (the metrics' "epoch").
  auto epoch_of = [&](int64_t i) { return i / std::max<int64_t>(source.epoch_steps(), 1) + 1; };
  auto epochs_done = [&](int64_t done) {
    return double(done) / double(std::max<int64_t>(source.epoch_steps(), 1));
  };
  auto save = [&] {
    if (f.save_dir.empty()) return std::string();
    const int64_t i = next;
    json user = {{"config", run_config(c, f, steps)},
                 {"data", {{"step", i}, {"shuffle_seed", c.seed}}}};
    if (source.epoch_steps() > 0) {
      user["data"]["epoch"] = i / source.epoch_steps();
      user["data"]["index"] = i % source.epoch_steps();
    }
    return ws::save_checkpoint(f.save_dir, *s.model, *s.opt, user.dump(), f.keep);
  };
  // Evaluates after step `done` (1-based), records it, and returns it.
  auto evaluate = [&](int64_t done) {
    const Evaluator::Result r = evaluator.run();
    ordered_json record = {{"kind", "eval"}, {"split", evaluator.split()}, {"step", done}};
    if (source.epoch_steps() > 0) record["epoch"] = rounded(epochs_done(done), 4);
    record["loss"] = r.loss;
    if (r.accuracy) record["accuracy"] = *r.accuracy;
    metrics.write(record);
    return r;
  };
  Progress progress(stdout, ::isatty(::fileno(stdout)) == 1);
  StepMeter meter;
  g_stop_signal = 0;
  ::signal(SIGINT, on_stop_signal);
  ::signal(SIGTERM, on_stop_signal);
  const auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first_done;
  double first = 0, recent = 0, train_seconds = 0;
  int64_t recent_n = 0;
  const int64_t window = 20;
  for (int64_t i = start; i < end; ++i) {
    const auto t = std::chrono::steady_clock::now();
    // The learning rate is a graph input: changing it never recompiles.
    if (c.schedule == "cosine")
      s.opt->set_lr(learning_rate(c) * 0.5 * (1 + std::cos(M_PI * double(i) / double(steps))));
    ws::StepResult r = step.run(source.get(i));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    train_seconds += secs;
    next = i + 1;
    if (r.skipped) {
      ++skipped;
      progress.break_line();
      fmt::print(stderr, "step {}: the loss or a gradient is not finite (loss {}); skipped\n",
                 i + 1, loss_text(r.loss));
    } else {
      if (!std::isfinite(r.loss)) {
        progress.break_line();
        throw ws::Error(fmt::format(
            "step {}: the loss is {}; training stops here (its update made the parameters "
            "non-finite{}). Lower --lr, check the data, or use --skip-nonfinite",
            i + 1, loss_text(r.loss),
            f.save_dir.empty() ? "" : "; the checkpoints saved so far are intact"));
      }
      if (i == start) first = r.loss;
      if (i >= end - window) recent += r.loss, ++recent_n;
    }
    meter.add(r.loss, r.skipped, secs);
    if (i == start) first_done = std::chrono::steady_clock::now();
    const bool logged = (i + 1) % f.log_every == 0 || i == start || i + 1 == end;
    const double lr = s.opt->lr();
    if (progress.due(logged)) {
      // The remaining time, from the pace since the first step (which also
      // traced and compiled), evaluations included.
      std::string eta;
      if (i > start && i + 1 < end) {
        const double since =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - first_done).count();
        eta = "  eta " + format_duration(since / double(i - start) * double(end - i - 1));
      }
      progress.update(fmt::format(
          "step {:5d}/{}{}  loss {:.4f}  lr {:.3g}  {:.1f} ms/step  {:.0f} ex/s{}", i + 1, steps,
          source.epoch_steps() > 0 ? fmt::format("  epoch {}", epoch_of(i)) : std::string(),
          meter.mean_loss(), lr, meter.ms_per_step(), meter.per_second(spec.batch), eta));
    }
    if (logged) {
      ordered_json record = {{"kind", "train"}, {"step", i + 1}};
      if (source.epoch_steps() > 0) record["epoch"] = rounded(epochs_done(i + 1), 4);
      record["loss"] = meter.mean_loss();
      record["lr"] = lr;
      record["ms_per_step"] = rounded(meter.ms_per_step(), 3);
      record["examples_per_s"] = rounded(meter.per_second(spec.batch), 1);
      metrics.write(record);
      meter.reset();
    }
    if (eval_every > 0 && (i + 1) % eval_every == 0 && i + 1 < steps && evaluator.enabled()) {
      progress.break_line();
      const Evaluator::Result e = evaluate(i + 1);
      fmt::print("{}: {} loss {:.4f}{}\n",
                 source.epoch_steps() > 0 && (i + 1) % source.epoch_steps() == 0
                     ? fmt::format("epoch {} (step {})", epoch_of(i), i + 1)
                     : fmt::format("step {}", i + 1),
                 evaluator.split(), e.loss,
                 e.accuracy ? fmt::format(", accuracy {:.4f}", *e.accuracy) : std::string());
      std::fflush(stdout);
    }
    if (const int sig = g_stop_signal.load()) {
      progress.break_line();
      const std::string where = save();
      fmt::print(stderr, "stopped by {} after step {}{}\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                 i + 1, where.empty() ? "" : fmt::format("; saved {}", where));
      return 128 + sig;
    }
    if (f.save_every > 0 && (i + 1) % f.save_every == 0 && i + 1 < end) save();
  }
  progress.break_line();
  const int64_t ran = end - start;
  if (ran == 0) {
    fmt::print("nothing to train: the checkpoint is at step {}, the end of the run\n", start);
  } else if (const std::string where = save(); !where.empty()) {
    fmt::print("saved {}\n", where);
  }
  if (end < steps) {
    fmt::print("stopped after step {} of {} (--stop-after)\n", end, steps);
    return 0;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ran > 0)
    fmt::print(
        "trained {} steps in {:.1f} s ({:.2f} ms/step; {:.1f} s with evaluations and saving), "
        "traces {}{}\n",
        ran, train_seconds, 1000 * train_seconds / double(std::max<int64_t>(ran, 1)), wall,
        step.traces(), skipped ? fmt::format(", {} skipped (not finite)", skipped) : "");
  if (recent_n > 0)
    fmt::print("loss: first step {:.4f}, mean of the last {} steps {:.4f} ({:.2f}x lower)\n", first,
               recent_n, recent / double(recent_n), first / (recent / double(recent_n)));
  if (evaluator.enabled()) {
    const Evaluator::Result e = evaluate(end);
    if (e.accuracy)
      fmt::print("test accuracy: {:.4f} (loss {:.4f})\n", *e.accuracy, e.loss);
    else
      fmt::print("validation loss (last 10% of the text, eval mode): {:.4f}\n", e.loss);
  }
  if (f.sample > 0) print_sample(model, f, c, *evaluator.val(), end, metrics);
  return 0;
}

class TrainCommand : public Command {
 public:
  TrainCommand(CLI::App& parent, Common& c)
      : Command(parent, "train",
                "train a model (Fashion-MNIST: then test accuracy; gpt: then validation loss)", c) {
    add_train_flags(app_, f_);
  }
  void adopt(Common& c) override {
    f_.steps_given = app_->get_option("--steps")->count() > 0;
    f_.epochs_given = app_->get_option("--epochs")->count() > 0;
    if (!f_.resume.empty()) adopt_config(app_, f_.resume, c, f_);
  }
  void check(const Common& c) override { check_train(app_, c, f_); }
  int run(const Common& c) override { return train(c, f_); }

 private:
  TrainFlags f_;
};

}  // namespace

std::unique_ptr<Command> make_train_command(CLI::App& app, Common& c) {
  return std::make_unique<TrainCommand>(app, c);
}

}  // namespace cli
