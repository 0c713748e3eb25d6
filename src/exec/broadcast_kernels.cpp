#include "exec/broadcast_kernels.hpp"

#include <array>

#include "exec/elementwise.hpp"
#include "exec/parallel.hpp"
#include "exec/reference.hpp"
#include "exec/strided_walk.hpp"

namespace ws::exec {
namespace {

using ir::Op;

constexpr int kMaxBroadcastOperands = 3;  // select reads three

// Calls f(y_offset, offsets, length, inner_strides) for every row of k.walk;
// offsets[i] is operand i's offset of the row's first element. Rows are split
// across threads.
template <int N, class F>
void for_each_row(const Kernel& k, F&& f) {
  const int64_t r = int64_t(k.walk.size()), len = k.walk[size_t(r - 1)];
  const int64_t* st = k.strides.data();  // operand i, dim d: st[i * r + d]
  std::array<const int64_t*, N> stride;
  int64_t inner[N];
  for (int i = 0; i < N; ++i) stride[i] = st + i * r, inner[i] = st[i * r + r - 1];
  parallel_for(
      numel(k.walk) / len, grain_for(len),
      [&](int64_t r0, int64_t r1) {
        walk_rows<N>(k.walk, stride, r0 * len, r1 * len,
                     [&](int64_t i, const int64_t* off, int64_t n) { f(i, off, n, inner); });
      },
      1);
}

template <class T, Op op>
void k_binary_bcast(const Kernel& k, void* const* s) {
  using R = decltype(binary_value<op>(T{}, T{}));
  const T* a = static_cast<const T*>(s[k.in[0]]);
  const T* b = static_cast<const T*>(s[k.in[1]]);
  R* y = static_cast<R*>(s[k.out]);
  for_each_row<2>(k, [&](int64_t yo, const int64_t* off, int64_t len, const int64_t* inner) {
    const T *x0 = a + off[0], *x1 = b + off[1];
    R* out = y + yo;
    // The shapes broadcasts leave: both rows contiguous, or one a repeated value.
    if (inner[0] == 1 && inner[1] == 1) {
      for (int64_t j = 0; j < len; ++j) out[j] = binary_value<op>(x0[j], x1[j]);
    } else if (inner[0] == 1 && inner[1] == 0) {
      const T v = *x1;
      for (int64_t j = 0; j < len; ++j) out[j] = binary_value<op>(x0[j], v);
    } else if (inner[0] == 0 && inner[1] == 1) {
      const T v = *x0;
      for (int64_t j = 0; j < len; ++j) out[j] = binary_value<op>(v, x1[j]);
    } else {
      for (int64_t j = 0; j < len; ++j)
        out[j] = binary_value<op>(x0[j * inner[0]], x1[j * inner[1]]);
    }
  });
}

template <class T>
void k_select_bcast(const Kernel& k, void* const* s) {
  const uint8_t* c = static_cast<const uint8_t*>(s[k.in[0]]);
  const T* a = static_cast<const T*>(s[k.in[1]]);
  const T* b = static_cast<const T*>(s[k.in[2]]);
  T* y = static_cast<T*>(s[k.out]);
  for_each_row<3>(k, [&](int64_t yo, const int64_t* off, int64_t len, const int64_t* in) {
    const uint8_t* cr = c + off[0];
    const T *ar = a + off[1], *br = b + off[2];
    T* out = y + yo;
    if (in[0] == 1 && in[1] == 1 && in[2] == 0) {  // select(mask, dy, 0)
      const T bv = *br;
      for (int64_t j = 0; j < len; ++j) out[j] = cr[j] ? ar[j] : bv;
    } else if (in[0] == 1 && in[1] == 0 && in[2] == 1) {  // relu's: select(x <= 0, 0, dy)
      const T av = *ar;
      for (int64_t j = 0; j < len; ++j) out[j] = cr[j] ? av : br[j];
    } else {
      for (int64_t j = 0; j < len; ++j) out[j] = cr[j * in[0]] ? ar[j * in[1]] : br[j * in[2]];
    }
  });
}

template <class T>
KernelFn binary_bcast_fn(Op op) {
  if (op == Op::select) return k_select_bcast<T>;
  KernelFn fn = nullptr;
  with_binary_op(op, [&](auto o) { fn = k_binary_bcast<T, decltype(o)::value>; });
  return fn;
}

}  // namespace

bool takes_broadcast_operands(Op op, DType dt) {
  return (dt == DType::f32 || dt == DType::f64) && binary_bcast_fn<float>(op) != nullptr;
}

void choose_broadcast_kernel(Kernel& k, const std::vector<std::vector<int64_t>>& operand_strides) {
  const DType dt = k.in_types.back().dtype;
  WS_CHECK(takes_broadcast_operands(k.op, dt))
      << "no broadcast-operand kernel for " << ir::op_name(k.op) << " on " << dtype_name(dt);
  WS_CHECK(int(operand_strides.size()) <= kMaxBroadcastOperands &&
           operand_strides.size() == k.in.size())
      << "operand strides for " << ir::op_name(k.op);
  Shape shape = k.out_type.shape;
  std::vector<std::vector<int64_t>> st = operand_strides;
  merge_joint(shape, st);
  WS_CHECK(int64_t(shape.size()) <= kMaxRank) << "rank " << shape.size();
  k.walk = shape;
  k.strides.clear();
  for (const auto& v : st) k.strides.insert(k.strides.end(), v.begin(), v.end());
  k.p[0] = k.out_type.numel();
  k.fn = dt == DType::f32 ? binary_bcast_fn<float>(k.op) : binary_bcast_fn<double>(k.op);
  k.name = k.op == Op::select ? "select_bcast" : "binary_bcast";
}

}  // namespace ws::exec
