// The lowering pipeline, in order:
//  1. graph passes  (pipeline.hpp) simplify: CSE and DCE, so no kernel
//                   computes a dead or repeated value; fuse: elementwise
//                   chains become loop fusions, one kernel each;
//                   fold_constants: small values of constants alone become
//                   constants.
//  2. operands      decide which operands a kernel reads as one value (a `full`
//                   or a broadcast 0-d value) and which elementwise operands
//                   are broadcasts read from their source through strides:
//                   those are never materialized.
//  3. kernels       one kernel per value that is still needed, in graph order
//                   (forward, backward, then updates: every read of an old
//                   parameter precedes its update); a reshape, or a slice
//                   of contiguous rows, is a view of its operand, with no
//                   kernel (views.hpp); a product read only by a
//                   transpose writes the transposed layout itself; a small
//                   source (`full`, `iota`, `constant`: fold_constants.cpp
//                   made values of constants alone constants) is computed
//                   here, once, into the program's constants.
//  4. alias         updates written into their inputs' storage when safe.
//  5. plan memory   arena offsets for everything else.
//  6. emit          slots and kernel implementations.
#include "lower/lower.hpp"

#include <algorithm>
#include <cstring>

#include "exec/broadcast_kernels.hpp"
#include "exec/collective_kernels.hpp"
#include "exec/dnnl_backend.hpp"
#include "exec/fused_loop.hpp"
#include "exec/fused_loop_rules.hpp"
#include "exec/kernels.hpp"
#include "exec/reference.hpp"
#include "ir/attr.hpp"
#include "lower/alias.hpp"
#include "lower/block_owners.hpp"
#include "lower/pipeline.hpp"
#include "lower/plan_memory.hpp"
#include "lower/views.hpp"

namespace ws::lower {
namespace {

using exec::Slot;
using exec::SlotKind;
using ir::Op;
using ir::ValueId;

// A transpose that leaves one of its matrix dims (the last two) unit-strided
// over its source's storage: a product reads (or, with `out`, writes) it
// where it lies, as a transposed or strided matrix oneDNN's kernels take.
// Matrices with no unit-strided dim (an NHWC image's planes read as NCHW
// matrices) get oneDNN's reference kernel: the transpose runs as a kernel
// of its own instead.
bool matrix_dims_contiguous(const std::vector<int64_t>& perm, bool out) {
  const int64_t r = int64_t(perm.size());
  if (r < 2) return true;
  if (out) return perm[size_t(r - 1)] >= r - 2;
  return perm[size_t(r - 1)] == r - 1 || perm[size_t(r - 2)] == r - 1;
}

class Lowering {
 public:
  Lowering(const ir::Graph& g, const LowerOptions& opts) : g_(g), opts_(opts) {}

  exec::Program run() {
    p_.name = g_.name;
    for (ValueId v : g_.inputs)
      p_.inputs.push_back({g_.input_name(v), g_.input_role(v), g_.type(v)});
    for (const ir::Output& o : g_.outputs)
      p_.outputs.push_back(
          {o.name, o.role, g_.type(o.value),
           o.aliased_input == ir::kNoValue ? -1 : g_.input_index(o.aliased_input)});
    slot_.assign(g_.nodes.size(), -1);
    const_slot_.assign(g_.nodes.size(), -1);
    for (size_t i = 0; i < g_.inputs.size(); ++i)
      slot_[size_t(g_.inputs[i])] =
          new_slot(SlotKind::input, int64_t(i), g_.type(g_.inputs[i]).bytes());
    collect_kernels();
    assign_outputs();
    plan_arena();
    emit();
    return std::move(p_);
  }

 private:
  int32_t new_slot(SlotKind k, int64_t index, size_t bytes) {
    p_.slots.push_back(Slot{k, index, int64_t(bytes)});
    return int32_t(p_.slots.size() - 1);
  }

  // A slot `offset` bytes into slot s (a view of part of its value).
  int32_t offset_slot(int32_t s, int64_t offset, size_t bytes) {
    WS_CHECK(s >= 0) << "a view of a value without storage";
    Slot sl = p_.slots[size_t(s)];
    sl.offset += offset;
    sl.bytes = int64_t(bytes);
    p_.slots.push_back(sl);
    return int32_t(p_.slots.size() - 1);
  }

