#include "ir/op_doc.hpp"

#include <fmt/format.h>

#include "ir/attr_schema.hpp"
#include "ir/op.hpp"
#include "wholestep/error.hpp"

namespace ws::ir {
namespace {

// "`kernel:ints` `stride?:ints`": each word of a schema as code.
std::string schema_cell(std::string_view schema) {
  std::string out;
  while (!schema.empty()) {
    const size_t end = std::min(schema.find(' '), schema.size());
    if (end > 0) out += fmt::format("{}`{}`", out.empty() ? "" : " ", schema.substr(0, end));
    schema.remove_prefix(std::min(end + 1, schema.size()));
  }
  return out;
}

}  // namespace

std::string op_table_markdown() {
  std::string out =
      "| op | operands | category | differentiable | attributes | meaning |\n"
      "|---|---|---|---|---|---|\n";
  for (const OpInfo& info : kOpTable) {
    WS_CHECK(!info.meaning.empty() && info.meaning.find('\n') == std::string_view::npos)
        << "ops.def: " << info.name << " needs a one-line meaning";
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", info.name,
                       info.arity < 0 ? std::string("any") : std::to_string(info.arity),
                       category_name(info.category), info.differentiable ? "yes" : "no",
                       schema_cell(info.attrs), table_cell(info.meaning));
  }
  out += fmt::format("\n{} ops. Every op also takes the common attributes {}.\n", kOpTable.size(),
                     schema_cell(kCommonAttrs));
  return out;
}

std::string table_cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|' || c == '*') out += '\\';
    out += c;
  }
  return out;
}

namespace {

// Where the line `marker` starts in `page` at or after `from`, or npos.
size_t line_at(std::string_view page, std::string_view marker, size_t from) {
  size_t at = page.find(marker, from);
  while (at != std::string_view::npos && at > 0 && page[at - 1] != '\n')
    at = page.find(marker, at + 1);
  return at;
}

}  // namespace

bool has_line(std::string_view page, std::string_view marker) {
  return line_at(page, marker, 0) != std::string_view::npos;
}

std::string with_generated_part(std::string_view page, std::string_view begin,
                                std::string_view end_marker, std::string_view body,
                                std::string_view what) {
  const size_t begin_at = line_at(page, begin, 0);
  if (begin_at == std::string_view::npos)
    throw Error(fmt::format("the page has no line '{}' opening {}", begin, what));
  const size_t body_at = page.find('\n', begin_at);
  const size_t end =
      body_at == std::string_view::npos ? body_at : line_at(page, end_marker, body_at);
  if (end == std::string_view::npos)
    throw Error(
        fmt::format("the page has no line '{}' after '{}' closing {}", end_marker, begin, what));
  return fmt::format("{}\n{}{}", page.substr(0, body_at), body, page.substr(end));
}

std::string with_current_op_table(std::string_view page) {
  return with_generated_part(page, kOpTableBegin, kOpTableEnd, op_table_markdown(), "the op table");
}

}  // namespace ws::ir
