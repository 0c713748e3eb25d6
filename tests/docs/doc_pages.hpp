// Reading the pages of docs/ and the code blocks their markers announce.
//
// A marker is an HTML comment on a line of its own (GitHub does not show
// it), followed by a fenced code block:
//   <!-- include: PATH -->            the block is the file PATH (from the
//   <!-- include: PATH#NAME -->       repository root), or its lines between
//                                     `ANCHOR: NAME` and `ANCHOR_END: NAME`
//                                     (dedented);
//   <!-- output: wholestep ARGS -->   the block is what `wholestep ARGS`
//                                     prints;
//   <!-- output: <dir>/FILE of WS_DUMP=<dir> wholestep ARGS -->
//                                     the block is FILE of what that run
//                                     wrote into its WS_DUMP directory;
//   <!-- ir: parses -->               the block is IR text that parses,
//                                     verifies and prints back the same.
// A block holding a line `...` is an excerpt: its runs of lines between
// the `...` lines appear in that order in the source, each run as
// consecutive lines. Command output is compared without source locations
// (` @ "file":line`), arena offsets and sizes, and the backend's
// implementation comments (`  # brg:avx512_core`), which differ between
// machines.
#pragma once

#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "tools/cli_run.hpp"

namespace ws::testing::docs {

namespace fs = std::filesystem;

inline std::string source_path(const std::string& relative) {
  return std::string(WS_SOURCE_DIR) + "/" + relative;
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The Markdown pages of docs/, as paths from the repository root, sorted.
inline std::vector<std::string> doc_pages() {
  std::vector<std::string> pages;
  for (const auto& e : fs::directory_iterator(source_path("docs")))
    if (e.path().extension() == ".md") pages.push_back("docs/" + e.path().filename().string());
  std::sort(pages.begin(), pages.end());
  return pages;
}

struct Block {
  std::string where;   // "docs/ops.md:12", the marker's line
  std::string marker;  // what follows "<!-- " up to " -->"
  std::vector<std::string> lines;
};

// Every marked block of `page` whose marker starts with `kind` ("include: ").
// A marker not followed by a fenced block is a test failure naming its line.
inline std::vector<Block> marked_blocks(const std::string& page, const std::string& kind) {
  const std::vector<std::string> lines = split_lines(read_file(source_path(page)));
  std::vector<Block> blocks;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (!l.starts_with("<!-- " + kind) || !l.ends_with(" -->")) continue;
    Block b{fmt::format("{}:{}", page, i + 1), l.substr(5, l.size() - 9), {}};
    if (i + 1 >= lines.size() || !lines[i + 1].starts_with("```")) {
      ADD_FAILURE() << b.where << ": the marker is not followed by a code block (```)";
      continue;
    }
    size_t j = i + 2;
    for (; j < lines.size() && lines[j] != "```"; ++j) b.lines.push_back(lines[j]);
    if (j == lines.size()) ADD_FAILURE() << b.where << ": the code block is not closed";
    blocks.push_back(std::move(b));
    i = j;
  }
  return blocks;
}

// The lines of `text` between `ANCHOR: name` and `ANCHOR_END: name`, with
// their common indentation removed; nullopt when there is no such region.
inline std::optional<std::vector<std::string>> anchored_region(const std::string& text,
                                                               const std::string& name) {
  std::optional<std::vector<std::string>> region;
  for (const std::string& l : split_lines(text)) {
    if (region && l.ends_with("ANCHOR_END: " + name)) {
      size_t indent = std::string::npos;
      for (const std::string& r : *region)
        if (r.find_first_not_of(' ') != std::string::npos)
          indent = std::min(indent, r.find_first_not_of(' '));
      for (std::string& r : *region) r = r.size() > indent ? r.substr(indent) : "";
      return region;
    }
    if (region) region->push_back(l);
    if (l.ends_with("ANCHOR: " + name)) region.emplace();
  }
  return std::nullopt;
}

// A line of command output as the pages compare it (see the top).
inline std::string normalized(const std::string& line) {
  static const std::regex location(R"( @ "(?:[^"\\]|\\.)*":\d+)");
  static const std::regex comment(R"(  # .*$)");
  static const std::regex offset(R"((arena\+|arena |max live )\d+)");
  std::string s = std::regex_replace(line, location, "");
  s = std::regex_replace(s, comment, "");
  return std::regex_replace(s, offset, "$1N");
}

// Why `block` is not `source` (or an excerpt of it, see the top), or "".
inline std::string excerpt_mismatch(const std::vector<std::string>& block,
                                    const std::vector<std::string>& source) {
  std::vector<std::vector<std::string>> runs(1);
  for (const std::string& l : block) {
    if (l.find_first_not_of(' ') != std::string::npos &&
        l.substr(l.find_first_not_of(' ')) == "...")
      runs.emplace_back();
    else
      runs.back().push_back(l);
  }
  if (runs.size() == 1) {
    if (block == source) return "";
    for (size_t i = 0; i < std::max(block.size(), source.size()); ++i)
      if (i >= block.size() || i >= source.size() || block[i] != source[i])
        return fmt::format("line {} of the block is '{}', the source has '{}'", i + 1,
                           i < block.size() ? block[i] : "(end)",
                           i < source.size() ? source[i] : "(end)");
  }
  size_t at = 0;
  for (const std::vector<std::string>& run : runs) {
    if (run.empty()) continue;
    auto it =
        std::search(source.begin() + std::ptrdiff_t(at), source.end(), run.begin(), run.end());
    if (it == source.end())
      return fmt::format("the lines from '{}' on are not in the source, in order and together",
                         run.front());
    at = size_t(it - source.begin()) + run.size();
  }
  return "";
}

}  // namespace ws::testing::docs
