// docs/ops.md's op table, generated from ops.def (the op table the compiler
// itself is built from), so the page cannot say anything the compiler does
// not know. `build/gen_ops_doc docs/ops.md` rewrites the table in the page;
// a test (tests/docs) fails when the committed page differs.
#pragma once

#include <string>
#include <string_view>

namespace ws::ir {

// The lines that open and close the generated table in docs/ops.md.
inline constexpr std::string_view kOpTableBegin =
    "<!-- op table: generated from src/ir/ops.def by build/gen_ops_doc; do not edit -->";
inline constexpr std::string_view kOpTableEnd = "<!-- end of op table -->";

// A Markdown table with one row per op (name, operands, category,
// differentiable, attribute schema, meaning), then a line on the
// attributes every op takes.
std::string op_table_markdown();

// `page` with the text between the kOpTableBegin and kOpTableEnd lines
// replaced by op_table_markdown(). A page without both lines, in that
// order, is a ws::Error naming the missing one.
std::string with_current_op_table(std::string_view page);

// What with_current_op_table does, for any generated part of a page (the
// step options' tables too): `page` with the text between the line
// `begin` and the next line `end` replaced by `body`; a page without both
// lines, in that order, is a ws::Error naming the missing one and `what`
// the part is ("the op table"). A marker is a line of its own: mentioned
// in a sentence, it is not one.
std::string with_generated_part(std::string_view page, std::string_view begin, std::string_view end,
                                std::string_view body, std::string_view what);
// Text in a Markdown table cell: `|` would end the cell and `*` start
// emphasis, so they are escaped.
std::string table_cell(std::string_view text);
// Whether `page` has the line `marker`.
bool has_line(std::string_view page, std::string_view marker);

}  // namespace ws::ir