  // Steps 2 and 3: walk back from the outputs marking what must exist.
  void collect_kernels() {
    const std::vector<ValueId> src = scalar_sources(g_);
    view_ = view_roots(g_);
    auto root = [&](ValueId v) { return view_[size_t(v)].root; };
    std::vector<bool> needed(g_.nodes.size(), false);
    for (const ir::Output& o : g_.outputs) needed[size_t(o.value)] = true;
    std::vector<std::vector<bool>> scalar(g_.nodes.size()), through(g_.nodes.size());
    for (ValueId v = g_.size() - 1; v >= 0; --v) {
      const ir::Node& n = g_.node(v);
      if (!needed[size_t(v)] || n.op == Op::input) continue;
      if (root(v) != v) {  // a view: its root must exist
        needed[size_t(root(v))] = true;
        continue;
      }
      const DType dt = n.args.empty() ? n.type.dtype : g_.type(n.args.back()).dtype;
      const bool folds = exec::takes_scalar_operands(n.op, dt);
      const bool strided = exec::takes_broadcast_operands(n.op, dt);
      const bool product = exec::is_backend_op(n.op, n.type.dtype) &&
                           (n.op == Op::matmul || n.op == Op::matmul_add ||
                            n.op == Op::matmul_bias || n.op == Op::matmul_bias_add);
      for (size_t i = 0; i < n.args.size(); ++i) {
        const ValueId a = n.args[i];
        const bool sc = folds && src[size_t(a)] != ir::kNoValue;
        const Op aop = g_.node(a).op;
        const bool th =
            !sc && ((strided && aop == Op::broadcast) ||
                    (product && i < 2 && aop == Op::transpose &&
                     matrix_dims_contiguous(ir::attr<Op::transpose, "perm">(g_.node(a)), false)));
        scalar[size_t(v)].push_back(sc);
        through[size_t(v)].push_back(th);
        ValueId read = root(sc ? src[size_t(a)] : th ? g_.node(a).args[0] : a);
        if (sc && g_.node(read).op == Op::full) {
          if (const_slot_[size_t(read)] < 0) const_slot_[size_t(read)] = new_constant(read);
        } else {
          needed[size_t(read)] = true;
        }
      }
    }
    // A product whose one reader is a transpose writes the transposed value
    // directly, through permuted output strides (attention's head merge).
    const std::vector<int> uses = ir::use_counts(g_);
    std::vector<bool> is_output(g_.nodes.size(), false);
    for (const ir::Output& o : g_.outputs) is_output[size_t(o.value)] = true;
    std::vector<ValueId> written_into(g_.nodes.size(), ir::kNoValue);
    std::vector<bool> folded(g_.nodes.size(), false);
    for (ValueId t = 0; t < g_.size(); ++t) {
      const ir::Node& n = g_.node(t);
      if (n.op != Op::transpose || !needed[size_t(t)] || root(t) != t) continue;
      const ValueId m = n.args[0];
      if (g_.node(m).op == Op::matmul && exec::is_backend_op(Op::matmul, g_.type(m).dtype) &&
          uses[size_t(m)] == 1 && !is_output[size_t(m)] &&
          matrix_dims_contiguous(ir::attr<Op::transpose, "perm">(n), true)) {
        written_into[size_t(m)] = t;
        folded[size_t(t)] = true;
      }
    }
    pos_.assign(g_.nodes.size(), -1);
    for (ValueId v = 0; v < g_.size(); ++v) {
      if (!needed[size_t(v)] || g_.node(v).op == Op::input || root(v) != v) continue;
      if (folded[size_t(v)]) continue;           // its product writes it
      if (g_.node(v).op == Op::fusion_result) {  // its fusion's kernel writes it
        const ValueId f = g_.node(v).args[0];
        Pending& fk = kernels_[size_t(pos_[size_t(f)])];
        fk.extra.resize(g_.node(f).body->outputs.size() - 1, ir::kNoValue);
        fk.extra[size_t(ir::attr<Op::fusion_result, "index">(g_.node(v)) - 1)] = v;
        pos_[size_t(v)] = pos_[size_t(f)];
        continue;
      }
      if (constant_source(v)) continue;
      Pending k;
      k.out = written_into[size_t(v)] != ir::kNoValue ? written_into[size_t(v)] : v;
      k.node = v;
      k.scalar = scalar[size_t(v)];
      k.through = through[size_t(v)];
      const ir::Node& n = g_.node(v);
      // A transpose its product writes is read where it lies, not through
      // the product (which has no storage of its own).
      for (size_t i = 0; i < n.args.size(); ++i)
        if (k.through[i] && written_into[size_t(g_.node(n.args[i]).args[0])] == n.args[i])
          k.through[i] = false;
      std::vector<ir::Type> in_types;
      for (size_t i = 0; i < n.args.size(); ++i) {
        const ValueId a = n.args[i];
        const View& view = view_[size_t(k.scalar[i]    ? src[size_t(a)]
                                        : k.through[i] ? g_.node(a).args[0]
                                                       : a)];
        k.ins.push_back(view.root);
        k.in_offsets.push_back(view.offset);
        in_types.push_back(g_.type(n.args[i]));
      }
      if (exec::is_backend_op(n.op, n.type.dtype)) {
        // Created once here; its scratch is planned with everything else
        // (as a column sum's, below).
        // Transposed operands are read where their source lies.
        std::vector<std::vector<int64_t>> strides;
        if (std::find(k.through.begin(), k.through.end(), true) != k.through.end())
          strides = operand_strides(n, k);
        std::vector<int64_t> out_strides;
        if (k.out != v) {  // element i of v lies at the transpose's position of i
          const ir::Node& t = g_.node(k.out);
          const std::vector<int64_t> ts = exec::row_major_strides(t.type.shape);
          const std::vector<int64_t>& perm = ir::attr<Op::transpose, "perm">(t);
          out_strides.assign(ts.size(), 0);
          for (size_t d = 0; d < perm.size(); ++d) out_strides[size_t(perm[d])] = ts[d];
        }
        k.backend = exec::make_backend_op(n.op, n.attrs, in_types, n.type, strides, out_strides);
        k.scratch_bytes = k.backend->scratch_bytes();
        p_.flops += k.backend->flops();
      }
      if (n.op == Op::fusion) k.scratch_bytes = exec::fused_scratch_bytes(*n.body);
      if (ir::kCollectiveStarts.contains(n.op)) k.collective = std::make_shared<dist::InFlight>();
      if (n.op == Op::wait) k.collective = kernels_[size_t(pos_[size_t(n.args[0])])].collective;
      pos_[size_t(k.out)] = int64_t(kernels_.size());
      kernels_.push_back(std::move(k));
    }
  }

