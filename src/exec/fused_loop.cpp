#include "exec/fused_loop.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "exec/elementwise.hpp"
#include "exec/loops.hpp"
#include "exec/parallel.hpp"
#include "exec/reference.hpp"

namespace ws::exec {
namespace {

using ir::Op;
using StepFn = FusedLoop::StepFn;
using Kind = FusedLoop::Kind;

// Body values a step may read at most (select reads three).
constexpr size_t kMaxFusedValues = 128;

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

// Work per element in cheap elements (parallel.hpp): transcendentals cost
// several, pow (std::pow in double) tens.
int64_t step_cost(Op op) {
  switch (op) {
    case Op::exp:
    case Op::log:
    case Op::tanh:
    case Op::sigmoid:
    case Op::erf:
    case Op::rsqrt:
    case Op::sqrt: return 4;
    case Op::pow: return 32;
    default: return 1;
  }
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
    int32_t reuse = -1;
    for (ir::ValueId a : node.args)
      if (buffered[size_t(a)] && !held_to_end[size_t(a)] && last[size_t(a)] == v &&
          !released[size_t(a)]) {
        if (reuse < 0 && dtype_size(body.type(a).dtype) == dtype_size(node.type.dtype))
          reuse = buf[size_t(a)];
        else
          free_list.push_back(buf[size_t(a)]);
        released[size_t(a)] = true;  // an operand listed twice frees once
      }
    buf[size_t(v)] = reuse >= 0 ? reuse : take();
    if (last[size_t(v)] < 0 && !held_to_end[size_t(v)]) free_list.push_back(buf[size_t(v)]);
  }
  return count;
}

// `len` elements of a broadcast value at source offset `off`, `inner` apart.
void gather(const void* x, int64_t esize, int64_t off, int64_t inner, std::byte* y, int64_t len) {
  if (esize == 8)
    strided_row(static_cast<const uint64_t*>(x) + off, reinterpret_cast<uint64_t*>(y), len, inner);
  else if (esize == 4)
    strided_row(static_cast<const uint32_t*>(x) + off, reinterpret_cast<uint32_t*>(y), len, inner);
  else
    strided_row(static_cast<const uint8_t*>(x) + off, reinterpret_cast<uint8_t*>(y), len, inner);
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

}  // namespace

FusedLoop::FusedLoop(const ir::Graph& body, const std::vector<int32_t>& in_slots,
                     const std::vector<int32_t>& out_slots) {
  WS_CHECK(!body.outputs.empty()) << "a fusion body without results";
  WS_CHECK(in_slots.size() == body.inputs.size() && out_slots.size() == body.outputs.size())
      << "fused loop: slots do not match the body";
  WS_CHECK(size_t(body.size()) <= kMaxFusedValues)
      << "fused loop body of " << body.size() << " values";
  const Shape& shape = body.type(body.outputs[0].value).shape;
  numel_ = ws::numel(shape);
  values_.resize(size_t(body.size()));
  std::vector<ir::ValueId> step_at(size_t(body.size()), -1);  // step index of a computed value
  std::vector<std::string> ops;
  int64_t cost = 0;
  for (ir::ValueId v = 0; v < body.size(); ++v) {
    const ir::Node& n = body.node(v);
    Value& val = values_[size_t(v)];
    val.esize = int64_t(dtype_size(n.type.dtype));
    if (n.op == Op::input) {
      val.index = int32_t(body.input_index(v));
      val.kind = n.type.numel() == 1 ? Kind::scalar : Kind::input;
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
        val.kind = Kind::gather;  // until the rows are known
        broadcasts_.push_back(v);
      }
    } else {
      Step st;
      st.fn = step_fn(body, n);
      WS_CHECK(st.fn) << "fused loop: no step for " << ir::op_name(n.op) << " on "
                      << body.type(n.args.back()).str();
      WS_CHECK(n.args.size() <= 3) << "fused loop: " << ir::op_name(n.op);
      for (size_t i = 0; i < n.args.size(); ++i) st.args[i] = n.args[i];
      st.out = v;
      step_at[size_t(v)] = ir::ValueId(steps_.size());
      steps_.push_back(st);
      ops.emplace_back(ir::op_name(n.op));
      cost += step_cost(n.op);
    }
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
    const bool by_rows = walk_.back() >= kFusedChunk / 2 || walk_.size() == 1;
    row_len_ = by_rows ? walk_.back() : numel_;
    chunks_per_row_ = std::max<int64_t>(1, (row_len_ + kFusedChunk - 1) / kFusedChunk);
    for (size_t b = 0; b < broadcasts_.size(); ++b) {
      Value& val = values_[size_t(broadcasts_[b])];
      val.strides = strides[b + 1];
      val.inner = val.strides.back();
      val.kind = !by_rows         ? Kind::gather
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
  std::vector<bool> buffered(size_t(body.size())), gathered(size_t(body.size()));
  for (ir::ValueId v = 0; v < body.size(); ++v) {
    buffered[size_t(v)] = values_[size_t(v)].kind == Kind::buffer;
    gathered[size_t(v)] = values_[size_t(v)].kind == Kind::gather;
  }
  std::vector<int32_t> buf;
  const int buffers = assign_buffers(body, buffered, gathered, held_to_end, buf);
  WS_CHECK(buffers <= kMaxFusedBuffers) << "fused loop needs " << buffers << " buffers";
  for (ir::ValueId v = 0; v < body.size(); ++v) values_[size_t(v)].buf = buf[size_t(v)];
  for (Step& st : steps_)
    for (int i = 0; i < 3; ++i)
      if (st.args[i] >= 0) {
        const Kind k = values_[size_t(st.args[i])].kind;
        if (k != Kind::scalar && k != Kind::constant && k != Kind::row_scalar) st.arrays |= 1 << i;
      }
  grain_ =
      std::max<int64_t>(1, grain_for(std::max<int64_t>(cost, 1)) / std::min(row_len_, kFusedChunk));
  name_ = "fused(";
  for (size_t i = 0; i < ops.size() && i < 4; ++i) name_ += (i ? "," : "") + ops[i];
  if (ops.size() > 4) name_ += fmt::format(",+{}", ops.size() - 4);
  name_ += ")";
}

void FusedLoop::run(const void* const* ins, void* const* outs) const {
  const bool by_rows = row_len_ != numel_ || walk_.size() == 1;
  const int64_t rank = by_rows ? int64_t(walk_.size()) - 1 : 0;
  parallel_for(
      numel_ == 0 ? 0 : numel_ / row_len_ * chunks_per_row_, grain_,
      [&](int64_t begin, int64_t end) {
        alignas(64) std::byte bufs[kMaxFusedBuffers][kFusedChunk * 8];
        const void* ptr[kMaxFusedValues];
        for (int64_t u = begin; u < end; ++u) {
          const int64_t row = u / chunks_per_row_, c0 = (u % chunks_per_row_) * kFusedChunk;
          const int64_t len = std::min(kFusedChunk, row_len_ - c0), s = row * row_len_ + c0;
          int64_t idx[kMaxRank];
          for (int64_t d = rank - 1, r = row; d >= 0; --d) {
            idx[d] = r % walk_[size_t(d)];
            r /= walk_[size_t(d)];
          }
          for (size_t v = 0; v < values_.size(); ++v) {
            const Value& val = values_[v];
            switch (val.kind) {
              case Kind::input:
                ptr[v] = static_cast<const std::byte*>(ins[val.index]) + s * val.esize;
                break;
              case Kind::scalar: ptr[v] = ins[val.index]; break;
              case Kind::constant: ptr[v] = &constants_[size_t(val.index)]; break;
              case Kind::buffer: ptr[v] = bufs[val.buf]; break;
              case Kind::output:
                ptr[v] = static_cast<std::byte*>(outs[val.index]) + s * val.esize;
                break;
              case Kind::gather:
                if (!by_rows) {  // chunks across rows: the whole walk
                  gather_range(walk_, val, ins[val.index], s, len, bufs[val.buf]);
                  ptr[v] = bufs[val.buf];
                  break;
                }
                [[fallthrough]];
              case Kind::row_scalar:
              case Kind::row_array: {
                int64_t off = c0 * val.inner;
                for (int64_t d = 0; d < rank; ++d) off += idx[d] * val.strides[size_t(d)];
                if (val.kind == Kind::gather) {
                  gather(ins[val.index], val.esize, off, val.inner, bufs[val.buf], len);
                  ptr[v] = bufs[val.buf];
                } else {
                  ptr[v] = static_cast<const std::byte*>(ins[val.index]) + off * val.esize;
                }
                break;
              }
            }
          }
          // Streams of full-size operands and results: fetch the chunk after
          // next while this one runs (a fused loop reads and writes many
          // arrays a little at a time, which the hardware prefetcher alone
          // does not keep ahead of).
          if (const int64_t ahead = s + 2 * kFusedChunk; ahead + kFusedChunk <= numel_) {
            for (size_t v = 0; v < values_.size(); ++v) {
              const Value& val = values_[v];
              if (val.kind != Kind::input && val.kind != Kind::output) continue;
              const std::byte* base = val.kind == Kind::input
                                          ? static_cast<const std::byte*>(ins[val.index])
                                          : static_cast<const std::byte*>(outs[val.index]);
              const std::byte* next = base + ahead * val.esize;
              for (int64_t b = 0; b < kFusedChunk * val.esize; b += 64)
                if (val.kind == Kind::input)
                  __builtin_prefetch(next + b, 0, 3);
                else
                  __builtin_prefetch(next + b, 1, 3);
            }
          }
          for (const Step& st : steps_)
            st.fn(st.args[0] >= 0 ? ptr[st.args[0]] : nullptr,
                  st.args[1] >= 0 ? ptr[st.args[1]] : nullptr,
                  st.args[2] >= 0 ? ptr[st.args[2]] : nullptr, const_cast<void*>(ptr[st.out]), len,
                  st.arrays);
          for (auto [v, j] : copy_outs_) {
            const int64_t es = values_[size_t(v)].esize;
            std::memcpy(static_cast<std::byte*>(outs[j]) + s * es, ptr[v], size_t(len * es));
          }
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
  k.loop->run(ins, outs);
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

bool fusible_elementwise(const ir::Graph& g, ir::ValueId v) {
  const ir::Node& n = g.node(v);
  if (ir::op_info(n.op).category != ir::OpCategory::elementwise) return false;
  return step_fn(g, n) != nullptr;
}

}  // namespace ws::exec
