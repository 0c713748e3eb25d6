#include "ir/op.hpp"

namespace ws::ir {

std::optional<Op> op_from_name(std::string_view name) {
  for (const OpInfo& info : kOpTable)
    if (info.name == name) return info.op;
  return std::nullopt;
}

std::string_view category_name(OpCategory c) {
  switch (c) {
    case OpCategory::source: return "source";
    case OpCategory::elementwise: return "elementwise";
    case OpCategory::reduction: return "reduction";
    case OpCategory::shape: return "shape";
    case OpCategory::contraction: return "contraction";
    case OpCategory::convolution: return "convolution";
    case OpCategory::indexing: return "indexing";
    case OpCategory::random: return "random";
    case OpCategory::fusion: return "fusion";
    case OpCategory::collective: return "collective";
    case OpCategory::opaque: return "opaque";
  }
  return "?";
}

bool is_comparison(Op op) {
  return op == Op::eq || op == Op::ne || op == Op::lt || op == Op::le || op == Op::gt ||
         op == Op::ge;
}

}  // namespace ws::ir