  // A source of at most this many bytes is a constant of the program
  // (fold_constants folds values computed from sources up to the same size).
  static constexpr size_t kMaxConstantBytes = size_t(64) << 10;

  // Computes source v (`full`, `iota`, `constant`) into the program's
  // constants when it is small; false otherwise.
  bool constant_source(ValueId v) {
    const ir::Node& n = g_.node(v);
    if ((n.op != Op::full && n.op != Op::iota && n.op != Op::constant) || !n.args.empty() ||
        n.type.bytes() > kMaxConstantBytes)
      return false;
    std::vector<std::byte> out(n.type.bytes());
    exec::run_reference(n.op, n.attrs, {}, nullptr, n.type, out.data(), n.loc);
    slot_[size_t(v)] = constant_slot(out.data(), out.size());
    pos_[size_t(v)] = -1;
    return true;
  }

  // The one value of `full` v, in its dtype, as a constant.
  int32_t new_constant(ValueId v) {
    const ir::Type one{g_.type(v).dtype, {}};
    alignas(8) std::byte value[8];
    exec::run_reference(Op::full, g_.node(v).attrs, {}, nullptr, one, value);
    return constant_slot(value, one.bytes());
  }

  // `bytes` of data appended to the program's constants, 64-byte aligned.
  int32_t constant_slot(const void* data, size_t bytes) {
    const int64_t off = int64_t((p_.constants.size() + 63) / 64 * 64);
    p_.constants.resize(size_t(off) + bytes);
    std::memcpy(&p_.constants[size_t(off)], data, bytes);
    return new_slot(SlotKind::constant, off, bytes);
  }

