// Ops of the graph IR, generated from ops.def.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ws::ir {

enum class Op : uint8_t {
#define WS_OP(e, text, arity, cat, diff, attrs, meaning) e,
#include "ir/ops.def"
#undef WS_OP
};

enum class OpCategory : uint8_t {
  source,       // input, full, constant: no operands
  elementwise,  // same-shape operands, one result element per operand element
  reduction,    // reduce over axes
  shape,        // broadcast, reshape, transpose: moves elements, computes nothing
  contraction,  // matmul
  convolution,
  indexing,  // one_hot, gather
  random,
  fusion,  // a group of ops run as one kernel (its body), and its extra results
  // Over the process group, with an effect and an order: every rank starts
  // the same collectives in the same order (their seq), and a start's
  // buffer is read only by its wait.
  collective,
  opaque,  // a kernel of its own over whole operands (ctc_loss): passes move it, never look in
};

constexpr int kNumOps = 0
#define WS_OP(e, text, arity, cat, diff, attrs, meaning) +1
#include "ir/ops.def"
#undef WS_OP
    ;

struct OpInfo {
  Op op;
  std::string_view name;
  int arity;  // -1: variadic
  OpCategory category;
  bool differentiable;
  std::string_view attrs;    // the attribute schema (see ops.def and attr_schema.hpp)
  std::string_view meaning;  // one line, for docs/ops.md
};

inline constexpr std::array<OpInfo, kNumOps> kOpTable = {{
#define WS_OP(e, text, ar, cat, diff, attrs, meaning) \
  {Op::e, text, ar, OpCategory::cat, diff, attrs, meaning},
#include "ir/ops.def"
#undef WS_OP
}};

inline constexpr const OpInfo& op_info(Op op) { return kOpTable[size_t(op)]; }
inline constexpr std::string_view op_name(Op op) { return op_info(op).name; }
std::optional<Op> op_from_name(std::string_view name);
std::string_view category_name(OpCategory c);

// Comparisons produce bool from two operands of one type.
bool is_comparison(Op op);

}  // namespace ws::ir
