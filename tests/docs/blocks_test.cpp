// The code blocks of docs/ are real: each marked block is the file, the
// region of a file or the command output its marker names (doc_pages.hpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "docs/doc_pages.hpp"

namespace ws::testing::docs {
namespace {

// What a marker's source holds, or a failure naming what is missing.
std::optional<std::vector<std::string>> included(const Block& b) {
  std::string path = b.marker.substr(std::string("include: ").size()), anchor;
  if (const size_t hash = path.find('#'); hash != std::string::npos)
    anchor = path.substr(hash + 1), path = path.substr(0, hash);
  if (!fs::exists(source_path(path))) {
    ADD_FAILURE() << b.where << ": " << path << " does not exist";
    return std::nullopt;
  }
  const std::string text = read_file(source_path(path));
  if (anchor.empty()) return split_lines(text);
  auto region = anchored_region(text, anchor);
  if (!region) ADD_FAILURE() << b.where << ": " << path << " has no region ANCHOR: " << anchor;
  return region;
}

TEST(DocPages, IncludedBlocksAreTheirSources) {
  int checked = 0;
  for (const std::string& page : doc_pages())
    for (const Block& b : marked_blocks(page, "include: ")) {
      ++checked;
      if (auto source = included(b))
        EXPECT_EQ(excerpt_mismatch(b.lines, *source), "") << b.where << ": " << b.marker;
    }
  EXPECT_GT(checked, 0) << "no page includes a file";
}

// `wholestep ARGS`'s stdout, or the file FILE its WS_DUMP directory got, as
// the pages compare them. Each command line runs once.
std::vector<std::string> output_of(const Block& b) {
  static const std::regex form(R"(output: (?:<dir>/(\S+) of WS_DUMP=<dir> )?wholestep (.+))");
  static std::map<std::string, std::vector<std::string>> cache;
  std::smatch m;
  if (!std::regex_match(b.marker, m, form)) {
    ADD_FAILURE() << b.where << ": '" << b.marker
                  << "' is not 'output: wholestep ARGS' or 'output: <dir>/FILE of "
                     "WS_DUMP=<dir> wholestep ARGS'";
    return {};
  }
  if (auto it = cache.find(b.marker); it != cache.end()) return it->second;
  const fs::path dir = fs::temp_directory_path() / fmt::format("ws_docs_dump_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Result r = run_command(fmt::format("WS_DUMP={} {} {}", dir.string(), WS_CLI, m[2].str()));
  EXPECT_EQ(r.status, 0) << b.where << ": wholestep " << m[2];
  const std::string file = m[1].str();
  if (!file.empty() && !fs::exists(dir / file))
    ADD_FAILURE() << b.where << ": the run wrote no " << file << " into its WS_DUMP directory";
  std::vector<std::string> lines = split_lines(file.empty() ? r.out : read_file(dir / file));
  fs::remove_all(dir);
  for (std::string& l : lines) l = normalized(l);
  return cache[b.marker] = lines;
}

TEST(DocPages, CommandOutputBlocksAreWhatTheCommandPrints) {
  int checked = 0;
  for (const std::string& page : doc_pages())
    for (const Block& b : marked_blocks(page, "output: ")) {
      ++checked;
      std::vector<std::string> block = b.lines;
      for (std::string& l : block) l = normalized(l);
      EXPECT_EQ(excerpt_mismatch(block, output_of(b)), "") << b.where << ": " << b.marker;
    }
  EXPECT_GT(checked, 0) << "no page shows command output";
}

// The rules the checks above rely on can fail.
TEST(DocPages, ExcerptsMustBeInOrderAndTogether) {
  const std::vector<std::string> source = {"a", "b", "c", "d"};
  EXPECT_EQ(excerpt_mismatch({"a", "b", "c", "d"}, source), "");
  EXPECT_EQ(excerpt_mismatch({"a", "  ...", "c", "d"}, source), "");
  EXPECT_EQ(excerpt_mismatch({"...", "b", "..."}, source), "");
  EXPECT_EQ(excerpt_mismatch({"a", "b", "c"}, source),
            "line 4 of the block is '(end)', the source has 'd'");
  EXPECT_EQ(excerpt_mismatch({"a", "...", "d", "c"}, source),
            "the lines from 'd' on are not in the source, in order and together");
  EXPECT_EQ(excerpt_mismatch({"a", "c", "..."}, source),
            "the lines from 'a' on are not in the source, in order and together");
}

TEST(DocPages, OutputIsComparedWithoutWhatDiffersBetweenMachines) {
  EXPECT_EQ(normalized(R"(  %3 = exp %2 : f32[2] @ "/src/models.cpp":143)"),
            "  %3 = exp %2 : f32[2]");
  EXPECT_EQ(
      normalized("  arena+5696 = dnnl_matmul(arena+576, in1) : f32[128,512]  # brg:avx512_core"),
      "  arena+N = dnnl_matmul(arena+N, in1) : f32[128,512]");
  EXPECT_EQ(normalized("program step (30 kernels, arena 1050688 bytes, max live 1050624 bytes)"),
            "program step (30 kernels, arena N bytes, max live N bytes)");
  EXPECT_EQ(normalized("  in6 = fused(mul,sub)(in6, in12) : f32[512,784]"),
            "  in6 = fused(mul,sub)(in6, in12) : f32[512,784]");
}

TEST(DocPages, AnchoredRegionsAreDedented) {
  const std::string text = "a\n  // ANCHOR: r\n  x\n    y\n\n  // ANCHOR_END: r\nb\n";
  EXPECT_EQ(anchored_region(text, "r"), (std::vector<std::string>{"x", "  y", ""}));
  EXPECT_EQ(anchored_region(text, "s"), std::nullopt);
  EXPECT_EQ(anchored_region("// ANCHOR: open\nx\n", "open"), std::nullopt);
}

// GitHub's anchors for the headings of a Markdown file: lower case, spaces
// as '-', other punctuation dropped ("## `wholestep compare`" ->
// "wholestep-compare"). Lines in code blocks are not headings.
std::set<std::string> anchors(const std::string& path) {
  std::set<std::string> out;
  bool code = false;
  for (const std::string& l : split_lines(read_file(path))) {
    if (l.starts_with("```")) code = !code;
    if (code || !l.starts_with("#")) continue;
    std::string slug;
    for (char c : l.substr(l.find_first_not_of('#')))
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')
        slug += char(std::tolower(static_cast<unsigned char>(c)));
      else if (c == ' ')
        slug += '-';
    out.insert(slug.substr(slug.find_first_not_of('-')));
  }
  return out;
}

// Relative links between the pages and to the repository's files resolve,
// and so do their #anchors into Markdown pages. (Pictures, `![..](..)`, are
// not links: docs/img/ is written by a command.)
TEST(DocPages, RelativeLinksAndTheirAnchorsResolve) {
  static const std::regex link(R"((^|[^!])\[[^\]]*\]\(([^)#\s]*)(#[^)\s]*)?\))");
  int checked = 0;
  for (const std::string& page : doc_pages()) {
    const std::string text = read_file(source_path(page));
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link);
         it != std::sregex_iterator(); ++it) {
      const std::string target = (*it)[2], anchor = (*it)[3];
      if (target.find("://") != std::string::npos) continue;
      ++checked;
      const fs::path file = target.empty() ? fs::path(source_path(page))
                                           : fs::path(source_path(page)).parent_path() / target;
      if (!fs::exists(file)) {
        ADD_FAILURE() << page << " links to " << target << ", which does not exist";
        continue;
      }
      if (!anchor.empty() && file.extension() == ".md")
        EXPECT_TRUE(anchors(file).contains(anchor.substr(1)))
            << page << " links to " << target << anchor << ": " << target << " has no such heading";
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(DocPages, AnchorsAreGitHubsHeadingSlugs) {
  const fs::path page = fs::temp_directory_path() / fmt::format("ws_docs_{}.md", ::getpid());
  std::ofstream(page) << "# A page\n## `wholestep compare`\n```sh\n# not a heading\n```\n"
                         "## Speed: backends and threads\n";
  EXPECT_EQ(anchors(page),
            (std::set<std::string>{"a-page", "wholestep-compare", "speed-backends-and-threads"}));
  fs::remove(page);
}

}  // namespace
}  // namespace ws::testing::docs
