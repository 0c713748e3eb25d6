// The documentation generators' one job (gen_ops_doc, gen_options_doc):
// rewrite the generated part of a page from the table it is generated
// from, or say that it is current.
#pragma once

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "wholestep/error.hpp"

namespace docgen {

// Rewrites the page at `path` as `update` makes it (a ws::Error: the page
// lacks what is generated), printing whether it changed; `what` names the
// generated part ("op table") and `source` where it comes from. The exit
// status: 0, or 1 with a line on stderr.
inline int rewrite_page(const std::string& path,
                        const std::function<std::string(const std::string&)>& update,
                        const char* what, const char* source) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "error: cannot read %s\n", path.c_str());
    return 1;
  }
  std::stringstream page;
  page << in.rdbuf();
  try {
    const std::string updated = update(page.str());
    if (updated == page.str()) {
      std::printf("%s: the %s is current\n", path.c_str(), what);
      return 0;
    }
    std::ofstream out(path);
    if (!(out << updated).flush()) {
      std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("%s: %s rewritten from %s\n", path.c_str(), what, source);
  } catch (const ws::Error& e) {
    std::fprintf(stderr, "error: %s: %s\n", path.c_str(), e.what());
    return 1;
  }
  return 0;
}

}  // namespace docgen
