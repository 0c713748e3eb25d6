// Kernels of the collective ops (ops.def, category collective): a start
// packs its operands into its buffer and starts the collective on it; its
// wait blocks until the collective is complete. The start and its wait share
// one dist::InFlight (Kernel::collective). The reference kernels run the
// same packing and a blocking collective (the interpreter).
#pragma once

#include <span>

#include "dist/collectives.hpp"
#include "exec/program.hpp"

namespace ws::exec {

// Packs operands `in[i]` (of `types[i]`) one after another into `out`, each
// element times `scale` (1 / world size for a mean, else 1). One definition
// for the reference and the compiled kernel, so both give the same bits.
void pack_bucket(std::span<const ir::Type> types, const void* const* in, double scale, void* out);
// One operand of a bucket, at `out`.
void pack_operand(const ir::Type& type, const void* in, double scale, void* out);

// What a start's elements are multiplied by before they are summed over
// the ranks.
double reduce_scale(const ir::Attrs& start_attrs);

// Chooses the kernel of a collective op (k.op): k.collective must be set,
// the same for a start and its wait.
void choose_collective_kernel(Kernel& k);

}  // namespace ws::exec
