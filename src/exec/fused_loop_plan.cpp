// The plan of a fused loop: which storage each body value is read from, the
// steps and their operands, buffers, rows and segments (fused_loop.hpp).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "exec/fused_loop.hpp"
#include "exec/parallel.hpp"
#include "exec/reference.hpp"
#include "ir/attr.hpp"

namespace ws::exec {
namespace {

using ir::Op;
using Kind = FusedLoop::Kind;

}  // namespace

FusedLoop::FusedLoop(const ir::Graph& body, const std::vector<int32_t>& in_slots,
                     const std::vector<int32_t>& out_slots) {
  for (ir::ValueId v = 0; v < body.size(); ++v)
    if (ir::kMatmulOps.contains(body.node(v).op)) {
      plan_product(body, v, in_slots, out_slots);
      return;
    }
  plan(body, in_slots, out_slots);
}

void FusedLoop::plan(const ir::Graph& body, const std::vector<int32_t>& in_slots,
                     const std::vector<int32_t>& out_slots) {
  WS_CHECK(!body.outputs.empty()) << "a fusion body without results";
  WS_CHECK(in_slots.size() == body.inputs.size() && out_slots.size() == body.outputs.size())
      << "fused loop: slots do not match the body";
  WS_CHECK(size_t(body.size()) <= kMaxFusedValues)
      << "fused loop body of " << body.size() << " values";
  // The loop's shape: the reductions' operand, or the fusion's own.
  Shape shape = body.type(body.outputs[0].value).shape;
  ir::ValueId first_reduce = -1;
  for (ir::ValueId v = 0; v < body.size(); ++v)
    if (body.node(v).op == Op::reduce_sum || body.node(v).op == Op::reduce_max) {
      if (first_reduce < 0) first_reduce = v;
      shape = body.type(body.node(v).args[0]).shape;
    }
  numel_ = ws::numel(shape);
  values_.resize(size_t(body.size()));
  std::vector<ir::ValueId> step_at(size_t(body.size()), -1);  // loop step of a computed value
  std::vector<bool> per_result(size_t(body.size()), false);
  std::vector<std::string> ops;
  std::vector<Op> step_ops;  // the op and result type of each loop step
  std::vector<DType> step_types;
  int64_t cost = 0;
  // Values a reduction reads straight from its operand: they must be whole
  // arrays at a chunk's pointer, so a broadcast there is always gathered
  // (never read per segment, where no pointer to the chunk's elements
  // exists).
  std::vector<bool> reduced_src(size_t(body.size()), false);
  for (ir::ValueId v = 0; v < body.size(); ++v)
    if (body.node(v).op == Op::reduce_sum || body.node(v).op == Op::reduce_max)
      reduced_src[size_t(body.node(v).args[0])] = true;
  for (ir::ValueId v = 0; v < body.size(); ++v) {
    const ir::Node& n = body.node(v);
    Value& val = values_[size_t(v)];
    val.esize = int64_t(dtype_size(n.type.dtype));
    // A value of the loop has the loop's shape; the reductions and what
    // follows them are per result.
    const bool loop = first_reduce < 0 ||
                      (n.type.shape == shape && n.op != Op::reduce_sum && n.op != Op::reduce_max);
    if (n.op == Op::input) {
      val.index = int32_t(body.input_index(v));
      val.kind = n.type.numel() == 1 ? Kind::scalar : loop ? Kind::input : Kind::red_input;
    } else if (n.op == Op::full) {
      WS_CHECK(!reduced_src[size_t(v)]) << "fused loop: a reduction of a constant";
      val.kind = Kind::constant;
      val.index = int32_t(constants_.size());
      constants_.push_back(0.0);
      dispatch(n.type.dtype, [&](auto t) {
        using T = decltype(t);
        const T x = T(ir::attr<Op::full, "value">(n));
        std::memcpy(&constants_.back(), &x, sizeof x);
      });
    } else if (n.op == Op::broadcast) {
      const ir::ValueId src = n.args[0];
      WS_CHECK(body.node(src).op == Op::input) << "fused loop: a broadcast of a computed value";
      val.index = values_[size_t(src)].index;
      WS_CHECK(!reduced_src[size_t(v)] || body.type(src).numel() != 1)
          << "fused loop: a reduction of a broadcast one value";
      if (body.type(src).numel() == 1) {
        val.kind = Kind::scalar;
      } else {
        WS_CHECK(loop) << "fused loop: a broadcast after a reduction";
        val.kind = Kind::gather;  // until the rows are known
        broadcasts_.push_back(v);
      }
    } else if (n.op == Op::reduce_sum || n.op == Op::reduce_max) {
      WS_CHECK((ir::attr<ir::kReduceOps, "axes">(n) ==
                ir::attr<ir::kReduceOps, "axes">(body.node(first_reduce))))
          << "fused loop: reductions over different axes";
      reductions_.push_back({v, n.args[0], n.op == Op::reduce_max, n.type.dtype});
      val.kind = Kind::reduced;
      per_result[size_t(v)] = true;
      ops.emplace_back(ir::op_name(n.op));
    } else {
      Step st;
      if (n.op == Op::random_uniform) {
        WS_CHECK(loop) << "fused loop: a random draw after a reduction";
        draws_ = true;
        st.draw = fused_draw_fn(n.type.dtype);
        st.skip = ir::attr<Op::random_uniform, "skip">(n);
      } else {
        st.fn = fused_step_fn(body, n);
      }
      WS_CHECK(st.fn || st.draw) << "fused loop: no step for " << ir::op_name(n.op) << " on "
                                 << body.type(n.args.back()).str();
      WS_CHECK(n.args.size() <= 3) << "fused loop: " << ir::op_name(n.op);
      for (size_t i = 0; i < n.args.size(); ++i) st.args[i] = n.args[i];
      st.out = v;
      if (loop) {
        step_at[size_t(v)] = ir::ValueId(steps_.size());
        steps_.push_back(st);
        step_ops.push_back(n.op);
        step_types.push_back(n.type.dtype);
      } else {
        val.kind = Kind::reduced;
        per_result[size_t(v)] = true;
        epilogue_.push_back(st);
      }
      ops.emplace_back(ir::op_name(n.op));
      cost += elementwise_cost(n.op);
    }
  }
  // A reduction's walk: kept and reduced dims of the operand, merged.
  if (!reductions_.empty()) {
    split_reduction_walk(body.type(reductions_[0].src).shape,
                         ir::attr<ir::kReduceOps, "axes">(body.node(reductions_[0].value)), kept_,
                         kept_stride_, reduced_, red_stride_);
    WS_CHECK(!reduced_.empty()) << "fused loop: a reduction that reduces nothing";
    WS_CHECK(int64_t(std::max(kept_.size(), reduced_.size())) <= kMaxRank)
        << "fused loop: a reduction walk of rank " << kept_.size() + reduced_.size();
    columns_ = red_stride_.back() != 1;
    WS_CHECK(!columns_ || (reductions_.size() == 1 && !reductions_[0].is_max))
        << "fused loop: a reduction keeping its operand's innermost dim that is not one sum";
    results_ = ws::numel(kept_);
    if (columns_) {
      // reduce_sum's walk of the operand, and the sums' strides over it.
      const Shape& in = body.type(reductions_[0].src).shape;
      std::vector<std::vector<int64_t>> st = {reduce_result_strides(
          in, ir::attr<ir::kReduceOps, "axes">(body.node(reductions_[0].value)))};
      column_walk_ = in;
      merge_joint(column_walk_, st);
      column_strides_ = st[0];
      // Rows in blocks: [M, K] (one block), [B, R2, W] (a sum over a middle
      // dim) or [R1, B, R2, W] (BatchNorm's statistics of blocked images
      // [N, C/8, H*W, 8]).
      const Shape& w = column_walk_;
      const std::vector<int64_t>& cs = column_strides_;
      const size_t r = w.size();
      if (r == 2 && cs[0] == 0 && cs[1] == 1) {
        column_streamed_ = true, col_inner_ = w[0], col_width_ = w[1];
      } else if (r == 3 && cs[0] == w[2] && cs[1] == 0 && cs[2] == 1) {
        column_streamed_ = true, col_blocks_ = w[0], col_inner_ = w[1], col_width_ = w[2];
      } else if (r == 4 && cs[0] == 0 && cs[1] == w[3] && cs[2] == 0 && cs[3] == 1) {
        column_streamed_ = true, col_outer_ = w[0], col_blocks_ = w[1], col_inner_ = w[2],
        col_width_ = w[3];
      }
      column_groups_ = column_groups(col_outer_ * col_inner_);
    }
  }
  // Rows: the shape merged as far as every broadcast operand allows.
  {
    std::vector<std::vector<int64_t>> strides = {row_major_strides(shape)};
    for (int32_t v : broadcasts_) {
      const ir::Node& n = body.node(v);
      strides.push_back(broadcast_source_strides(body.type(n.args[0]).shape, shape,
                                                 ir::attr<Op::broadcast, "dims">(n)));
    }
    walk_ = shape;
    merge_joint(walk_, strides);
    WS_CHECK(int64_t(walk_.size()) <= kMaxRank) << "fused loop of rank " << walk_.size();
    row_len_ = walk_.empty() ? 1 : walk_.back();
    segmented_ = walk_.size() == 1 || row_len_ >= kMinSegment;
    WS_CHECK(broadcasts_.size() <= size_t(kMaxFusedBuffers))
        << "fused loop: " << broadcasts_.size() << " broadcast operands";
    for (size_t b = 0; b < broadcasts_.size(); ++b) {
      Value& val = values_[size_t(broadcasts_[b])];
      val.strides = strides[b + 1];
      val.inner = val.strides.back();
      // The same run along every row (a per-channel value over NHWC rows, a
      // LayerNorm weight): tiled into a buffer once a run of the kernel, a
      // chunk's row pieces then one array, where reading it per segment
      // calls each step once per row piece (64 calls a chunk over rows of
      // 32 channels).
      const bool periodic =
          val.inner == 1 &&
          std::all_of(val.strides.begin(), val.strides.end() - 1, [](int64_t s) { return s == 0; });
      val.kind = periodic && (kFusedChunk + row_len_) * val.esize <= kFusedChunk * 8 ? Kind::tiled
                 : !segmented_ || reduced_src[size_t(broadcasts_[b])]                ? Kind::gather
                 : val.inner == 0 ? Kind::row_scalar
                 : val.inner == 1 ? Kind::row_array
                                  : Kind::gather;
    }
  }
  // Results: straight into their storage unless a later step reads an
  // operand stored there.
  std::vector<bool> held_to_end(size_t(body.size()), false);
  for (size_t j = 0; j < body.outputs.size(); ++j) {
    const ir::ValueId v = body.outputs[j].value;
    if (per_result[size_t(v)]) {  // written once per result
      if (out_slots[j] < 0) continue;
      // Straight into the result unless a later epilogue step reads an
      // operand stored there (a reduction's value is written before the
      // whole epilogue runs).
      bool later_read = false;
      bool after = std::any_of(reductions_.begin(), reductions_.end(),
                               [&](const Reduction& r) { return r.value == v; });
      for (const Step& st : epilogue_) {
        for (int32_t a : st.args)
          if (after && a >= 0 &&
              (values_[size_t(a)].kind == Kind::red_input ||
               values_[size_t(a)].kind == Kind::scalar) &&
              in_slots[size_t(values_[size_t(a)].index)] == out_slots[j])
            later_read = true;
        after = after || st.out == v;
      }
      if (later_read) {
        red_copy_outs_.emplace_back(v, int32_t(j));
      } else {
        values_[size_t(v)].kind = Kind::red_output;
        values_[size_t(v)].index = int32_t(j);
      }
      continue;
    }
    WS_CHECK(step_at[size_t(v)] >= 0) << "fused loop: result " << j << " is not computed";
    WS_CHECK(values_[size_t(v)].kind == Kind::buffer)
        << "fused loop: value %" << v << " is two results";
    if (out_slots[j] < 0) continue;  // nobody reads it: it stays in a buffer
    bool later_read = false;
    for (ir::ValueId g : broadcasts_)
      WS_CHECK(in_slots[size_t(values_[size_t(g)].index)] != out_slots[j])
          << "fused loop: result " << j << " overwrites an operand read through a broadcast";
    // Nor one the epilogue reads: the loop runs before it (alias.hpp's rule
    // never gives a loop result the block of an operand of another shape).
    for (const Value& a : values_)
      WS_CHECK(a.kind != Kind::red_input || in_slots[size_t(a.index)] != out_slots[j])
          << "fused loop: result " << j << " overwrites an operand its epilogue reads";
    for (size_t t = size_t(step_at[size_t(v)]) + 1; t < steps_.size(); ++t)
      for (int32_t a : steps_[t].args)
        if (a >= 0 &&
            (values_[size_t(a)].kind == Kind::input || values_[size_t(a)].kind == Kind::scalar ||
             values_[size_t(a)].kind == Kind::row_scalar) &&
            in_slots[size_t(values_[size_t(a)].index)] == out_slots[j])
          later_read = true;
    if (later_read) {
      copy_outs_.emplace_back(v, int32_t(j));
      held_to_end[size_t(v)] = true;
    } else {
      values_[size_t(v)].kind = Kind::output;
      values_[size_t(v)].index = int32_t(j);
    }
  }
  // A reduction reads its operand where the loop leaves it: in a buffer
  // held for the chunk, or in the result it is written to.
  for (const Reduction& r : reductions_)
    if (values_[size_t(r.src)].kind == Kind::buffer) held_to_end[size_t(r.src)] = true;
  std::vector<bool> buffered(size_t(body.size())), gathered(size_t(body.size()));
  for (ir::ValueId v = 0; v < body.size(); ++v) {
    buffered[size_t(v)] = values_[size_t(v)].kind == Kind::buffer;
    gathered[size_t(v)] =
        values_[size_t(v)].kind == Kind::gather || values_[size_t(v)].kind == Kind::tiled;
    // A tile lives for the whole run: its buffer is no other value's.
    if (values_[size_t(v)].kind == Kind::tiled) held_to_end[size_t(v)] = true;
  }
  std::vector<int32_t> buf;
  const int buffers = assign_fused_buffers(body, buffered, gathered, held_to_end, buf);
  WS_CHECK(buffers <= kMaxFusedBuffers) << "fused loop needs " << buffers << " buffers";
  for (ir::ValueId v = 0; v < body.size(); ++v) {
    values_[size_t(v)].buf = buf[size_t(v)];
    const Kind k = values_[size_t(v)].kind;
    if (k == Kind::input || k == Kind::output || k == Kind::gather || k == Kind::tiled ||
        k == Kind::row_scalar || k == Kind::row_array)
      moving_.push_back(v);
    if (k == Kind::red_input || k == Kind::red_output || k == Kind::reduced)
      per_result_.push_back(v);
  }
  for (std::vector<Step>* list : {&steps_, &epilogue_})
    for (Step& st : *list)
      for (int i = 0; i < 3; ++i)
        if (st.args[i] >= 0) {
          const Kind k = values_[size_t(st.args[i])].kind;
          if (k != Kind::scalar && k != Kind::constant && k != Kind::row_scalar)
            st.arrays |= 1 << i;
          if (k == Kind::row_scalar || k == Kind::row_array) st.per_segment = true;
        }
  for (const Step& st : steps_) per_segment_ = per_segment_ || st.per_segment;
  // Slots: the operands read per segment, with their walks in bytes.
  std::vector<int8_t> slot_of(values_.size(), -1);
  for (int32_t v : broadcasts_) {
    const Value& val = values_[size_t(v)];
    if (val.kind != Kind::row_scalar && val.kind != Kind::row_array) continue;
    SlotWalk w{val.index, {}};
    for (size_t d = 0; d < walk_.size(); ++d) w.stride[d] = val.strides[d] * val.esize;
    slot_of[size_t(v)] = int8_t(slots_.size());
    values_[size_t(v)].slot = int8_t(slots_.size());
    slots_.push_back(w);
  }
  for (Step& st : steps_) {
    if (!st.per_segment) continue;
    for (int i = 0; i < 3; ++i) {
      if (st.args[i] < 0) continue;
      const Value& val = values_[size_t(st.args[i])];
      st.slot[i] = slot_of[size_t(st.args[i])];
      st.cls[i] = st.slot[i] >= 0 ? 2 : (st.arrays >> i & 1) ? 1 : 0;
      st.es[i] = int32_t(val.esize);
    }
    st.es[3] = int32_t(values_[size_t(st.out)].esize);
  }
  if (reductions_.empty() && broadcasts_.empty()) {
    chunk_ = kStreamChunk;
    for (int32_t v : moving_) {
      const Value& val = values_[size_t(v)];
      if (val.kind == Kind::input || val.kind == Kind::output)
        streams_.push_back({val.kind == Kind::output, val.index, val.esize});
    }
  }
  plan_jit(step_ops, step_types);
  if (!jit_fn_ && reductions_.empty() && broadcasts_.empty()) plan_blocks(step_ops, step_types);
  if (columns_) plan_column_load(body, in_slots, out_slots);
  if (block_steps_.empty() && !jit_fn_) pair_steps(step_ops, step_types);
  const int64_t per_chunk = std::max<int64_t>(1, grain_for(std::max<int64_t>(cost, 1)));
  grain_ = reductions_.empty()
               ? per_chunk
               : std::max<int64_t>(1, per_chunk / std::max<int64_t>(1, numel_ / results_));
  name_ = "fused(";
  for (size_t i = 0; i < ops.size() && i < 4; ++i) name_ += (i ? "," : "") + ops[i];
  if (ops.size() > 4) name_ += fmt::format(",+{}", ops.size() - 4);
  name_ += ")";
}

void FusedLoop::pair_steps(const std::vector<ir::Op>& step_ops,
                           const std::vector<DType>& step_types) {
  // Reads of each value that must find it stored (2: never paired away).
  std::vector<int> reads(values_.size(), 0);
  for (const std::vector<Step>* list : {&steps_, &epilogue_})
    for (const Step& st : *list)
      for (int32_t a : st.args)
        if (a >= 0) ++reads[size_t(a)];
  for (const Reduction& r : reductions_) reads[size_t(r.src)] += 2;
  for (auto [v, j] : copy_outs_) reads[size_t(v)] += 2;
  for (int32_t v : {column_load_.a, column_load_.b})
    if (v >= 0) reads[size_t(v)] += 2;
  std::vector<Step> steps;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s1 = steps_[i];
    if (i + 1 < steps_.size()) {
      const Step& s2 = steps_[i + 1];
      const int32_t v = s1.out;
      const int pos = s2.args[0] == v ? 0 : s2.args[1] == v ? 1 : -1;
      const FusedStepFn fn =
          s1.fn && s2.fn && !s1.per_segment && !s2.per_segment && s1.args[2] < 0 &&
                  s2.args[2] < 0 && pos >= 0 && s2.args[1 - pos] != v &&
                  values_[size_t(v)].kind == Kind::buffer && reads[size_t(v)] == 1 &&
                  step_types[i] == step_types[i + 1]
              ? fused_pair_fn(step_ops[i], step_ops[i + 1], pos == 1, step_types[i])
              : nullptr;
      if (fn) {
        Step p;
        p.fn = fn;
        p.args[0] = s1.args[0];
        p.args[1] = s1.args[1];
        p.args[2] = s2.args[1 - pos];
        p.arrays = (s1.arrays & 3) | ((s2.arrays >> (1 - pos) & 1) << 2);
        p.out = s2.out;
        steps.push_back(p);
        ++paired_;
        ++i;
        continue;
      }
    }
    steps.push_back(s1);
  }
  steps_ = std::move(steps);
}

