// Pair steps of fused loops (fused_loop.hpp: FusedLoop::pair_steps): two
// binary ops in one pass over a chunk, the first's value never stored.
#include <cstdint>

#include "exec/elementwise.hpp"
#include "exec/fused_loop_rules.hpp"

namespace ws::exec {
namespace {

using ir::Op;

// y[i] = o2(o1(a[i], b[i]), c[i]) (o2(c[i], o1(...)) when `second`), each
// operand an array or one value as va, vb, vc say. Each op is binary_value,
// the function its own step runs, and contraction is off for the library
// (cmake/layers.cmake): a product followed by a sum rounds twice, as the
// two steps do.
template <class T, Op o1, Op o2, bool second, bool va, bool vb, bool vc>
void pair_loop(const T* a, const T* b, const T* c, T* y, int64_t n) {
  const T a0 = *a, b0 = *b, c0 = *c;
  for (int64_t i = 0; i < n; ++i) {
    const T t = binary_value<o1>(va ? a[i] : a0, vb ? b[i] : b0);
    const T u = vc ? c[i] : c0;
    y[i] = second ? binary_value<o2>(u, t) : binary_value<o2>(t, u);
  }
}

template <class T, Op o1, Op o2, bool second>
void s_pair(const void* pa, const void* pb, const void* pc, void* py, int64_t n, int arrays) {
  const T* a = static_cast<const T*>(pa);
  const T* b = static_cast<const T*>(pb);
  const T* c = static_cast<const T*>(pc);
  T* y = static_cast<T*>(py);
  switch (arrays & 7) {
    case 0: return pair_loop<T, o1, o2, second, false, false, false>(a, b, c, y, n);
    case 1: return pair_loop<T, o1, o2, second, true, false, false>(a, b, c, y, n);
    case 2: return pair_loop<T, o1, o2, second, false, true, false>(a, b, c, y, n);
    case 3: return pair_loop<T, o1, o2, second, true, true, false>(a, b, c, y, n);
    case 4: return pair_loop<T, o1, o2, second, false, false, true>(a, b, c, y, n);
    case 5: return pair_loop<T, o1, o2, second, true, false, true>(a, b, c, y, n);
    case 6: return pair_loop<T, o1, o2, second, false, true, true>(a, b, c, y, n);
    default: return pair_loop<T, o1, o2, second, true, true, true>(a, b, c, y, n);
  }
}

// Calls f(std::integral_constant<Op, op>) for the ops a pair step computes.
template <class F>
bool with_pair_op(Op op, F&& f) {
  switch (op) {
    case Op::add: f(std::integral_constant<Op, Op::add>{}); return true;
    case Op::sub: f(std::integral_constant<Op, Op::sub>{}); return true;
    case Op::mul: f(std::integral_constant<Op, Op::mul>{}); return true;
    default: return false;
  }
}

template <class T>
FusedStepFn pair_fn(Op o1, Op o2, bool second) {
  FusedStepFn fn = nullptr;
  with_pair_op(o1, [&](auto p) {
    with_pair_op(o2, [&](auto q) {
      constexpr Op x = decltype(p)::value, z = decltype(q)::value;
      fn = second ? s_pair<T, x, z, true> : s_pair<T, x, z, false>;
    });
  });
  return fn;
}

}  // namespace

FusedStepFn fused_pair_fn(Op o1, Op o2, bool second, DType t) {
  return t == DType::f32   ? pair_fn<float>(o1, o2, second)
         : t == DType::f64 ? pair_fn<double>(o1, o2, second)
                           : nullptr;
}

}  // namespace ws::exec
