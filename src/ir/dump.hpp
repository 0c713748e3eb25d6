// WS_DUMP=<dir>: every stage of compilation writes its graph there as text,
// in files numbered in the order they were written ("004-step.fuse.ir").
#pragma once

#include <string>

#include "ir/graph.hpp"

namespace ws::ir {

// Writes `g` to $WS_DUMP/<NNN>-<stage>.ir when WS_DUMP is set.
void dump(const Graph& g, const std::string& stage);

}  // namespace ws::ir