void FusedLoop::plan_column_load(const ir::Graph& body, const std::vector<int32_t>& in_slots,
                                 const std::vector<int32_t>& out_slots) {
  loop_writes_ = !copy_outs_.empty() || std::any_of(values_.begin(), values_.end(),
                                                    [](auto& v) { return v.kind == Kind::output; });
  if (numel_ < 2 * results_ || column_walk_.back() < 2) return;
  const ir::Node& n = body.node(reductions_[0].src);
  if (n.op != Op::convert && n.op != Op::mul) return;
  // An operand, unless a result of the loop overwrites it (a parameter
  // updated in place): the sum reads it after the loop.
  auto stored = [&](ir::ValueId v) {
    const Value& val = values_[size_t(v)];
    if (val.kind == Kind::input)
      return std::find(out_slots.begin(), out_slots.end(), in_slots[size_t(val.index)]) ==
             out_slots.end();
    return val.kind == Kind::output;
  };
  const DType from = body.type(n.args[0]).dtype, to = n.type.dtype;
  if (n.op == Op::convert && from == DType::f32 && to == DType::f64 && stored(n.args[0]))
    column_load_ = {true, ColumnOperand::widened, n.args[0], -1};
  else if (n.op == Op::mul && from == to && (to == DType::f32 || to == DType::f64) &&
           stored(n.args[0]) && stored(n.args[1]))
    column_load_ = {true, n.args[0] == n.args[1] ? ColumnOperand::square : ColumnOperand::product,
                    n.args[0], n.args[1]};
}

}  // namespace ws::exec
