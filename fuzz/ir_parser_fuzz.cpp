// The IR text parser and the verifier: any text gives a graph or a
// ws::Error; a graph that parses and verifies prints and parses back to the
// same text.
#include <string_view>

#include "ir/text.hpp"
#include "ir/verify.hpp"
#include "wholestep/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ws::ir::Graph g = ws::ir::parse(text);
    ws::ir::verify(g);
    const std::string printed = ws::ir::print(g);
    if (ws::ir::print(ws::ir::parse(printed)) != printed) __builtin_trap();
  } catch (const ws::Error&) {
  }
  return 0;
}
