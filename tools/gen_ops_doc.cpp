// Rewrites the op table of docs/ops.md from the op table the compiler is
// built from (src/ir/ops.def): `build/gen_ops_doc docs/ops.md`.
#include <cstdio>
#include <string>

#include "doc_page.hpp"
#include "ir/op_doc.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s docs/ops.md (rewrites the page's op table)\n", argv[0]);
    return 2;
  }
  return docgen::rewrite_page(
      argv[1], [](const std::string& page) { return ws::ir::with_current_op_table(page); },
      "op table", "src/ir/ops.def");
}
