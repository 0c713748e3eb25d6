// `wholestep check`: for each reference model, the f64 gradient check of
// every parameter (check::gradcheck on a small random batch) as a table of
// each parameter's worst element, then the agreement of interpret,
// three_graph and single_graph after some steps (compare_modes). Any
// failure makes the exit status 1, with one line on stderr naming what
// failed.
#include <optional>

#include <fmt/format.h>

#include "autograd/vjp_fault.hpp"
#include "commands.hpp"
#include "run.hpp"
#include "wholestep/check.hpp"
#include "wholestep/compare.hpp"

namespace cli {
namespace {

// gpt's gradient check reads windows of this many tokens (the model keeps
// its context): the products and attention cost in proportion, and 8
// positions exercise the causal mask.
constexpr int64_t kCheckTokens = 8;
// The compiled modes agree with interpret within this after the steps
// (the bound tests/step/models_test.cpp holds them to).
constexpr double kModeTolerance = 1e-4;

class CheckCommand : public Command {
 public:
  CheckCommand(CLI::App& parent, Common& c)
      : Command(parent, "check",
                "check every parameter's gradient against f64 finite differences, and that the "
                "modes agree after some steps",
                c, /*with_mode=*/false) {
    app_->get_option("--model")
        ->description("reference model: mlp, tiny_mlp, cnn or gpt (default: all four)")
        ->default_str("");
    add_integer(app_, "--steps", steps_, "steps each mode trains before they are compared", 1)
        ->capture_default_str();
    add_integer(app_, "--batch", batch_, "examples in the gradient check's random batch", 1)
        ->capture_default_str();
    add_integer(app_, "--elements", elements_,
                "elements checked per parameter (of larger ones a seeded sample, half where the "
                "gradient is not zero)",
                1)
        ->capture_default_str();
    // Hidden from --help (an empty group): a deliberately wrong gradient
    // rule, so that a test can watch this command fail
    // (autograd/vjp_fault.hpp says why it is not part of the library's API).
    app_->add_option("--testing-scale-vjp", fault_,
                     "OP=FACTOR: scale the VJP rule of OP by FACTOR (tests only)")
        ->group("");
  }

  void check(const Common&) override {
    require_count("--steps", steps_, 1);
    require_count("--batch", batch_, 1);
    require_count("--elements", elements_, 1);
    if (fault_.empty()) return;
    const size_t eq = fault_.find('=');
    try {
      size_t used = 0;
      factor_ = eq == std::string::npos ? 0 : std::stod(fault_.substr(eq + 1), &used);
      if (eq == std::string::npos || used != fault_.size() - eq - 1)
        throw std::invalid_argument("");
      ws::autograd::VjpFault probe(fault_.substr(0, eq), factor_);
    } catch (const ws::Error& e) {
      throw UsageError(fmt::format("--testing-scale-vjp {}: {}", fault_, e.what()));
    } catch (const std::exception&) {
      throw UsageError(fmt::format("--testing-scale-vjp {}: expected OP=FACTOR", fault_));
    }
  }

  std::string memory_hint() const override {
    return fmt::format("; lower --batch (now {}), the gradient check's batch", batch_);
  }

  int run(const Common& c) override {
    std::optional<ws::autograd::VjpFault> fault;
    if (!fault_.empty()) fault.emplace(fault_.substr(0, fault_.find('=')), factor_);
    const bool all = app_->get_option("--model")->count() == 0;
    std::vector<std::string> failures;
    for (const std::string& name : all ? ws::models::names() : std::vector{c.model}) {
      Common mc = c;
      mc.model = name;
      check_gradients(mc, failures);
      check_modes(mc, failures);
    }
    if (!failures.empty()) {
      fmt::print(stderr, "error: check failed: {}\n", fmt::join(failures, "; "));
      return 1;
    }
    fmt::print("all checks passed\n");
    return 0;
  }

 private:
  void check_gradients(const Common& c, std::vector<std::string>& failures) const {
    const ws::models::Spec spec = ws::models::spec(c.model);
    ws::models::Spec small = spec;
    small.batch = batch_;
    small.gpt.context = std::min(spec.gpt.context, kCheckTokens);
    const ws::TrainSetup s = make_setup(c);
    const ws::check::GradcheckOptions opts{.max_elements = elements_};
    fmt::print(
        "{}: gradient of the loss for each parameter, f64 central differences (eps {}) on the "
        "reference interpreter, a random batch of {}{}, up to {} elements per parameter; pass: "
        "|analytic - numeric| <= {} + {} |numeric|\n",
        c.model, opts.eps, batch_,
        spec.data == ws::models::DataKind::text ? fmt::format(" x {} tokens", small.gpt.context)
                                                : "",
        elements_, opts.atol, opts.rtol);
    const ws::check::GradcheckResult r =
        ws::check::gradcheck(*s.model, s.loss_fn, ws::models::random_batch(small, c.seed), opts);
    fmt::print("{}\n", ws::check::format_gradcheck(r));
    std::vector<std::string> wrong;
    for (const ws::check::ParamCheck& p : r.params)
      if (!p.ok) wrong.push_back(p.name);
    if (!wrong.empty())
      failures.push_back(fmt::format("{}: the gradient of {} differs from finite differences",
                                     c.model, fmt::join(wrong, ", ")));
  }

  void check_modes(const Common& c, std::vector<std::string>& failures) const {
    const ws::models::Spec spec = ws::models::spec(c.model);
    fmt::print(
        "{}: {} {} steps in each mode on random batches of {}; max diff: largest over parameters "
        "and buffers of max|p - p_interpret| / max|p_interpret|; pass below {}\n",
        c.model, steps_, optimizer_name(c), spec.batch, kModeTolerance);
    // Each mode with the step options given.
    std::vector<ws::CompareConfig> configs;
    for (ws::StepMode m :
         {ws::StepMode::interpret, ws::StepMode::three_graph, ws::StepMode::single_graph}) {
      configs.push_back(c.step);
      configs.back().mode = m;
    }
    const std::vector<ws::CompareRow> rows =
        ws::compare_modes([&] { return make_setup(c); }, configs,
                          [&](int64_t i) { return random_step_batch(spec, c.seed, i); }, steps_, 0);
    fmt::print("{:<13}  {:>10}  {:>9}  {:<24}  {}\n", "mode", "final loss", "max diff", "at",
               "result");
    for (const ws::CompareRow& r : rows) {
      const bool ref = r.config.mode == ws::StepMode::interpret;
      const bool ok = r.max_rel_diff < kModeTolerance;
      fmt::print("{:<13}  {:>10.6f}  {:>9}  {:<24}  {}\n", ws::mode_name(r.config.mode),
                 r.final_loss, ref ? "-" : fmt::format("{:.2e}", r.max_rel_diff),
                 r.max_diff_at.empty() ? "-" : r.max_diff_at,
                 ref  ? "reference"
                 : ok ? "pass"
                      : "FAIL");
      if (!ok)
        failures.push_back(fmt::format("{}: {} differs from interpret by {:.2e} in {}", c.model,
                                       ws::mode_name(r.config.mode), r.max_rel_diff,
                                       r.max_diff_at));
    }
    fmt::print("\n");
  }

  int64_t steps_ = 3, batch_ = 2, elements_ = 8;
  std::string fault_;
  double factor_ = 1;
};

}  // namespace

std::unique_ptr<Command> make_check_command(CLI::App& app, Common& c) {
  return std::make_unique<CheckCommand>(app, c);
}

}  // namespace cli
