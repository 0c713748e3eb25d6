#include "commands.hpp"

namespace cli {

std::vector<std::unique_ptr<Command>> add_commands(CLI::App& app, Common& c) {
  std::vector<std::unique_ptr<Command>> all;
  all.push_back(make_train_command(app, c));
  all.push_back(make_check_command(app, c));
  all.push_back(make_graph_command(app, c));
  all.push_back(make_opt_command(app, c));
  all.push_back(make_compare_command(app, c));
  all.push_back(make_profile_command(app, c));
  all.push_back(make_info_command(app, c));
  all.push_back(make_dump_command(app, c));
  return all;
}

}  // namespace cli
