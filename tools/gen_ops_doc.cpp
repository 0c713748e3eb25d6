// Rewrites the op table of docs/ops.md from the op table the compiler is
// built from (src/ir/ops.def): `build/gen_ops_doc docs/ops.md`.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "ir/op_doc.hpp"
#include "wholestep/error.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s docs/ops.md (rewrites the page's op table)\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "error: cannot read %s\n", path.c_str());
    return 1;
  }
  std::stringstream page;
  page << in.rdbuf();
  try {
    const std::string updated = ws::ir::with_current_op_table(page.str());
    if (updated == page.str()) {
      std::printf("%s: the op table is current\n", path.c_str());
      return 0;
    }
    std::ofstream out(path);
    if (!(out << updated).flush()) {
      std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("%s: op table rewritten from src/ir/ops.def\n", path.c_str());
  } catch (const ws::Error& e) {
    std::fprintf(stderr, "error: %s: %s\n", path.c_str(), e.what());
    return 1;
  }
  return 0;
}
