// The command line's flags of the step options (tools/step_flags.cpp, built
// into this test): with no flag every option is the struct's default, and
// each flag sets its option, by the name docs/cli.md's table gives it.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "options.hpp"
#include "step/option_doc.hpp"
#include "step_flags.hpp"

namespace {

using ws::StepOptionInfo;
using ws::StepOptionKind;
using ws::StepOptionValue;

// `args` parsed by a command with the step flags; the options they set.
ws::StepOptions parsed(std::vector<std::string> args, bool with_mode = true) {
  CLI::App app;
  ws::StepOptions o;
  std::string progress = "kernels";
  cli::add_step_flags(&app, o, progress, with_mode);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  return o;
}

// The arguments that set `info` away from its default, and the value.
std::pair<std::vector<std::string>, StepOptionValue> away(const StepOptionInfo& info) {
  const std::string flag = ws::step::option_flag(info);
  const StepOptionValue d = ws::step::option_default(info);
  switch (info.kind) {
    case StepOptionKind::flag: return {{flag}, !std::get<bool>(d)};
    case StepOptionKind::integer:
      return {{flag, std::to_string(std::get<int64_t>(d) + 3)}, std::get<int64_t>(d) + 3};
    case StepOptionKind::number: return {{flag, "0.25"}, std::get<double>(d) + 0.25};
    case StepOptionKind::choice:
      for (const char* name : info.choices)
        if (name != std::get<std::string>(d)) return {{flag, name}, std::string(name)};
  }
  return {{}, d};
}

TEST(StepFlags, WithoutFlagsEveryOptionIsTheStructsDefault) {
  const ws::StepOptions o = parsed({});
  for (const StepOptionInfo& info : ws::step_option_infos())
    EXPECT_EQ(ws::get_step_option(o, info.name), ws::step::option_default(info)) << info.name;
}

TEST(StepFlags, EachFlagSetsItsOptionAlone) {
  for (const StepOptionInfo& info : ws::step_option_infos()) {
    const auto [args, value] = away(info);
    SCOPED_TRACE(fmt::format("{}", fmt::join(args, " ")));
    const ws::StepOptions o = parsed(args);
    EXPECT_EQ(ws::get_step_option(o, info.name), value);
    for (const StepOptionInfo& other : ws::step_option_infos()) {
      if (other.name == info.name) continue;
      EXPECT_EQ(ws::get_step_option(o, other.name), ws::step::option_default(other));
    }
  }
}

TEST(StepFlags, CommandsOfSeveralModesTakeNoMode) {
  EXPECT_THROW(parsed({"--mode", "three_graph"}, /*with_mode=*/false), CLI::ParseError);
  EXPECT_EQ(parsed({"--mode", "three_graph"}).mode, ws::StepMode::three_graph);
  EXPECT_THROW(parsed({"--mode", "fast"}), cli::UsageError);
}

}  // namespace
