// Elementwise kernels that read broadcast operands in place.
//
// A `broadcast` feeding an add, a mul or a select need not exist as a
// buffer: the kernel reads the broadcast's source through strides that are 0
// along the broadcast dims. BatchNorm and LayerNorm broadcast per-channel or
// per-row statistics over whole activations; materialized, each such
// broadcast writes and rereads a full activation-sized buffer.
//
// The walk: the result shape with dims merged wherever every operand allows
// it, visited a row (last dim) at a time; each operand has its own strides.
// Rows are split across the thread pool; each element is computed alone, so
// the split never changes a result.
#pragma once

#include <vector>

#include "exec/program.hpp"

namespace ws::exec {

// True when `op` on operands of dtype `dt` has a kernel reading broadcast
// operands through strides.
bool takes_broadcast_operands(ir::Op op, DType dt);

// Fills k.fn, k.name, k.walk and k.strides for an elementwise node whose
// operand i is read at `operand_strides[i]` (element strides over the result
// shape k.out_type.shape: 0 along broadcast dims).
void choose_broadcast_kernel(Kernel& k, const std::vector<std::vector<int64_t>>& operand_strides);

}  // namespace ws::exec
