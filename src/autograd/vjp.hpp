// VJP rules: one per differentiable op, in one table (vjp_rules.cpp).
#pragma once

#include <vector>

#include "ir/builder.hpp"

namespace ws::autograd {

struct VjpContext {
  ir::Builder& b;
  const ir::Node& node;           // the forward node (a copy: safe while appending)
  ir::ValueId out;                // its value
  ir::ValueId dy;                 // gradient of the loss w.r.t. `out`
  const std::vector<bool>& want;  // want[i]: operand i needs a gradient
};

// Fills dargs[i] (pre-sized, kNoValue) with the gradient for operand i where
// want[i]. Returns the rule for `op`, or nullptr when op has none.
using VjpRule = void (*)(const VjpContext& c, std::vector<ir::ValueId>& dargs);
VjpRule vjp_rule(ir::Op op);
// Makes `rule` the rule of `op` and returns the one it replaces: how the
// tests' deliberately wrong rules (vjp_fault.hpp) get in without the
// differentiation itself knowing of them. Not thread-safe.
VjpRule replace_vjp_rule(ir::Op op, VjpRule rule);

}  // namespace ws::autograd
