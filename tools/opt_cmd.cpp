// `wholestep opt --passes=a,b FILE.ir`: lowering passes (lower/pipeline.hpp)
// run by name, in order, over a graph given as IR text, and the result
// printed as IR text, as mlir-opt does for MLIR: each pass is tested this
// way (tests/lower/<pass>/). The verifier, with a print/parse round trip,
// checks the graph after every pass; WS_DUMP writes it too. An unknown
// pass, or an input that cannot be read or parsed, is a usage error.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "commands.hpp"
#include "ir/dump.hpp"
#include "ir/text.hpp"
#include "ir/verify.hpp"
#include "lower/pipeline.hpp"

namespace cli {
namespace {

class OptCommand : public Command {
 public:
  explicit OptCommand(CLI::App& parent)
      : Command(parent, "opt",
                "run lowering passes over a graph in IR text, in order, and print the result") {
    app_->add_option(
            "--passes", passes_,
            "the passes to run, comma-separated, in order (" + ws::lower::pass_names() + ")")
        ->required();
    app_->add_option("-o,--output", output_, "write the IR text to FILE instead of stdout");
    app_->add_option("file", input_, "the graph, as IR text (FILE.ir)")->required();
  }

  bool prints_backend_info() const override { return false; }

  void check(const Common&) override {
    for (size_t start = 0; start <= passes_.size();) {
      size_t end = passes_.find(',', start);
      if (end == std::string::npos) end = passes_.size();
      const std::string name = passes_.substr(start, end - start);
      const ws::lower::Pass* p = ws::lower::find_pass(name);
      if (!p)
        throw UsageError(fmt::format("--passes {}: no pass '{}'; the passes are {}", passes_, name,
                                     ws::lower::pass_names()));
      run_.push_back(*p);
      start = end + 1;
    }
    if (!output_.empty()) check_output_file("-o", output_);
    std::ifstream in(input_, std::ios::binary);
    if (!in) throw UsageError(fmt::format("{}: cannot read the file", input_));
    std::stringstream text;
    text << in.rdbuf();
    try {
      graph_ = ws::ir::parse(text.str());
    } catch (const ws::Error& e) {
      throw UsageError(fmt::format("{}: {}", input_, e.what()));
    }
  }

  int run(const Common&) override {
    ws::ir::Graph g = std::move(graph_);
    for (const ws::lower::Pass& p : run_) {
      bool changed = false;
      g = p.run(g, &changed);
      ws::ir::verify_with_round_trip(g);
      ws::ir::dump(g, g.name + "." + p.name + (changed ? "" : ".unchanged"));
    }
    const std::string text = ws::ir::print(g);
    if (output_.empty())
      fmt::print("{}", text);
    else
      write_text_file(output_, text, "opt");
    return 0;
  }

 private:
  std::string passes_, output_, input_;
  std::vector<ws::lower::Pass> run_;
  ws::ir::Graph graph_;
};

}  // namespace

std::unique_ptr<Command> make_opt_command(CLI::App& app, Common&) {
  return std::make_unique<OptCommand>(app);
}

}  // namespace cli
