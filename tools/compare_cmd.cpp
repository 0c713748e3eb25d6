// `wholestep compare`: a model trained in every mode (interpret,
// three_graph, single_graph, or those --modes names, and on request the
// compiled modes without aliasing, fusion or recomputation), round robin, as
// a table of time, memory and each mode's difference from the first
// (compare_modes); with --data-parallel, what the collectives cost too.
// --json writes the rows.
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "group.hpp"
#include "run.hpp"
#include "wholestep/dist.hpp"

namespace cli {
namespace {

using nlohmann::ordered_json;

// The share of the collectives' time in flight that compute hid (the rest
// the step waited), or none when nothing was in flight.
std::optional<double> hidden_share(const ws::CompareRow& r) {
  if (r.counters.collectives == 0 || !(r.comm_ms > 0)) return std::nullopt;
  return 1 - r.comm_wait_ms / r.comm_ms;
}

// Examples per second of the global batch (every rank's).
double examples_per_s(const ws::CompareRow& r, int64_t global_batch) {
  return r.ms_per_step > 0 ? double(global_batch) * 1000 / r.ms_per_step : 0;
}

// format_comparison's table with the data-parallel columns after each line:
// communication per step, its time in flight and waited, the share hidden,
// and examples per second of the global batch.
std::string with_comm_columns(const std::string& table, const std::vector<ws::CompareRow>& rows,
                              int64_t global_batch) {
  std::istringstream in(table);
  std::string out, line;
  std::getline(in, line);
  out += fmt::format("{} {:>13} {:>8} {:>8} {:>7} {:>11}\n", line, "comm MB/step", "comm ms",
                     "wait ms", "hidden", "examples/s");
  for (const ws::CompareRow& r : rows) {
    std::getline(in, line);
    const std::optional<double> hidden = hidden_share(r);
    out += fmt::format("{} {:>13.3f} {:>8.3f} {:>8.3f} {:>7} {:>11.0f}\n", line,
                       double(r.counters.comm_bytes) * 1e-6, r.comm_ms, r.comm_wait_ms,
                       hidden ? fmt::format("{:.1f}%", 100 * *hidden) : std::string("-"),
                       examples_per_s(r, global_batch));
  }
  return out;
}

ordered_json counters_json(const ws::StepCounters& k) {
  return {{"graphs", k.graphs},
          {"kernels", k.kernels},
          {"bytes_copied", k.bytes_copied},
          {"interface_bytes", k.interface_bytes},
          {"arena_bytes", k.arena_bytes},
          {"persistent_bytes", k.persistent_bytes},
          {"state_bytes", k.state_bytes},
          {"peak_bytes", k.peak_bytes},
          {"flops", k.flops},
          {"collectives", k.collectives},
          {"comm_bytes", k.comm_bytes}};
}

class CompareCommand : public Command {
 public:
  CompareCommand(CLI::App& parent, Common& c)
      : Command(parent, "compare", "train in every mode and compare time, memory, agreement", c,
                /*with_mode=*/false) {
    add_integer(app_, "--steps", steps_, "timed steps", 1)->capture_default_str();
    add_integer(app_, "--warmup", warmup_, "untimed first steps", 0)->capture_default_str();
    app_->add_option("--modes", modes_text_,
                     "the modes compared, comma-separated, in order (the first is the reference "
                     "of max diff)")
        ->capture_default_str();
    app_->add_flag("--no-alias-rows", no_alias_rows_,
                   "also run the compiled modes with aliasing off");
    app_->add_flag("--unfused-rows", unfused_rows_, "also run the compiled modes without fusion");
    app_->add_flag("--save-all-rows", save_all_rows_,
                   "also run both modes keeping every value the backward reads (no "
                   "recomputation)");
    app_->add_flag("--zero-rows", zero_rows_,
                   "--data-parallel: also run the compiled modes with ZeRO stage 1, beside the "
                   "rows without it");
    app_->add_option("--json", json_,
                     "write the rows to this file as JSON: {\"rows\": [{mode, ms_per_step, "
                     "examples_per_s, comm_bytes, comm_wait_ms, hidden_share, ...}]}");
  }

  void check(const Common& c) override {
    if (zero_rows_ && !c.step.data_parallel) throw UsageError("--zero-rows needs --data-parallel");
    if (zero_rows_ && c.step.zero)
      throw UsageError(
          "--zero-rows adds rows with ZeRO beside those without; --zero makes "
          "every row use it: give one of them");
    require_count("--steps", steps_, 1);
    require_count("--warmup", warmup_, 0);
    // compare runs --steps + --warmup steps, which must be a count too.
    if (steps_ > std::numeric_limits<int64_t>::max() - warmup_)
      throw UsageError(fmt::format("--steps {} with --warmup {}: more than {} steps in all", steps_,
                                   warmup_, std::numeric_limits<int64_t>::max()));
    modes_.clear();
    std::istringstream in(modes_text_);
    for (std::string name; std::getline(in, name, ',');) {
      ws::StepMode mode;
      try {
        mode = ws::parse_mode(name);
      } catch (const ws::Error& e) {
        throw UsageError(fmt::format("--modes {}: {}", modes_text_, e.what()));
      }
      for (ws::StepMode m : modes_)
        if (m == mode)
          throw UsageError(fmt::format("--modes {}: {} is named twice", modes_text_, name));
      modes_.push_back(mode);
    }
    if (!json_.empty()) check_output_file("--json", json_);
    check_data(app_, c);
  }

