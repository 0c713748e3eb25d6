#include "ir/dump.hpp"

#include <atomic>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "ir/text.hpp"

namespace ws::ir {

void dump(const Graph& g, const std::string& stage) {
  static std::atomic<int> counter{0};
  const char* dir = std::getenv("WS_DUMP");
  if (!dir || !*dir) return;
  const std::string path = fmt::format("{}/{:03d}-{}.ir", dir, counter++, stage);
  std::ofstream out(path);
  if (!out) throw Error("WS_DUMP: cannot write " + path);
  out << print(g);
}

}  // namespace ws::ir
