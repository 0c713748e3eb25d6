// Kernels of the collective ops (ops.def, category collective) and of
// local_shard: a start packs its operands into its buffer and starts the
// collective on it; its wait blocks until the collective is complete. The
// start and its wait share one dist::InFlight (Kernel::collective). The
// reference kernels run the same packing and a blocking collective (the
// interpreter).
#pragma once

#include <span>

#include "dist/collectives.hpp"
#include "exec/program.hpp"

namespace ws::exec {

// Writes elements [from, from + count) of operands `in[i]` (of `types[i]`)
// packed one after another, flattened, into `out`: each times `scale` (1 /
// world size for a mean, else 1), zero past their end (a shard's padding).
// One definition for the reference and the compiled kernels, so both give
// the same bits.
void pack_window(std::span<const ir::Type> types, const void* const* in, int64_t from,
                 int64_t count, double scale, void* out);

// The reference kernel of a collective start or of local_shard: blocking.
void run_collective_reference(ir::Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types,
                              const void* const* in, const ir::Type& out_type, void* out,
                              const SourceLoc& loc);

// Bytes a value of op `op` and type `type` occupies while it runs: a
// reduce_scatter_start holds the whole packed buffer (world parts) until
// its wait, though its value is one part.
size_t storage_bytes(ir::Op op, const ir::Attrs& attrs, const ir::Type& type);

// Chooses the kernel of a collective op or of local_shard (k.op): a
// collective's k.collective must be set, the same for a start and its
// wait. A ws::Error when the op was built for another world size than the
// process group's.
void choose_collective_kernel(Kernel& k);

}  // namespace ws::exec
