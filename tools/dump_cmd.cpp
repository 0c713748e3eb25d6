// `wholestep dump`: a compiled step as text, its graphs and programs; or
// how it is partitioned: what the forward keeps for the backward and what
// the backward recomputes (--explain), as Graphviz DOT (--dot). With
// --data-parallel (under mpirun), rank 0 prints the step of its part of
// one global batch, its collectives with it.
#include <fmt/format.h>

#include "commands.hpp"
#include "group.hpp"
#include "run.hpp"

namespace cli {
namespace {

class DumpCommand : public Command {
 public:
  DumpCommand(CLI::App& parent, Common& c)
      : Command(parent, "dump", "print the compiled graphs and programs", c) {
    app_->add_flag(
        "--explain", explain_,
        "what the forward keeps for the backward, what the backward recomputes, and why");
    app_->add_option("--dot", dot_, "write the partitioned step as Graphviz DOT to this file");
  }

  // Its output is the listings alone.
  bool prints_backend_info() const override { return false; }

  void check(const Common&) override {
    if (!dot_.empty()) check_output_file("--dot", dot_);
  }

  int run(const Common& c) override {
    ws::TrainSetup s = make_setup(c);
    ws::TrainStep step(*s.model, *s.opt, s.loss_fn, c.step);
    // This rank's rows of one random global batch (all of it in one process).
    step.run(rank_rows(ws::models::random_batch(global_spec(ws::models::spec(c.model)), 0)));
    if ((explain_ || !dot_.empty()) && step.partition_report().empty())
      throw ws::Error(
          fmt::format("dump: --explain and --dot describe how a compiled step is partitioned; "
                      "--mode {} interprets the step graph unpartitioned",
                      ws::mode_name(c.step.mode)));
    if (!dot_.empty() && leads()) {
      write_text_file(dot_, step.partition_dot(), "dump");
      fmt::print("wrote {} (render: dot -Tpng {} -o step.png)\n", dot_, dot_);
    }
    if (explain_) {
      fmt::print("{}", step.partition_report());
      return 0;
    }
    if (dot_.empty()) fmt::print("{}\n{}", step.graphs_text(), step.programs_text());
    return 0;
  }

 private:
  std::string dot_;
  bool explain_ = false;
};

}  // namespace

std::unique_ptr<Command> make_dump_command(CLI::App& app, Common& c) {
  return std::make_unique<DumpCommand>(app, c);
}

}  // namespace cli
