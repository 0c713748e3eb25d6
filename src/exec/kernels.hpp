// Optimized kernels for Programs, and the choice of implementation per node.
// Anything without a specialized kernel runs its reference kernel.
#pragma once

#include <vector>

#include "exec/program.hpp"
#include "exec/threads.hpp"

namespace ws::exec {

// True when `op` on `dt` has a kernel that can read an operand as a single
// value broadcast to the result shape (a stride-0 operand), so a `full` or a
// broadcast scalar never has to be materialized.
bool takes_scalar_operands(ir::Op op, DType dt);

// True when the kernel for `op` on operands of dtype `dt` reads element i of
// each full-size operand before it writes element i of the result and
// nothing else there, so the result may take the storage of such an operand
// that dies at it (unary and binary arithmetic, select; f32 and f64).
bool computes_in_place(ir::Op op, DType dt);

// Fills k.fn, k.name and k.p from k.op, k.in_types, k.out_type and k.attrs.
// scalar[i]: operand i is a single value (only where takes_scalar_operands).
void choose_kernel(Kernel& k, const std::vector<bool>& scalar);

// A kernel copying `bytes` from slot `from` to slot `to`.
Kernel copy_kernel(int32_t from, int32_t to, const ir::Type& type);

// The vector instruction set our loop kernels were compiled for, e.g.
// "AVX-512 (16 floats)".
const char* loop_isa();

}  // namespace ws::exec
