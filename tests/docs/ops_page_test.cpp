// docs/ops.md: its op table is the one generated from ops.def, and its IR
// examples are IR the parser reads.
#include <gtest/gtest.h>

#include "docs/doc_pages.hpp"
#include "ir/op_doc.hpp"
#include "ir/text.hpp"

namespace ws::testing::docs {
namespace {

TEST(OpsPage, OpTableIsTheOneGeneratedFromOpsDef) {
  const std::string page = read_file(source_path("docs/ops.md"));
  EXPECT_TRUE(page == ir::with_current_op_table(page))
      << "docs/ops.md's op table differs from src/ir/ops.def; regenerate it from the source "
         "directory: cmake --build build --target gen_ops_doc && build/gen_ops_doc docs/ops.md";
}

TEST(OpsPage, GeneratedTableHasARowForEveryOp) {
  const std::string table = ir::op_table_markdown();
  for (const ir::OpInfo& info : ir::kOpTable) {
    const std::string row = fmt::format("| `{}` | {} | {} |", info.name,
                                        info.arity < 0 ? "any" : std::to_string(info.arity),
                                        ir::category_name(info.category));
    EXPECT_NE(table.find(row), std::string::npos) << row;
  }
  EXPECT_NE(
      table.find("| `conv2d` | 2 | convolution | yes | `stride?:ints=[1]` "
                 "`padding?:ints=[0]` `dilation?:ints=[1]` `groups?:int=1` `layout?:string` |"),
      std::string::npos);
  EXPECT_NE(table.find("beta\\*c + alpha\\*(a @ b)"), std::string::npos) << "'*' is escaped";
}

TEST(OpsPage, PageWithoutTheMarkersIsAnErrorNamingTheMissingOne) {
  EXPECT_EQ(error_of([] { ir::with_current_op_table("# ops\n"); }),
            fmt::format("the page has no line '{}' opening the op table", ir::kOpTableBegin));
  EXPECT_EQ(error_of([] {
              ir::with_current_op_table(fmt::format("# ops\n{}\nold table\n", ir::kOpTableBegin));
            }),
            fmt::format("the page has no line '{}' after '{}' closing the op table",
                        ir::kOpTableEnd, ir::kOpTableBegin));
  // A marker must be a line of its own: mentioned in a sentence, it is not one.
  EXPECT_EQ(
      error_of([&] { ir::with_current_op_table(fmt::format("see {}\n", ir::kOpTableBegin)); }),
      fmt::format("the page has no line '{}' opening the op table", ir::kOpTableBegin));
}

TEST(OpsPage, RegeneratingReplacesOnlyTheTable) {
  const std::string page =
      fmt::format("# ops\n\n{}\nstale\n{}\n\nafter\n", ir::kOpTableBegin, ir::kOpTableEnd);
  EXPECT_EQ(ir::with_current_op_table(page),
            fmt::format("# ops\n\n{}\n{}{}\n\nafter\n", ir::kOpTableBegin, ir::op_table_markdown(),
                        ir::kOpTableEnd));
}

// Every IR block of the page (taken from a golden file or written there)
// parses, verifies and prints back as written.
TEST(OpsPage, IrExamplesParseAndPrintBackTheSame) {
  int checked = 0;
  for (const std::string& kind : {"include: tests/", "ir: parses"})
    for (const Block& b : marked_blocks("docs/ops.md", kind)) {
      if (kind.starts_with("include") && !b.marker.ends_with(".ir")) continue;
      std::string text;
      for (const std::string& l : b.lines) text += l + "\n";
      try {
        EXPECT_EQ(ir::print(ir::parse(text)), text) << b.where;
      } catch (const std::exception& e) {
        ADD_FAILURE() << b.where << ": " << e.what();
      }
      ++checked;
    }
  EXPECT_GE(checked, 3);
}

}  // namespace
}  // namespace ws::testing::docs