  int run(const Common& c) override {
    const ws::models::Spec spec = ws::models::spec(c.model);
    BatchSource source(c, spec);
    // Every row has the step options given, in its own mode.
    std::vector<ws::CompareConfig> configs;
    auto row = [&](ws::StepMode m) {
      ws::CompareConfig config = c.step;
      config.mode = m;
      return config;
    };
    for (ws::StepMode m : modes_) configs.push_back(row(m));
    // The extra rows, for each compiled mode compared: aliasing, fusion or
    // recomputation off, or ZeRO on.
    auto add_rows = [&](bool wanted, auto change) {
      for (ws::StepMode m : modes_)
        if (wanted && m != ws::StepMode::interpret) {
          configs.push_back(row(m));
          change(configs.back());
        }
    };
    add_rows(no_alias_rows_, [](ws::CompareConfig& r) { r.aliasing = false; });
    add_rows(unfused_rows_, [](ws::CompareConfig& r) { r.fuse = false; });
    add_rows(save_all_rows_, [](ws::CompareConfig& r) { r.recompute = false; });
    add_rows(zero_rows_, [](ws::CompareConfig& r) { r.zero = true; });
    fmt::print(
        "comparing modes on {} (batch {}, {}{}): {} timed steps after {} warm-up, round robin, "
        "median ms/step; max diff is parameters and buffers vs {} after the last step\n",
        c.model, batch_text(spec.batch), optimizer_name(c),
        c.step.data_parallel ? ", data parallel" : "", steps_, warmup_,
        ws::config_name(configs[0]));
    auto rows =
        ws::compare_modes([&] { return make_setup(c); }, configs,
                          [&](int64_t i) { return source.get(i); }, steps_ + warmup_, warmup_);
    const int64_t global_batch = global_spec(spec).batch;
    const std::string table = ws::format_comparison(rows);
    fmt::print("{}", c.step.data_parallel ? with_comm_columns(table, rows, global_batch) : table);
    if (!json_.empty() && leads()) {
      write_text_file(json_, rows_json(c, rows, spec.batch, global_batch).dump(1) + "\n",
                      "compare");
      fmt::print("rows: {}\n", json_);
    }
    return 0;
  }

 private:
  ordered_json rows_json(const Common& c, const std::vector<ws::CompareRow>& rows, int64_t batch,
                         int64_t global_batch) const {
    ordered_json out = {{"model", c.model},
                        {"batch", batch},
                        {"global_batch", global_batch},
                        {"world_size", ws::dist::world_size()},
                        {"data_parallel", c.step.data_parallel},
                        {"bucket_bytes", c.step.data_parallel ? c.step.bucket_bytes : 0},
                        {"threads", ws::num_threads()},
                        {"steps", steps_},
                        {"warmup", warmup_},
                        {"reference", ws::config_name(rows[0].config)},
                        {"rows", ordered_json::array()}};
    for (const ws::CompareRow& r : rows) {
      const std::optional<double> hidden = hidden_share(r);
      out["rows"].push_back({{"mode", ws::config_name(r.config)},
                             {"step_mode", ws::mode_name(r.config.mode)},
                             {"ms_per_step", r.ms_per_step},
                             {"examples_per_s", examples_per_s(r, global_batch)},
                             {"comm_bytes", r.counters.comm_bytes},
                             {"comm_ms", r.comm_ms},
                             {"comm_wait_ms", r.comm_wait_ms},
                             {"hidden_share", hidden ? ordered_json(*hidden) : ordered_json()},
                             {"final_loss", r.final_loss},
                             {"max_rel_diff", r.max_rel_diff},
                             {"max_diff_at", r.max_diff_at},
                             {"counters", counters_json(r.counters)}});
    }
    return out;
  }

  int64_t steps_ = 20, warmup_ = 3;
  std::string modes_text_ = "interpret,three_graph,single_graph", json_;
  std::vector<ws::StepMode> modes_;
  bool no_alias_rows_ = false, unfused_rows_ = false, save_all_rows_ = false, zero_rows_ = false;
};

}  // namespace

std::unique_ptr<Command> make_compare_command(CLI::App& app, Common& c) {
  return std::make_unique<CompareCommand>(app, c);
}

}  // namespace cli
