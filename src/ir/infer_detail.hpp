// What infer.cpp shares with the files that infer the types of a family of
// ops (infer_collectives.cpp).
#pragma once

#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "ir/op.hpp"

namespace ws::ir::infer_detail {

// "f32[2,3] and f64[4]": operand types for a message.
std::string types_str(const std::vector<Type>& ts);
// Fails naming the op unless t is a floating-point type.
void check_floating(Op op, const Type& t, const SourceLoc& loc);
// The result type of a collective (all_reduce_start, reduce_scatter_start,
// all_gather_start, local_shard, wait).
Type infer_collective(Op op, const std::vector<Type>& args, const Attrs& attrs,
                      const SourceLoc& loc);

}  // namespace ws::ir::infer_detail
