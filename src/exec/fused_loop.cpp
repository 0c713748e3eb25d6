#include "exec/fused_loop.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "exec/elementwise.hpp"
#include "exec/loops.hpp"
#include "exec/nn_kernels.hpp"
#include "exec/parallel.hpp"
#include "exec/reference.hpp"

namespace ws::exec {
namespace {

using ir::Op;
using StepFn = FusedLoop::StepFn;
using Kind = FusedLoop::Kind;

// The step functions: bit i of `arrays` is set when operand i is an array
// of n elements, clear when it is one value.
template <class T, Op op>
void s_unary(const void* a, const void*, const void*, void* y, int64_t n, int arrays) {
  const T* x = static_cast<const T*>(a);
  if (arrays & 1)
    unary_array<op>(x, static_cast<T*>(y), n);
  else
    std::fill_n(static_cast<T*>(y), n, unary_value<op>(*x));
}

template <class T, Op op>
void s_binary(const void* a, const void* b, const void*, void* y, int64_t n, int arrays) {
  using R = decltype(binary_value<op>(T{}, T{}));
  binary_range<T, op>(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<R*>(y),
                      arrays & 1, arrays & 2, 0, n);
}

template <class T>
void s_select(const void* c, const void* a, const void* b, void* y, int64_t n, int arrays) {
  select_range(static_cast<const uint8_t*>(c), static_cast<const T*>(a), static_cast<const T*>(b),
               static_cast<T*>(y), arrays & 1, (arrays >> 1) & 1, (arrays >> 2) & 1, 0, n);
}

template <class S, class T>
void s_convert(const void* a, const void*, const void*, void* y, int64_t n, int arrays) {
  const S* x = static_cast<const S*>(a);
  T* out = static_cast<T*>(y);
  if (arrays & 1)
    for (int64_t i = 0; i < n; ++i) out[i] = T(x[i]);
  else
    std::fill_n(out, n, T(*x));
}

bool float_dtype(DType d) { return d == DType::f32 || d == DType::f64; }

// Draws as the random_uniform kernel draws them.
template <class T>
void draw_uniform(uint64_t seed, uint64_t offset, void* y, int64_t n) {
  philox_uniform(seed, offset, static_cast<T*>(y), n);
}

FusedLoop::DrawFn draw_fn(DType d) {
  return d == DType::f32 ? draw_uniform<float> : d == DType::f64 ? draw_uniform<double> : nullptr;
}

// The step function for node n of the body, or nullptr.
StepFn step_fn(const ir::Graph& body, const ir::Node& n) {
  StepFn fn = nullptr;
  if (n.args.empty()) return nullptr;
  const DType in = body.type(n.args.back()).dtype;
  if (n.op == Op::convert) {
    const DType out = n.type.dtype;
    auto ok = [](DType d) { return d == DType::f32 || d == DType::f64 || d == DType::b8; };
    if (!ok(in) || !ok(out)) return nullptr;
    dispatch(in, [&](auto s) {
      dispatch(out, [&](auto t) { fn = s_convert<decltype(s), decltype(t)>; });
    });
    return fn;
  }
  if (!float_dtype(in)) return nullptr;
  if (n.op == Op::select) return in == DType::f32 ? s_select<float> : s_select<double>;
  auto pick = [&](auto t) {
    using T = decltype(t);
    if (!with_binary_op(n.op, [&](auto o) { fn = s_binary<T, decltype(o)::value>; }))
      with_unary_op(n.op, [&](auto o) { fn = s_unary<T, decltype(o)::value>; });
  };
  if (in == DType::f32)
    pick(float{});
  else
    pick(double{});
  return fn;
}

// Buffers for the computed values in `buffered` (and the gathered ones,
// which hold theirs for the whole chunk), reusing a buffer once its value is
// read for the last time. A step may write over an operand it reads last
// (every step computes element i from element i alone) when the element
// sizes agree. Returns the buffer count; buf[v] is v's buffer.
int assign_buffers(const ir::Graph& body, const std::vector<bool>& buffered,
                   const std::vector<bool>& gathered, const std::vector<bool>& held_to_end,
                   std::vector<int32_t>& buf) {
  const ir::ValueId n = body.size();
  std::vector<ir::ValueId> last(size_t(n), -1);
  for (ir::ValueId v = 0; v < n; ++v)
    for (ir::ValueId a : body.node(v).args) last[size_t(a)] = v;
  buf.assign(size_t(n), -1);
  std::vector<int32_t> free_list;
  int32_t count = 0;
  auto take = [&]() {
    if (!free_list.empty()) {
      const int32_t b = free_list.back();
      free_list.pop_back();
      return b;
    }
    return count++;
  };
  for (ir::ValueId v = 0; v < n; ++v)
    if (gathered[size_t(v)]) buf[size_t(v)] = take();
  std::vector<bool> released(size_t(n), false);
  for (ir::ValueId v = 0; v < n; ++v) {
    const ir::Node& node = body.node(v);
    if (!buffered[size_t(v)]) continue;
    // Operands read for the last time here free their buffers first.
    // (A buffer of another element size is freed only after v has its own:
    // v must not overwrite elements its step still has to read.)
    int32_t reuse = -1;
    std::vector<int32_t> freed;
    for (ir::ValueId a : node.args)
      if (buffered[size_t(a)] && !held_to_end[size_t(a)] && last[size_t(a)] == v &&
          !released[size_t(a)]) {
        if (reuse < 0 && dtype_size(body.type(a).dtype) == dtype_size(node.type.dtype))
          reuse = buf[size_t(a)];
        else
          freed.push_back(buf[size_t(a)]);
        released[size_t(a)] = true;  // an operand listed twice frees once
      }
    buf[size_t(v)] = reuse >= 0 ? reuse : take();
    free_list.insert(free_list.end(), freed.begin(), freed.end());
    if (last[size_t(v)] < 0 && !held_to_end[size_t(v)]) free_list.push_back(buf[size_t(v)]);
  }
  return count;
}

// Elements [s, s + len) of a broadcast value over the whole walk.
template <class T>
void gather_range_typed(const Shape& walk, const std::vector<int64_t>& strides, const T* x, T* y,
                        int64_t s, int64_t len) {
  strided_range(walk, strides, s, s + len, [x, y, s](int64_t i, int64_t o, int64_t n, int64_t st) {
    strided_row(x + o, y + (i - s), n, st);
  });
}

void gather_range(const Shape& walk, const FusedLoop::Value& val, const void* x, int64_t s,
                  int64_t len, std::byte* y) {
  if (val.esize == 8)
    gather_range_typed(walk, val.strides, static_cast<const uint64_t*>(x),
                       reinterpret_cast<uint64_t*>(y), s, len);
  else if (val.esize == 4)
    gather_range_typed(walk, val.strides, static_cast<const uint32_t*>(x),
                       reinterpret_cast<uint32_t*>(y), s, len);
  else
    gather_range_typed(walk, val.strides, static_cast<const uint8_t*>(x),
                       reinterpret_cast<uint8_t*>(y), s, len);
}

// The operand walk of a reduction over `axes` of `in`, merged: kept and
// reduced dims, outer to inner, with their strides in the operand.
void split_walk(const Shape& in, const std::vector<int64_t>& axes, Shape& kept,
                std::vector<int64_t>& kept_stride, Shape& reduced,
                std::vector<int64_t>& red_stride) {
  std::vector<std::vector<int64_t>> st = {row_major_strides(in), reduce_result_strides(in, axes)};
  Shape walk = in;
  merge_joint(walk, st);
  for (size_t d = 0; d < walk.size(); ++d) {
    const bool r = st[1][d] == 0 && walk[d] > 1;
    (r ? reduced : kept).push_back(walk[d]);
    (r ? red_stride : kept_stride).push_back(st[0][d]);
  }
}

}  // namespace

FusedLoop::FusedLoop(const ir::Graph& body, const std::vector<int32_t>& in_slots,
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
  int64_t cost = 0;
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
      val.kind = Kind::constant;
      val.index = int32_t(constants_.size());
      constants_.push_back(0.0);
      dispatch(n.type.dtype, [&](auto t) {
        using T = decltype(t);
        const T x = T(n.attrs.f("value"));
        std::memcpy(&constants_.back(), &x, sizeof x);
      });
    } else if (n.op == Op::broadcast) {
      const ir::ValueId src = n.args[0];
      WS_CHECK(body.node(src).op == Op::input) << "fused loop: a broadcast of a computed value";
      val.index = values_[size_t(src)].index;
      if (body.type(src).numel() == 1) {
        val.kind = Kind::scalar;
      } else {
        WS_CHECK(loop) << "fused loop: a broadcast after a reduction";
        val.kind = Kind::gather;  // until the rows are known
        broadcasts_.push_back(v);
      }
    } else if (n.op == Op::reduce_sum || n.op == Op::reduce_max) {
      WS_CHECK(n.attrs.ints("axes") == body.node(first_reduce).attrs.ints("axes"))
          << "fused loop: reductions over different axes";
      reductions_.push_back({v, n.args[0], n.op == Op::reduce_max, n.type.dtype});
      val.kind = Kind::reduced;
      per_result[size_t(v)] = true;
      ops.emplace_back(ir::op_name(n.op));
    } else {
      Step st;
      if (n.op == Op::random_uniform) {
        WS_CHECK(loop) << "fused loop: a random draw after a reduction";
        st.draw = draw_fn(n.type.dtype);
        st.skip = n.attrs.i_or("skip", 0);
      } else {
        st.fn = step_fn(body, n);
      }
      WS_CHECK(st.fn || st.draw) << "fused loop: no step for " << ir::op_name(n.op) << " on "
                                 << body.type(n.args.back()).str();
      WS_CHECK(n.args.size() <= 3) << "fused loop: " << ir::op_name(n.op);
      for (size_t i = 0; i < n.args.size(); ++i) st.args[i] = n.args[i];
      st.out = v;
      if (loop) {
        step_at[size_t(v)] = ir::ValueId(steps_.size());
        steps_.push_back(st);
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
    split_walk(body.type(reductions_[0].src).shape,
               body.node(reductions_[0].value).attrs.ints("axes"), kept_, kept_stride_, reduced_,
               red_stride_);
    WS_CHECK(!reduced_.empty()) << "fused loop: a reduction that reduces nothing";
    columns_ = red_stride_.back() != 1;
    WS_CHECK(!columns_ || (reductions_.size() == 1 && !reductions_[0].is_max &&
                           reduced_.size() == 1 && kept_.size() == 1 && kept_stride_[0] == 1))
        << "fused loop: a reduction keeping its operand's innermost dim that is not one sum "
           "over leading dims";
    results_ = ws::numel(kept_);
    if (columns_) column_walk_ = {reduced_[0], kept_[0]};
  }
  // Rows: the shape merged as far as every broadcast operand allows.
  {
    std::vector<std::vector<int64_t>> strides = {row_major_strides(shape)};
    for (int32_t v : broadcasts_) {
      const ir::Node& n = body.node(v);
      strides.push_back(
          broadcast_source_strides(body.type(n.args[0]).shape, shape, n.attrs.ints("dims")));
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
      val.kind = !segmented_      ? Kind::gather
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
      // operand stored there.
      bool later_read = false, after = false;
      for (const Step& st : epilogue_) {
        for (int32_t a : st.args)
          if (after && a >= 0 && values_[size_t(a)].kind == Kind::red_input &&
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
    gathered[size_t(v)] = values_[size_t(v)].kind == Kind::gather;
  }
  std::vector<int32_t> buf;
  const int buffers = assign_buffers(body, buffered, gathered, held_to_end, buf);
  WS_CHECK(buffers <= kMaxFusedBuffers) << "fused loop needs " << buffers << " buffers";
  for (ir::ValueId v = 0; v < body.size(); ++v) {
    values_[size_t(v)].buf = buf[size_t(v)];
    const Kind k = values_[size_t(v)].kind;
    if (k == Kind::input || k == Kind::output || k == Kind::gather || k == Kind::row_scalar ||
        k == Kind::row_array)
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
  // Slots: the operands read per segment, with their walks in bytes.
  std::vector<int8_t> slot_of(values_.size(), -1);
  for (int32_t v : broadcasts_) {
    const Value& val = values_[size_t(v)];
    if (val.kind != Kind::row_scalar && val.kind != Kind::row_array) continue;
    SlotWalk w{val.index, val.inner * val.esize, {}, {}};
    for (size_t d = 0; d + 1 < walk_.size(); ++d) w.stride[d] = val.strides[d] * val.esize;
    for (int64_t d = int64_t(walk_.size()) - 2, wrapped = 0; d >= 0; --d) {
      w.next[d] = w.stride[d] - wrapped;
      wrapped += (walk_[size_t(d)] - 1) * w.stride[d];
    }
    slot_of[size_t(v)] = int8_t(slots_.size());
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
  const int64_t per_chunk = std::max<int64_t>(1, grain_for(std::max<int64_t>(cost, 1)));
  grain_ = reductions_.empty()
               ? per_chunk
               : std::max<int64_t>(1, per_chunk / std::max<int64_t>(1, numel_ / results_));
  name_ = "fused(";
  for (size_t i = 0; i < ops.size() && i < 4; ++i) name_ += (i ? "," : "") + ops[i];
  if (ops.size() > 4) name_ += fmt::format(",+{}", ops.size() - 4);
  name_ += ")";
}

// Pointers that stay put for a whole run of the kernel: one-element
// operands, constants, and buffers.
void FusedLoop::fixed_pointers(const void* const* ins, std::byte (*bufs)[kFusedChunk * 8],
                               const void** ptr) const {
  for (size_t v = 0; v < values_.size(); ++v) {
    const Value& val = values_[v];
    if (val.kind == Kind::scalar)
      ptr[v] = ins[val.index];
    else if (val.kind == Kind::constant)
      ptr[v] = &constants_[size_t(val.index)];
    else if (val.kind == Kind::buffer && bufs)
      ptr[v] = bufs[val.buf];
  }
}

// Pointers to the loop values that move with the chunk, for elements
// [s, s + len) of the loop, gathering broadcast operands that are neither
// one value nor a run along a row.
void FusedLoop::chunk_pointers(int64_t s, int64_t len, const void* const* ins, void* const* outs,
                               std::byte (*bufs)[kFusedChunk * 8], const void** ptr) const {
  for (int32_t v : moving_) {
    const Value& val = values_[size_t(v)];
    switch (val.kind) {
      case Kind::input:
        ptr[v] = static_cast<const std::byte*>(ins[val.index]) + s * val.esize;
        break;
      case Kind::output: ptr[v] = static_cast<std::byte*>(outs[val.index]) + s * val.esize; break;
      case Kind::gather:
        gather_range(walk_, val, ins[val.index], s, len, bufs[val.buf]);
        ptr[v] = bufs[val.buf];
        break;
      default: break;
    }
  }
}

// The row pieces of the chunk [s, s + len), and where each slot lies in
// each: the dim each next row counts up, then per slot its pointers.
void FusedLoop::segments(int64_t s, int64_t len, const void* const* ins, Segments& sg) const {
  const int64_t rank = int64_t(walk_.size()) - 1;
  int64_t idx[kMaxRank], idx0[kMaxRank];
  const int64_t row = s / row_len_, c0 = s % row_len_;
  for (int64_t d = rank - 1, r = row; d >= 0; --d) {
    idx0[d] = idx[d] = r % walk_[size_t(d)];
    r /= walk_[size_t(d)];
  }
  const int64_t n = (c0 + len + row_len_ - 1) / row_len_;
  WS_CHECK(n <= kMaxSegments) << "fused loop: a chunk of " << n << " segments";
  sg.n = n;
  int8_t up[kMaxSegments];  // the dim that counts up from segment k to k + 1
  for (int64_t k = 0; k < n; ++k) {
    sg.start[k] = k == 0 ? 0 : k * row_len_ - c0;
    sg.len[k] = std::min((k + 1) * row_len_ - c0, len) - sg.start[k];
    if (k + 1 == n) break;
    int64_t d = rank - 1;
    while (d > 0 && idx[d] + 1 == walk_[size_t(d)]) idx[d--] = 0;
    ++idx[d];
    up[k] = int8_t(d);
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const SlotWalk& w = slots_[i];
    const std::byte* at = static_cast<const std::byte*>(ins[w.index]);
    for (int64_t d = 0; d < rank; ++d) at += idx0[d] * w.stride[d];
    sg.at[i][0] = at + c0 * w.inner;
    for (int64_t k = 1; k < n; ++k) sg.at[i][k] = at += w.next[up[k - 1]];
  }
}

void FusedLoop::run_steps(const Step* first, const Step* last, const void* const* ptr, int64_t len,
                          int64_t s) {
  for (const Step* p = first; p != last; ++p) {
    const Step& st = *p;
    if (st.draw) {
      st.draw(uint64_t(*static_cast<const int64_t*>(ptr[st.args[0]])),
              uint64_t(*static_cast<const int64_t*>(ptr[st.args[1]]) + st.skip + s),
              const_cast<void*>(ptr[st.out]), len);
      continue;
    }
    st.fn(st.args[0] >= 0 ? ptr[st.args[0]] : nullptr, st.args[1] >= 0 ? ptr[st.args[1]] : nullptr,
          st.args[2] >= 0 ? ptr[st.args[2]] : nullptr, const_cast<void*>(ptr[st.out]), len,
          st.arrays);
  }
}

void FusedLoop::run_chunk(int64_t s, int64_t len, const void* const* ins, void* const* outs,
                          std::byte (*bufs)[kFusedChunk * 8], const void** ptr,
                          Segments& sg) const {
  chunk_pointers(s, len, ins, outs, bufs, ptr);
  const Step* steps = steps_.data();
  if (broadcasts_.empty() || !segmented_)
    return run_steps(steps, steps + steps_.size(), ptr, len, s);
  segments(s, len, ins, sg);
  for (size_t i = 0; i < steps_.size();) {
    if (!steps_[i].per_segment) {
      run_steps(steps + i, steps + i + 1, ptr, len, s);
      ++i;
      continue;
    }
    // A run of steps reading broadcast operands: segment by segment.
    size_t j = i;
    while (j < steps_.size() && steps_[j].per_segment) ++j;
    for (int64_t k = 0; k < sg.n; ++k)
      for (size_t t = i; t < j; ++t) {
        const Step& st = steps[t];
        const void* a[3];
        for (int q = 0; q < 3; ++q)
          a[q] = st.cls[q] == 2 ? sg.at[st.slot[q]][k]
                 : st.cls[q] == 1
                     ? static_cast<const std::byte*>(ptr[st.args[q]]) + sg.start[k] * st.es[q]
                 : st.args[q] >= 0 ? ptr[st.args[q]]
                                   : nullptr;
        std::byte* y =
            static_cast<std::byte*>(const_cast<void*>(ptr[st.out])) + sg.start[k] * st.es[3];
        st.fn(a[0], a[1], a[2], y, sg.len[k], st.arrays);
      }
    i = j;
  }
}

void FusedLoop::copy_out(int64_t s, int64_t len, const void* const* ptr, void* const* outs) const {
  for (auto [v, j] : copy_outs_) {
    const int64_t es = values_[size_t(v)].esize;
    std::memcpy(static_cast<std::byte*>(outs[j]) + s * es, ptr[v], size_t(len * es));
  }
}

void FusedLoop::run(const void* const* ins, void* const* outs, void* scratch) const {
  if (columns_) return run_columns(ins, outs, scratch);
  if (!reductions_.empty()) return run_reduce(ins, outs);
  run_loop(ins, outs, grain_, -1, nullptr);
}

void FusedLoop::run_loop(const void* const* ins, void* const* outs, int64_t grain, int32_t keep,
                         std::byte* kept) const {
  parallel_for(
      numel_, grain,
      [&](int64_t begin, int64_t end) {
        alignas(64) std::byte bufs[kMaxFusedBuffers][kFusedChunk * 8];
        const void* ptr[kMaxFusedValues];
        Segments sg;
        fixed_pointers(ins, bufs, ptr);
        for (int64_t s = begin; s < end;) {
          const int64_t len = std::min(s + kFusedChunk, end) - s;
          run_chunk(s, len, ins, outs, bufs, ptr, sg);
          copy_out(s, len, ptr, outs);
          if (kept) {
            const int64_t es = values_[size_t(keep)].esize;
            std::memcpy(kept + s * es, ptr[keep], size_t(len * es));
          }
          s += len;
        }
      },
      1);
}

namespace {

void k_fused(const Kernel& k, void* const* s) {
  const void* ins[kMaxOperands];
  void* outs[kMaxOperands + 1];
  for (size_t i = 0; i < k.in.size(); ++i) ins[i] = s[k.in[i]];
  outs[0] = s[k.out];
  for (size_t j = 0; j < k.extra_out.size(); ++j)
    outs[j + 1] = k.extra_out[j] >= 0 ? s[k.extra_out[j]] : nullptr;
  k.loop->run(ins, outs, k.scratch >= 0 ? s[k.scratch] : nullptr);
}

}  // namespace

void choose_fused_kernel(Kernel& k, const ir::Graph& body) {
  if (k.in.size() > kMaxOperands || k.extra_out.size() > kMaxOperands)
    throw Error(fmt::format("fusion: {} operands and {} results; a fused kernel takes at most {}{}",
                            k.in.size(), k.extra_out.size() + 1, kMaxOperands, at(k.loc)));
  std::vector<int32_t> outs = {k.out};
  outs.insert(outs.end(), k.extra_out.begin(), k.extra_out.end());
  k.loop = std::make_shared<FusedLoop>(body, k.in, outs);
  k.fn = k_fused;
  k.name = k.loop->name().c_str();
}

int fused_buffers_needed(const ir::Graph& body) {
  std::vector<bool> buffered(size_t(body.size())), gathered(size_t(body.size())),
      held(size_t(body.size()), false);
  for (ir::ValueId v = 0; v < body.size(); ++v) {
    const ir::Node& n = body.node(v);
    gathered[size_t(v)] = n.op == Op::broadcast && body.type(n.args[0]).numel() != 1;
    buffered[size_t(v)] = n.op != Op::input && n.op != Op::full && n.op != Op::broadcast;
  }
  for (const ir::Output& o : body.outputs) held[size_t(o.value)] = true;
  std::vector<int32_t> buf;
  return assign_buffers(body, buffered, gathered, held, buf);
}

bool fusible_reduction(const ir::Graph& g, ir::ValueId v) {
  const ir::Node& n = g.node(v);
  if ((n.op != Op::reduce_sum && n.op != Op::reduce_max) || !float_dtype(n.type.dtype))
    return false;
  const Shape& in = g.type(n.args[0]).shape;
  if (n.type.numel() >= ws::numel(in)) return false;
  Shape kept, reduced;
  std::vector<int64_t> ks, rs;
  split_walk(in, n.attrs.ints("axes"), kept, ks, reduced, rs);
  if (reduced.empty()) return false;
  if (rs.back() == 1) return true;  // rows
  return n.op == Op::reduce_sum && reduced.size() == 1 && kept.size() == 1 && ks[0] == 1;
}

int64_t fused_scratch_bytes(const ir::Graph& body) {
  for (ir::ValueId v = 0; v < body.size(); ++v) {
    const ir::Node& n = body.node(v);
    if (n.op != Op::reduce_sum && n.op != Op::reduce_max) continue;
    Shape kept, reduced;
    std::vector<int64_t> ks, rs;
    split_walk(body.type(n.args[0]).shape, n.attrs.ints("axes"), kept, ks, reduced, rs);
    if (reduced.empty() || rs.back() == 1) return 0;  // rows: streamed
    // Columns: the operand (unless the kernel is given it) and the sums.
    const int64_t es = int64_t(dtype_size(n.type.dtype));
    const int64_t operand = body.node(n.args[0]).op == Op::input ? 0 : body.type(n.args[0]).numel();
    return (operand + 64 / es) * es + n.type.numel() * es;
  }
  return 0;
}

bool fusible_elementwise(const ir::Graph& g, ir::ValueId v) {
  const ir::Node& n = g.node(v);
  if (n.op == Op::random_uniform) return draw_fn(n.type.dtype) != nullptr;
  if (ir::op_info(n.op).category != ir::OpCategory::elementwise) return false;
  return step_fn(g, n) != nullptr;
}

}  // namespace ws::exec
