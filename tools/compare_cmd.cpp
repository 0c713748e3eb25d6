// `wholestep compare`: a model trained in every mode (interpret,
// three_graph, single_graph, and on request the compiled modes without
// aliasing, fusion or recomputation), round robin, as a table of time,
// memory and each mode's difference from interpret (compare_modes).
#include <limits>

#include <fmt/format.h>

#include "commands.hpp"
#include "run.hpp"

namespace cli {
namespace {

class CompareCommand : public Command {
 public:
  CompareCommand(CLI::App& parent, Common& c)
      : Command(parent, "compare", "train in every mode and compare time, memory, agreement", c) {
    add_integer(app_, "--steps", steps_, "timed steps", 1)->capture_default_str();
    add_integer(app_, "--warmup", warmup_, "untimed first steps", 0)->capture_default_str();
    app_->add_flag("--no-alias-rows", no_alias_rows_,
                   "also run the compiled modes with aliasing off");
    app_->add_flag("--unfused-rows", unfused_rows_, "also run the compiled modes without fusion");
    app_->add_flag("--save-all-rows", save_all_rows_,
                   "also run both modes keeping every value the backward reads (no "
                   "recomputation)");
  }

  void check(const Common& c) override {
    require_count("--steps", steps_, 1);
    require_count("--warmup", warmup_, 0);
    // compare runs --steps + --warmup steps, which must be a count too.
    if (steps_ > std::numeric_limits<int64_t>::max() - warmup_)
      throw UsageError(fmt::format("--steps {} with --warmup {}: more than {} steps in all", steps_,
                                   warmup_, std::numeric_limits<int64_t>::max()));
    check_data(app_, c);
  }

  int run(const Common& c) override {
    const ws::models::Spec spec = ws::models::spec(c.model);
    BatchSource source(c, spec);
    std::vector<ws::CompareConfig> configs = {
        {ws::StepMode::interpret}, {ws::StepMode::three_graph}, {ws::StepMode::single_graph}};
    if (no_alias_rows_) {
      configs.push_back({ws::StepMode::three_graph, false});
      configs.push_back({ws::StepMode::single_graph, false});
    }
    if (unfused_rows_) {
      configs.push_back({ws::StepMode::three_graph, true, false});
      configs.push_back({ws::StepMode::single_graph, true, false});
    }
    if (save_all_rows_) {
      configs.push_back({ws::StepMode::three_graph, true, true, false});
      configs.push_back({ws::StepMode::single_graph, true, true, false});
    }
    for (ws::CompareConfig& config : configs) config.memory_budget = c.memory_budget;
    fmt::print(
        "comparing modes on {} (batch {}, {}): {} timed steps after {} warm-up, round robin, "
        "median ms/step; max diff is parameters and buffers vs interpret after the last step\n",
        c.model, spec.batch, optimizer_name(c), steps_, warmup_);
    auto rows =
        ws::compare_modes([&] { return make_setup(c); }, configs,
                          [&](int64_t i) { return source.get(i); }, steps_ + warmup_, warmup_);
    fmt::print("{}", ws::format_comparison(rows));
    return 0;
  }

 private:
  int64_t steps_ = 20, warmup_ = 3;
  bool no_alias_rows_ = false, unfused_rows_ = false, save_all_rows_ = false;
};

}  // namespace

std::unique_ptr<Command> make_compare_command(CLI::App& app, Common& c) {
  return std::make_unique<CompareCommand>(app, c);
}

}  // namespace cli
