// `wholestep info`: what each compute backend runs on this machine (the
// lines every command prints first, ws::backend_info), and nothing else.
#include "commands.hpp"

namespace cli {
namespace {

class InfoCommand : public Command {
 public:
  explicit InfoCommand(CLI::App& parent)
      : Command(parent, "info", "print the CPU, threads and the instruction set of each backend") {}

  void check(const Common&) override {}
  // main has printed the backend lines.
  int run(const Common&) override { return 0; }
};

}  // namespace

std::unique_ptr<Command> make_info_command(CLI::App& app, Common&) {
  return std::make_unique<InfoCommand>(app);
}

}  // namespace cli