  // Step 4: updates first (so a value that is both an update and another
  // output lives in the parameter), then the other outputs.
  void assign_outputs() {
    std::vector<std::vector<int64_t>> readers(g_.nodes.size());
    for (size_t k = 0; k < kernels_.size(); ++k)
      for (ValueId a : kernels_[k].ins) readers[size_t(a)].push_back(int64_t(k));
    const int64_t end = int64_t(kernels_.size());
    for (const ir::Output& o : g_.outputs)  // outputs are read after every kernel
      readers[size_t(o.value)].push_back(end);

    std::vector<std::pair<ValueId, int32_t>> copies;
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      const ir::Output& o = g_.outputs[i];
      if (o.role != ir::OutputRole::update || o.value == o.aliased_input) continue;
      const int32_t dest = slot_[size_t(o.aliased_input)];
      const int64_t at = pos_[size_t(o.value)];
      // Loops, and a product accumulated into its destination, read element
      // i of the old value only to write element i.
      const Op op = g_.node(o.value).op;
      const ir::OpCategory cat = ir::op_info(op).category;
      UpdateCandidate c{at,
                        false,
                        at >= 0 && (cat == ir::OpCategory::elementwise ||
                                    cat == ir::OpCategory::fusion || op == Op::matmul_add),
                        {}};
      for (int64_t r : readers[size_t(o.aliased_input)]) {
        if (r == at)
          c.producer_reads_old = true;
        else
          c.old_reader_pos.push_back(r);
      }
      // A fusion reads the old value element by element only under
      // alias.hpp's rule.
      if (c.producer_reads_old && g_.node(kernels_[size_t(at)].node).op == Op::fusion) {
        const Pending& pk = kernels_[size_t(at)];
        for (size_t i = 0; i < pk.ins.size(); ++i)
          if (pk.ins[i] == o.aliased_input && !fused_overwrites(g_, pk, o.value, i))
            c.producer_elementwise = false;
      }
      if (opts_.in_place_updates && slot_[size_t(o.value)] < 0 && can_update_in_place(c)) {
        slot_[size_t(o.value)] = dest;
      } else {
        copies.emplace_back(o.value, dest);
        p_.copy_bytes += int64_t(g_.type(o.value).bytes());
      }
    }
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      const ir::Output& o = g_.outputs[i];
      if (o.role == ir::OutputRole::update) continue;
      int32_t dest = new_slot(SlotKind::output, int64_t(i), g_.type(o.value).bytes());
      if (slot_[size_t(o.value)] < 0 && g_.node(o.value).op != Op::input)
        slot_[size_t(o.value)] = dest;
      else
        copies.emplace_back(o.value, dest);
    }
    for (auto& [v, dest] : copies) {
      Pending copy;
      copy.ins = {v};
      copy.in_offsets = {0};
      copy.scalar = copy.through = {false};
      copy.copy_to = dest;
      kernels_.push_back(std::move(copy));
    }
  }

  size_t bytes(ValueId v) const {  // what value v's block holds (exec::storage_bytes)
    return exec::storage_bytes(g_.node(v).op, g_.node(v).attrs, g_.node(v).type);
  }

  // Step 5.
  void plan_arena() {
    std::vector<int64_t> last(g_.nodes.size(), -1);
    for (size_t k = 0; k < kernels_.size(); ++k)
      for (ValueId a : kernels_[k].ins) last[size_t(a)] = int64_t(k);
    const std::vector<ValueId> owner = block_owners(g_, kernels_, slot_, last);
    std::vector<int64_t> block_last(g_.nodes.size(), -1);
    for (size_t k = 0; k < kernels_.size(); ++k)
      kernels_[k].for_each_out([&](ValueId v) {
        if (owner[size_t(v)] == ir::kNoValue) return;
        const ValueId o = owner[size_t(v)];
        block_last[size_t(o)] = std::max({block_last[size_t(o)], pos_[size_t(v)], last[size_t(v)]});
      });
    std::vector<ValueId> values;
    std::vector<LiveRange> ranges;
    for (const Pending& k : kernels_)
      k.for_each_out([&](ValueId v) {
        if (owner[size_t(v)] != v) return;
        values.push_back(v);
        ranges.push_back({int64_t(bytes(v)), pos_[size_t(v)], block_last[size_t(v)]});
      });
    // Scratch lives only while its kernel runs.
    std::vector<Pending*> scratch_users;
    for (Pending& k : kernels_)
      if (k.scratch_bytes > 0) {
        scratch_users.push_back(&k);
        ranges.push_back({k.scratch_bytes, pos_[size_t(k.out)], pos_[size_t(k.out)]});
      }
    MemoryPlan plan = plan_memory(ranges);
    for (size_t i = 0; i < values.size(); ++i)
      slot_[size_t(values[i])] = new_slot(SlotKind::arena, plan.offsets[i], bytes(values[i]));
    for (const Pending& k : kernels_)
      k.for_each_out([&](ValueId v) {
        if (owner[size_t(v)] != ir::kNoValue && owner[size_t(v)] != v)
          slot_[size_t(v)] = slot_[size_t(owner[size_t(v)])];
      });
    for (size_t i = 0; i < scratch_users.size(); ++i)
      scratch_users[i]->scratch = new_slot(SlotKind::arena, plan.offsets[values.size() + i],
                                           size_t(scratch_users[i]->scratch_bytes));
    p_.arena_bytes = plan.arena_bytes;
    p_.max_live_bytes = plan.max_live;
  }

