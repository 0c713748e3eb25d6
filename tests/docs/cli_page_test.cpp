// docs/cli.md documents the program as it is: a section for every command
// `wholestep --help` lists, and in each section's option table exactly the
// options the command's --help lists (those every command but info and opt
// takes are in one table of their own, and so are the step options, which
// they take too, but compare and check --mode).
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "docs/doc_pages.hpp"

namespace ws::testing::docs {
namespace {

constexpr const char* kCommonSection = "Options of every command but info and opt";
constexpr const char* kStepSection = "Step options of every command that compiles a step";
// The commands that take none of the common options, nor the step options.
const std::set<std::string> kWithoutCommon = {"info", "opt"};
// The commands that take the step options but --mode (they compile several).
const std::set<std::string> kWithoutMode = {"compare", "check"};

// The page's `## <title>` sections: title -> lines.
std::map<std::string, std::vector<std::string>> sections() {
  std::map<std::string, std::vector<std::string>> out;
  std::vector<std::string>* cur = nullptr;
  for (const std::string& l : split_lines(read_file(source_path("docs/cli.md")))) {
    if (l.starts_with("## "))
      cur = &out[l.substr(3)];
    else if (cur)
      cur->push_back(l);
  }
  return out;
}

// The options in the first column of a section's tables: "| `--lr FLOAT` |".
std::set<std::string> documented(const std::vector<std::string>& lines) {
  static const std::regex row(R"(^\| `(--[a-z][a-z0-9-]*)[ `])");
  std::set<std::string> out;
  std::smatch m;
  for (const std::string& l : lines)
    if (std::regex_search(l, m, row)) out.insert(m[1]);
  return out;
}

std::string help(const std::string& command) {
  const Result r = run_command(fmt::format("{} {} --help", WS_CLI, command));
  EXPECT_EQ(r.status, 0) << command;
  return r.out;
}

// The options `wholestep <command> --help` lists, --help itself aside.
std::set<std::string> options_of(const std::string& command) {
  static const std::regex option(R"(^  (?:-\w,)?(--[a-z][a-z0-9-]*))");
  std::set<std::string> out;
  std::smatch m;
  for (const std::string& l : split_lines(help(command)))
    if (std::regex_search(l, m, option) && m[1] != "--help") out.insert(m[1]);
  return out;
}

std::vector<std::string> commands() {
  std::vector<std::string> out;
  bool listing = false;
  for (const std::string& l : split_lines(help(""))) {
    if (l == "Subcommands:")
      listing = true;
    else if (listing && l.starts_with("  "))
      out.push_back(l.substr(2, l.find(' ', 2) - 2));
  }
  return out;
}

TEST(CliPage, EveryCommandHasASection) {
  const auto page = sections();
  const std::vector<std::string> cmds = commands();
  EXPECT_GE(cmds.size(), 5u);
  for (const std::string& c : cmds)
    EXPECT_TRUE(page.contains(c)) << "docs/cli.md has no section '## " << c << "'";
}

TEST(CliPage, EachSectionListsExactlyTheOptionsOfItsCommand) {
  const auto page = sections();
  for (const char* section : {kCommonSection, kStepSection})
    ASSERT_TRUE(page.contains(section)) << "docs/cli.md has no '## " << section << "'";
  const std::set<std::string> common = documented(page.at(kCommonSection)),
                              step = documented(page.at(kStepSection));
  EXPECT_GE(common.size(), 10u);
  EXPECT_GE(step.size(), 10u);
  for (const std::string& c : commands()) {
    if (!page.contains(c)) continue;  // EveryCommandHasASection says so
    const std::set<std::string> options = options_of(c), own = documented(page.at(c));
    std::set<std::string> shown = own;
    if (!kWithoutCommon.contains(c)) {
      shown.insert(common.begin(), common.end());
      shown.insert(step.begin(), step.end());
      if (kWithoutMode.contains(c)) shown.erase("--mode");
    }
    for (const std::string& o : options)
      EXPECT_TRUE(shown.contains(o)) << "docs/cli.md does not document " << c << " " << o;
    for (const std::string& o : shown)
      EXPECT_TRUE(options.contains(o)) << "docs/cli.md documents " << c << " " << o
                                       << ", which `wholestep " << c << " --help` does not list";
  }
}

}  // namespace
}  // namespace ws::testing::docs
