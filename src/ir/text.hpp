// The stable text form of a Graph: print, and parse back (exact round trip).
//
//   graph mlp {
//     %0 = input param "fc1.weight" : f32[512,784]
//     %1 = input data "x" : f32[128,784]
//     %2 = matmul %1, %0 {transpose_b=1} : f32[128,512] @ "mlp.cpp":12
//     %3 = full {value=0.0} : f32[128,512]
//     %4 = constant {value=f64[1.0,2.5]} : f32[2]
//     out loss %9 "loss"
//     out update %12 -> %0 "fc1.weight"
//   }
//
// Attribute values: integers `1`, floats always with '.', an exponent, `inf`
// or `nan` (`0.0`, `1e-05`, `-inf`), integer lists `[1,2]`, float lists
// `f64[1.0,2.5]`, strings `"..."` with \" \\ \n escapes. Attributes print
// sorted by name. `@ "file":line` is the source location (omitted when
// unknown or when PrintOptions::locations is false). The parser skips
// comments, from `#` outside a string to the end of the line; the printer
// writes none.
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.hpp"

namespace ws::ir {

struct PrintOptions {
  bool locations = true;  // golden tests turn these off: line numbers move
};

std::string print(const Graph& g, const PrintOptions& opts = {});

// The inside of a string literal holding `s`: \" \\ and \n escaped. The
// text form's strings and Graphviz's (whose \n is a line break) agree.
std::string escaped(std::string_view s);

// Parses the text form. Malformed text throws ws::Error naming the line and
// what was expected. The result passes verify().
Graph parse(std::string_view text);

}  // namespace ws::ir