  // Element strides of each operand over its own shape: 0 along a
  // broadcast's new dims, 0 everywhere for a single value, a transpose's
  // source strides permuted.
  std::vector<std::vector<int64_t>> operand_strides(const ir::Node& n, const Pending& pk) const {
    std::vector<std::vector<int64_t>> st;
    for (size_t i = 0; i < n.args.size(); ++i) {
      const ir::Node& a = g_.node(n.args[i]);
      const Shape& shape = a.type.shape;
      if (pk.scalar[i])
        st.emplace_back(shape.size(), 0);
      else if (pk.through[i] && a.op == Op::broadcast)
        st.push_back(exec::broadcast_source_strides(g_.type(a.args[0]).shape, shape,
                                                    ir::attr<Op::broadcast, "dims">(a)));
      else if (pk.through[i])
        st.push_back(exec::transpose_source_strides(g_.type(a.args[0]).shape,
                                                    ir::attr<Op::transpose, "perm">(a)));
      else
        st.push_back(exec::row_major_strides(shape));
    }
    return st;
  }

  // Step 6.
  void emit() {
    for (const Pending& pk : kernels_) {
      if (pk.out == ir::kNoValue) {
        ValueId v = pk.ins[0];
        p_.kernels.push_back(exec::copy_kernel(slot_[size_t(v)], pk.copy_to, g_.type(v)));
        continue;
      }
      const ir::Node& n = g_.node(pk.node);
      exec::Kernel k;
      k.op = n.op;
      k.attrs = n.attrs;
      k.out_type = n.type;
      k.loc = n.loc;
      k.out = slot_[size_t(pk.out)];
      k.scratch = pk.scratch;
      k.backend = pk.backend;
      for (size_t i = 0; i < pk.ins.size(); ++i) {
        ValueId a = pk.ins[i];
        k.in.push_back(pk.scalar[i] && const_slot_[size_t(a)] >= 0 ? const_slot_[size_t(a)]
                       : pk.in_offsets[i] != 0 ? offset_slot(slot_[size_t(a)], pk.in_offsets[i],
                                                             g_.type(n.args[i]).bytes())
                                               : slot_[size_t(a)]);
        k.in_types.push_back(g_.type(n.args[i]));
        WS_CHECK(k.in.back() >= 0) << "operand %" << a << " of %" << pk.out << " has no storage";
      }
      if (ir::op_info(n.op).category == ir::OpCategory::collective) {
        k.collective = pk.collective;
        exec::choose_collective_kernel(k);
        p_.has_collectives = true;
      } else if (n.op == Op::local_shard) {
        exec::choose_collective_kernel(k);
      } else if (n.op == Op::fusion) {
        for (ValueId e : pk.extra) k.extra_out.push_back(e == ir::kNoValue ? -1 : slot_[size_t(e)]);
        k.extra_out.resize(n.body->outputs.size() - 1, -1);
        exec::choose_fused_kernel(k, *n.body);
      } else if (!pk.backend &&
                 std::find(pk.through.begin(), pk.through.end(), true) != pk.through.end())
        exec::choose_broadcast_kernel(k, operand_strides(n, pk));
      else
        exec::choose_kernel(k, pk.scalar);
      p_.kernels.push_back(std::move(k));
    }
  }

  const ir::Graph& g_;
  const LowerOptions& opts_;
  exec::Program p_;
  std::vector<int32_t> slot_, const_slot_;
  std::vector<View> view_;
  std::vector<int64_t> pos_;
  std::vector<Pending> kernels_;
};

}  // namespace

exec::Program lower(const ir::Graph& g, const LowerOptions& opts, ir::Graph* lowered) {
  const ir::Graph s = run_passes(g, graph_passes(opts));
  exec::Program p = Lowering(s, opts).run();
  if (lowered) *lowered = s;
  return p;
}

}  // namespace ws::lower
