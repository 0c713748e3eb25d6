// `wholestep graph`: a picture of a compiled step (TrainStep::graph_dot) at
// one stage, written as Graphviz DOT, or rendered to SVG by Graphviz's
// `dot` when it is installed. Without it an .svg request writes the DOT
// file beside and says how to render it.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "commands.hpp"
#include "group.hpp"
#include "run.hpp"

extern char** environ;

namespace cli {
namespace {

namespace fs = std::filesystem;

constexpr std::pair<const char*, ws::GraphStage> kStages[] = {
    {"joint", ws::GraphStage::joint},
    {"partitioned", ws::GraphStage::partitioned},
    {"lowered", ws::GraphStage::lowered},
};

// The stage named `name`, or none.
std::optional<ws::GraphStage> stage_named(const std::string& name) {
  for (const auto& [n, stage] : kStages)
    if (name == n) return stage;
  return std::nullopt;
}

// The path of `program` found through $PATH, or "".
std::string find_program(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const fs::path p = fs::path(dirs.substr(start, end - start)) / program;
    if (end > start && ::access(p.c_str(), X_OK) == 0) return p.string();
    start = end + 1;
  }
  return "";
}

// Runs `argv` (no shell) and waits; its exit status, or -1.
int run_program(std::vector<std::string> argv) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  // The program gets no blocked signals: this process blocks SIGINT and
  // SIGTERM in every thread for its watchdog (stop.hpp).
  posix_spawnattr_t attr;
  ::posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], nullptr, &attr, args.data(), environ);
  ::posix_spawnattr_destroy(&attr);
  if (spawned != 0) return -1;
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

class GraphCommand : public Command {
 public:
  GraphCommand(CLI::App& parent, Common& c)
      : Command(parent, "graph",
                "draw a compiled step with Graphviz: forward, backward and optimizer ops, "
                "parameters and their in-place updates, values passed between graphs, fused "
                "kernels",
                c) {
    app_->add_option("--stage", stage_,
                     "joint (traced and differentiated, one graph) | partitioned (the graphs "
                     "the step runs) | lowered (as their programs run them, with fused kernels)")
        ->capture_default_str();
    app_->add_option("-o,--output", output_, "FILE.svg (rendered by Graphviz's dot) or FILE.dot")
        ->required();
  }

  void check(const Common& c) override {
    if (c.step.mode == ws::StepMode::interpret)
      throw UsageError(
          "--mode interpret: graph draws a compiled step; use single_graph or "
          "three_graph");
    require(stage_named(stage_).has_value(), "--stage", stage_,
            "expected joint, partitioned or lowered");
    const std::string ext = fs::path(output_).extension().string();
    require(ext == ".svg" || ext == ".dot", "-o", output_,
            "expected a file name ending in .svg or .dot");
    check_output_file("-o", output_);
  }

  int run(const Common& c) override {
    ws::TrainSetup s = make_setup(c);
    ws::TrainStep step(*s.model, *s.opt, s.loss_fn, c.step);
    // Compiles the step, on this rank's rows of one random global batch.
    step.run(rank_rows(ws::models::random_batch(global_spec(ws::models::spec(c.model)), 0)));
    if (!leads()) return 0;  // rank 0 writes the picture
    const std::string dot = step.graph_dot(*stage_named(stage_));
    const std::string what = fmt::format("{} {} ({})", c.model, ws::mode_name(c.step.mode), stage_);
    if (fs::path(output_).extension() == ".dot") {
      write_text_file(output_, dot, "graph");
      fmt::print("wrote {}: {} (render: dot -Tsvg {} -o step.svg)\n", output_, what, output_);
      return 0;
    }
    const std::string renderer = find_program("dot");
    if (renderer.empty()) {
      const std::string dot_file = fs::path(output_).replace_extension(".dot").string();
      write_text_file(dot_file, dot, "graph");
      fmt::print(
          "wrote {}: {}; Graphviz's dot is not installed (apt-get install graphviz), then: dot "
          "-Tsvg {} -o {}\n",
          dot_file, what, dot_file, output_);
      return 0;
    }
    // The DOT text in a temporary file dot reads: no shell, any file name.
    const fs::path tmp =
        fs::temp_directory_path() / fmt::format("wholestep_graph_{}.dot", ::getpid());
    write_text_file(tmp.string(), dot, "graph");
    const int status = run_program({renderer, "-Tsvg", "-o", output_, tmp.string()});
    fs::remove(tmp);
    if (status != 0)
      throw ws::Error(
          fmt::format("graph: {} -Tsvg -o {} failed (exit status {})", renderer, output_, status));
    fmt::print("wrote {}: {}\n", output_, what);
    return 0;
  }

 private:
  std::string stage_ = "partitioned", output_;
};

}  // namespace

std::unique_ptr<Command> make_graph_command(CLI::App& app, Common& c) {
  return std::make_unique<GraphCommand>(app, c);
}

}  // namespace cli
