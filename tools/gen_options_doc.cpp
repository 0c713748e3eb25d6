// Rewrites the step options' tables of docs/cli.md (the flags) and
// docs/pytorch.md (the keyword arguments) from the table the library is
// built from (include/wholestep/step_options.def):
// `build/gen_options_doc docs/cli.md docs/pytorch.md`.
#include <cstdio>
#include <string>

#include "doc_page.hpp"
#include "step/option_doc.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PAGE.md... (rewrites each page's step options table)\n",
                 argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; ++i)
    if (const int status = docgen::rewrite_page(
            argv[i],
            [](const std::string& page) { return ws::step::with_current_option_tables(page); },
            "step options table", "include/wholestep/step_options.def"))
      return status;
  return 0;
}
