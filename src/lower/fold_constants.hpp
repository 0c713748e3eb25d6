// fold_constants: a value computed by elementwise and shape ops from
// constants alone (`full`, `iota`, `constant`, or values folded already),
// of at most 64 KiB, becomes a `constant` holding its values, computed once
// here by the reference kernels (a causal mask from iotas). Larger values,
// reductions, random draws and anything reading an input stay ops: a kernel
// computes them each step. A value whose elements a `constant` cannot hold
// exactly (its values are doubles) stays too, and so does a reshape (a view
// of its operand's bytes; its readers fold). Runs last, after fusion, so
// only values no fused loop computes are folded; lowering places the
// remaining sources among the program's constants.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph fold_constants(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
