#include "exec/fused_loop_rules.hpp"

#include "exec/short_products.hpp"

#include <algorithm>

#include "exec/elementwise.hpp"
#include "exec/loops.hpp"
#include "exec/philox.hpp"
#include "exec/reduce.hpp"
#include "exec/reference.hpp"
#include "exec/short_products.hpp"
#include "ir/attr.hpp"

namespace ws::exec {
namespace {

using ir::Op;

// The step functions (FusedStepFn).
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

}  // namespace

FusedDrawFn fused_draw_fn(DType d) {
  return d == DType::f32 ? draw_uniform<float> : d == DType::f64 ? draw_uniform<double> : nullptr;
}

FusedStepFn fused_step_fn(const ir::Graph& body, const ir::Node& n) {
  FusedStepFn fn = nullptr;
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

int assign_fused_buffers(const ir::Graph& body, const std::vector<bool>& buffered,
                         const std::vector<bool>& gathered, const std::vector<bool>& held_to_end,
                         std::vector<int32_t>& buf) {
  const ir::ValueId n = body.size();
  std::vector<ir::ValueId> last(size_t(n), -1);
  for (ir::ValueId v = 0; v < n; ++v)
    for (ir::ValueId a : body.node(v).args) last[size_t(a)] = v;
  buf.assign(size_t(n), -1);
  std::vector<int32_t> free_list;
  // The element size of each buffer's last value. Steps reading a
  // broadcast run segment by segment (fused_loop.hpp), so a value may take
  // a freed buffer while the value freed there still has segments to be
  // read: writing elements of a larger size would overwrite them (a bool
  // mask under a float, found by the differential tester). A freed buffer
  // goes to a value of the same element size or smaller.
  std::vector<size_t> size_of;
  auto take = [&](size_t es) {
    for (size_t i = free_list.size(); i-- > 0;) {
      const int32_t b = free_list[i];
      if (size_of[size_t(b)] < es) continue;
      free_list.erase(free_list.begin() + int64_t(i));
      size_of[size_t(b)] = es;
      return b;
    }
    size_of.push_back(es);
    return int32_t(size_of.size() - 1);
  };
  auto esize = [&](ir::ValueId v) { return dtype_size(body.type(v).dtype); };
  for (ir::ValueId v = 0; v < n; ++v)
    if (gathered[size_t(v)]) buf[size_t(v)] = take(esize(v));
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
    buf[size_t(v)] = reuse >= 0 ? reuse : take(esize(v));
    free_list.insert(free_list.end(), freed.begin(), freed.end());
    if (last[size_t(v)] < 0 && !held_to_end[size_t(v)]) free_list.push_back(buf[size_t(v)]);
  }
  return int(size_of.size());
}

void split_reduction_walk(const Shape& in, const std::vector<int64_t>& axes, Shape& kept,
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
  return assign_fused_buffers(body, buffered, gathered, held, buf);
}

bool fusible_reduction(const ir::Graph& g, ir::ValueId v) {
  const ir::Node& n = g.node(v);
  if ((n.op != Op::reduce_sum && n.op != Op::reduce_max) || !float_dtype(n.type.dtype))
    return false;
  const Shape& in = g.type(n.args[0]).shape;
  if (n.type.numel() >= ws::numel(in)) return false;
  Shape kept, reduced;
  std::vector<int64_t> ks, rs;
  split_reduction_walk(in, ir::attr<ir::kReduceOps, "axes">(n), kept, ks, reduced, rs);
  if (reduced.empty()) return false;
  if (rs.back() == 1) return true;                  // rows
  return n.op == Op::reduce_sum && ks.back() == 1;  // columns
}

int64_t fused_scratch_bytes(const ir::Graph& body) {
  for (ir::ValueId v = 0; v < body.size(); ++v) {
    const ir::Node& n = body.node(v);
    if (n.op == Op::matmul)  // a product loop: B staged (short_products.hpp)
      return short_product_of(body.type(n.args[0]), body.type(n.args[1]), n.attrs).staged_bytes();
    if (n.op != Op::reduce_sum && n.op != Op::reduce_max) continue;
    Shape kept, reduced;
    std::vector<int64_t> ks, rs;
    split_reduction_walk(body.type(n.args[0]).shape, ir::attr<ir::kReduceOps, "axes">(n), kept, ks,
                         reduced, rs);
    if (reduced.empty() || rs.back() == 1) return 0;  // rows: streamed
    // Columns: the sums, then the operand (phases; unless the kernel is
    // given it) or the groups' sums (streamed), whichever is more.
    const int64_t es = int64_t(dtype_size(n.type.dtype)), cols = n.type.numel();
    const int64_t numel = body.type(n.args[0]).numel();
    const int64_t operand = body.node(n.args[0]).op == Op::input ? 0 : numel;
    const ColumnGroups cg = column_groups(numel / std::max<int64_t>(cols, 1));
    return column_work_offset(cols, es) + std::max(operand, cg.groups * cols) * es;
  }
  return 0;
}

ColumnGroups column_groups(int64_t rows) {
  constexpr int64_t kMostGroups = 64;
  ColumnGroups cg;
  cg.all = std::max<int64_t>(1, (rows + kSumBlock - 1) / kSumBlock);
  while (cg.all > cg.blocks * kMostGroups) cg.blocks *= 2;
  cg.groups = (cg.all + cg.blocks - 1) / cg.blocks;
  return cg;
}

bool fusible_elementwise(const ir::Graph& g, ir::ValueId v) {
  const ir::Node& n = g.node(v);
  if (n.op == Op::random_uniform) return fused_draw_fn(n.type.dtype) != nullptr;
  if (ir::op_info(n.op).category != ir::OpCategory::elementwise) return false;
  return fused_step_fn(g, n) != nullptr;
}

}  // namespace ws::exec
