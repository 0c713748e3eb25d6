// Shape and dtype inference of the collectives: their operands packed one
// after another into a 1-d buffer, or one rank's shard of it.
#include <string>

#include "ir/attr.hpp"
#include "ir/infer_detail.hpp"
#include "ir/op_error.hpp"

namespace ws::ir::infer_detail {
namespace {

// The elements of a collective's operands packed one after another (one
// floating dtype, at least one operand).
int64_t packed_numel(Op op, const std::vector<Type>& args, const SourceLoc& loc) {
  if (args.empty()) fail_op(op, "takes at least one operand", loc);
  int64_t total = 0;
  for (const Type& t : args) {
    check_floating(op, t, loc);
    if (t.dtype != args[0].dtype)
      fail_op(op, "operands must share one dtype: " + types_str(args), loc);
    total += t.numel();
  }
  return total;
}

// One rank's part of `total` elements split over attribute world's ranks,
// the last padded.
int64_t shard_numel(Op op, int64_t total, const Attrs& attrs, const SourceLoc& loc) {
  const int64_t world = attr<OpSet{Op::reduce_scatter_start, Op::local_shard}, "world">(attrs);
  if (world < 1) fail_op(op, "world must be >= 1", loc);
  return (total + world - 1) / world;
}

}  // namespace

Type infer_collective(Op op, const std::vector<Type>& args, const Attrs& attrs,
                      const SourceLoc& loc) {
  switch (op) {
    case Op::all_reduce_start:
    case Op::reduce_scatter_start: {
      constexpr OpSet kReducing{Op::all_reduce_start, Op::reduce_scatter_start};
      const std::string& reduce = attr<kReducing, "reduce">(attrs);
      if (reduce != "sum" && reduce != "mean")
        fail_op(op, "reduce must be sum or mean, got '" + reduce + "'", loc);
      if (attr<kReducing, "seq">(attrs) < 0) fail_op(op, "seq must be >= 0", loc);
      const int64_t total = packed_numel(op, args, loc);
      return Type{args[0].dtype,
                  {op == Op::all_reduce_start ? total : shard_numel(op, total, attrs, loc)}};
    }
    case Op::local_shard:
      return Type{args[0].dtype, {shard_numel(op, packed_numel(op, args, loc), attrs, loc)}};
    case Op::all_gather_start: {
      if (attr<Op::all_gather_start, "seq">(attrs) < 0) fail_op(op, "seq must be >= 0", loc);
      check_floating(op, args[0], loc);
      if (args[0].rank() != 1) fail_op(op, "takes a 1-d operand, got " + args[0].str(), loc);
      const int64_t world = attr<Op::all_gather_start, "world">(attrs);
      if (world < 1) fail_op(op, "world must be >= 1", loc);
      return Type{args[0].dtype, {args[0].numel() * world}};
    }
    case Op::wait: return args[0];
    default: WS_CHECK(false) << op_name(op) << " is not a collective";
  }
  return {};
}

}  // namespace ws::ir::infer_detail
