// The step options' tables in docs/cli.md (the flags) and docs/pytorch.md
// (the keyword arguments) are the ones generated from
// include/wholestep/step_options.def, and every command that compiles a
// step lists a flag for each option, with the option's default
// (tests/tools/step_flags_test.cpp: each flag sets its option;
// tests/python/test_step_options.py: the Python keywords do).
#include <gtest/gtest.h>

#include "docs/doc_pages.hpp"
#include "step/option_doc.hpp"

namespace ws::testing::docs {
namespace {

TEST(StepOptionsPages, TablesAreTheOnesGeneratedFromStepOptionsDef) {
  for (const char* name : {"docs/cli.md", "docs/pytorch.md"}) {
    const std::string page = read_file(source_path(name));
    EXPECT_TRUE(page == step::with_current_option_tables(page))
        << name << "'s step options table differs from include/wholestep/step_options.def; "
        << "regenerate it from the source directory: cmake --build build --target "
           "gen_options_doc && build/gen_options_doc docs/cli.md docs/pytorch.md";
  }
}

TEST(StepOptionsPages, EachTableHasARowPerOptionWithItsDefault) {
  const std::string flags = step::flag_table_markdown(), keywords = step::keyword_table_markdown();
  for (const StepOptionInfo& info : step_option_infos()) {
    const StepOptionValue d = step::option_default(info);
    EXPECT_NE(keywords.find(fmt::format("| `{}` | `{}` |", info.name, step::python_literal(d))),
              std::string::npos)
        << info.name;
    EXPECT_NE(flags.find(fmt::format("| `{}", step::option_flag(info))), std::string::npos)
        << info.name;
  }
  EXPECT_NE(flags.find("| `--memory-budget X` | `0` |"), std::string::npos) << flags;
  EXPECT_NE(flags.find("| `--no-fuse` | on | fuse (on unless given): "), std::string::npos);
  EXPECT_NE(flags.find("| `--zero` | off | --data-parallel: ZeRO stage 1"), std::string::npos);
  EXPECT_NE(keywords.find("| `on_nonfinite` | `'error'` | 'error', 'skip' or 'ignore' |"),
            std::string::npos)
      << keywords;
  EXPECT_NE(keywords.find("| `memory_budget` | `0.0` | a finite number >= 0 |"), std::string::npos);
}

TEST(StepOptionsPages, RegeneratingReplacesOnlyTheTablesAndAPageNeedsOne) {
  const std::string page =
      fmt::format("# cli\n\n{}\nstale\n{}\n\nafter\n", step::kFlagTableBegin, step::kFlagTableEnd);
  EXPECT_EQ(step::with_current_option_tables(page),
            fmt::format("# cli\n\n{}\n{}{}\n\nafter\n", step::kFlagTableBegin,
                        step::flag_table_markdown(), step::kFlagTableEnd));
  EXPECT_NE(error_of([] {
              step::with_current_option_tables("# no table\n");
            }).find("the page has neither a line"),
            std::string::npos);
  EXPECT_EQ(error_of([] {
              step::with_current_option_tables(fmt::format("{}\nold\n", step::kKeywordTableBegin));
            }),
            fmt::format("the page has no line '{}' after '{}' closing the step keywords' table",
                        step::kKeywordTableEnd, step::kKeywordTableBegin));
}

// Each command that compiles a step: a flag per option in its --help, with
// the option's default (compare and check compile every mode: no --mode).
TEST(StepOptionsPages, EveryCommandThatCompilesAStepListsEachOptionWithItsDefault) {
  for (const std::string command : {"train", "compare", "profile", "check", "graph", "dump"}) {
    SCOPED_TRACE(command);
    const Result r = run_command(fmt::format("{} {} --help", WS_CLI, command));
    ASSERT_EQ(r.status, 0);
    for (const StepOptionInfo& info : step_option_infos()) {
      const std::string flag = step::option_flag(info);
      const size_t at = r.out.find("\n  " + flag + " ");
      if (info.name == "mode" && (command == "compare" || command == "check")) {
        EXPECT_EQ(at, std::string::npos) << flag;
        continue;
      }
      ASSERT_NE(at, std::string::npos) << flag << " is not in --help";
      // The flag's line, its description perhaps on the next one.
      const std::string line = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1) + " ";
      if (info.kind == StepOptionKind::flag) continue;
      EXPECT_NE(line.find("=" + step_option_text(step::option_default(info)) + " "),
                std::string::npos)
          << line;
    }
  }
}

}  // namespace
}  // namespace ws::testing::docs
