// The verifier: structural invariants of a Graph. A failure is a bug in
// whichever pass produced the graph, so it throws ws::InternalError naming the
// node and the broken rule. Runs after every pass in tests and debug builds.
#pragma once

#include "ir/graph.hpp"

namespace ws::ir {

// Checks: args refer to earlier nodes (topological order, SSA); arity; every
// non-source node's type equals infer_type of its operands; `inputs` lists
// exactly the input nodes, each once, with a known role and a name; outputs
// refer to existing values; an `update` output names an input node of the
// same type, no two updates alias one input, and only updates alias.
void verify(const Graph& g);

// verify(), plus: printing, parsing and printing again gives the same text.
// What the pipeline runs after each stage when verification is on.
void verify_with_round_trip(const Graph& g);

// True when verification runs after every pass (tests, debug builds, or the
// WS_VERIFY=1 environment variable).
bool verify_enabled();
void set_verify_enabled(bool on);

}  // namespace ws::ir
