// lower: Graph -> Program, as a readable sequence of passes.
#pragma once

#include "exec/program.hpp"
#include "ir/graph.hpp"

namespace ws::lower {

struct LowerOptions {
  // Write in-place updates into their inputs' storage. Off only for
  // comparison: then every update is computed aside and copied.
  bool in_place_updates = true;
};

exec::Program lower(const ir::Graph& g, const LowerOptions& opts = {});

}  // namespace ws::lower
