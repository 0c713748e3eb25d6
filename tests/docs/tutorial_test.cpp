// docs/tutorial.md's program (examples/tutorial.cpp) does what the page
// says, and the page shows all of it.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "docs/doc_pages.hpp"

namespace ws::testing::docs {
namespace {

// The first match of `pattern` in `text`, group 1, as a number.
double number_after(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) {
    ADD_FAILURE() << "no '" << pattern << "' in the output:\n" << text;
    return std::nan("");
  }
  return std::stod(m[1]);
}

TEST(Tutorial, ProgramLearnsAgreesAcrossModesAndPassesGradcheck) {
  const Result r = run_command(WS_TUTORIAL);
  ASSERT_EQ(r.status, 0) << r.out;
  const double first = number_after(r.out, R"(step +1  loss ([0-9.]+))");
  const double last = number_after(r.out, R"(step 300  loss ([0-9.]+))");
  EXPECT_LT(last, first / 4) << r.out;
  EXPECT_EQ(number_after(r.out, R"(traced (\d+) time)"), 1) << "a new learning rate retraced";
  EXPECT_GT(number_after(r.out, R"(held-out accuracy ([0-9.]+))"), 0.9) << r.out;
  // The comparison: every mode's parameters after the last step against
  // interpret's (the last column).
  for (const char* mode : {"interpret", "three_graph", "single_graph"})
    EXPECT_LT(number_after(r.out, std::string("\n") + mode + R"( .* ([0-9.e+-]+)\n)"), 1e-5)
        << mode;
  EXPECT_NE(r.out.find("gradcheck ok: "), std::string::npos) << r.out;
  EXPECT_GT(number_after(r.out, R"(gradcheck ok: (\d+) elements)"), 100);
}

TEST(Tutorial, PageShowsEveryRegionOfTheProgramInOrder) {
  std::vector<std::string> regions;
  static const std::regex anchor(R"(// ANCHOR: (\w+))");
  const std::string program = read_file(source_path("examples/tutorial.cpp"));
  for (auto it = std::sregex_iterator(program.begin(), program.end(), anchor);
       it != std::sregex_iterator(); ++it)
    regions.push_back((*it)[1]);
  std::vector<std::string> shown;
  for (const Block& b : marked_blocks("docs/tutorial.md", "include: examples/tutorial.cpp#"))
    shown.push_back(b.marker.substr(b.marker.find('#') + 1));
  EXPECT_EQ(shown, regions);
  EXPECT_GE(regions.size(), 5u);
}

}  // namespace
}  // namespace ws::testing::docs
