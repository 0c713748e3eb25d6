#include "exec/collective_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "ir/attr.hpp"

namespace ws::exec {

namespace {

using ir::Op;

template <class T>
void copy_scaled(const T* x, int64_t n, double scale, T* y) {
  if (scale == 1) {
    std::memcpy(y, x, size_t(n) * sizeof(T));
    return;
  }
  const T s = T(scale);
  for (int64_t e = 0; e < n; ++e) y[e] = x[e] * s;
}

// pack_window over operands found by `operand(i)`: the compiled kernels
// read them from their slots, with no list of pointers built per step.
template <class F>
void pack_window_of(std::span<const ir::Type> types, F&& operand, int64_t from, int64_t count,
                    double scale, void* out) {
  const size_t es = dtype_size(types[0].dtype);
  char* dst = static_cast<char*>(out);
  int64_t at = 0, written = 0;  // elements before operand i; elements written
  for (size_t i = 0; i < types.size() && written < count; ++i) {
    const int64_t n = types[i].numel();
    const int64_t lo = std::max(from + written, at), hi = std::min(from + count, at + n);
    if (lo < hi) {
      const char* src = static_cast<const char*>(operand(i)) + size_t(lo - at) * es;
      char* d = dst + size_t(written) * es;
      if (types[0].dtype == DType::f32)
        copy_scaled(reinterpret_cast<const float*>(src), hi - lo, scale,
                    reinterpret_cast<float*>(d));
      else
        copy_scaled(reinterpret_cast<const double*>(src), hi - lo, scale,
                    reinterpret_cast<double*>(d));
      written += hi - lo;
    }
    at += n;
  }
  std::memset(dst + size_t(written) * es, 0, size_t(count - written) * es);
}

int64_t world_of(Op op, const ir::Attrs& attrs) {
  constexpr ir::OpSet kSharded = ir::ops_with_attr("world");
  return kSharded.contains(op) ? ir::attr<kSharded, "world">(attrs) : dist::world_size();
}

void check_world(Op op, const ir::Attrs& attrs, const SourceLoc& loc) {
  const int64_t world = world_of(op, attrs);
  if (world != dist::world_size())
    throw Error(fmt::format("{} was built for a group of {} ranks, and this process group has {}{}",
                            ir::op_name(op), world, dist::world_size(), at(loc)));
}

// What a start's elements are multiplied by before they are summed over
// the ranks.
double reduce_scale(Op op, const ir::Attrs& attrs) {
  constexpr ir::OpSet kReducing{Op::all_reduce_start, Op::reduce_scatter_start};
  if (!kReducing.contains(op)) return 1.0;
  return ir::attr<kReducing, "reduce">(attrs) == "mean" ? 1.0 / double(dist::world_size()) : 1.0;
}

// p[0]: the scale, as bits; p[1]: one rank's part, in elements.
void k_all_reduce_start(const Kernel& k, void* const* s) {
  const int64_t n = k.out_type.numel();
  pack_window_of(
      k.in_types, [&](size_t i) { return s[k.in[i]]; }, 0, n, std::bit_cast<double>(k.p[0]),
      s[k.out]);
  k.collective->start_all_reduce_sum(s[k.out], n, k.out_type.dtype);
}

void k_reduce_scatter_start(const Kernel& k, void* const* s) {
  const int64_t n = k.out_type.numel();
  pack_window_of(
      k.in_types, [&](size_t i) { return s[k.in[i]]; }, 0, n * dist::world_size(),
      std::bit_cast<double>(k.p[0]), s[k.out]);
  k.collective->start_reduce_scatter_sum(s[k.out], n, k.out_type.dtype);
}

void k_all_gather_start(const Kernel& k, void* const* s) {
  const size_t part = k.in_types[0].bytes();
  std::memcpy(static_cast<char*>(s[k.out]) + size_t(dist::rank()) * part, s[k.in[0]], part);
  k.collective->start_all_gather(s[k.out], k.in_types[0].numel(), k.out_type.dtype);
}

void k_local_shard(const Kernel& k, void* const* s) {
  const int64_t n = k.out_type.numel();
  pack_window_of(
      k.in_types, [&](size_t i) { return s[k.in[i]]; }, dist::rank() * n, n, 1.0, s[k.out]);
}

void k_wait(const Kernel& k, void* const* s) {
  k.collective->wait();
  if (s[k.out] != s[k.in[0]]) std::memcpy(s[k.out], s[k.in[0]], k.out_type.bytes());
}

}  // namespace

void pack_window(std::span<const ir::Type> types, const void* const* in, int64_t from,
                 int64_t count, double scale, void* out) {
  pack_window_of(
      types, [&](size_t i) { return in[i]; }, from, count, scale, out);
}

void run_collective_reference(Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types,
                              const void* const* in, const ir::Type& out_type, void* out,
                              const SourceLoc& loc) {
  check_world(op, attrs, loc);
  const int64_t n = out_type.numel();
  const double scale = reduce_scale(op, attrs);
  switch (op) {
    case Op::all_reduce_start:
      pack_window(in_types, in, 0, n, scale, out);
      return dist::all_reduce_sum(out, n, out_type.dtype);
    case Op::reduce_scatter_start: {
      std::vector<std::byte> all(out_type.bytes() * size_t(dist::world_size()));
      pack_window(in_types, in, 0, n * dist::world_size(), scale, all.data());
      dist::reduce_scatter_sum(all.data(), n, out_type.dtype);
      std::memcpy(out, all.data(), out_type.bytes());
      return;
    }
    case Op::all_gather_start: {
      const size_t part = in_types[0].bytes();
      std::memcpy(static_cast<char*>(out) + size_t(dist::rank()) * part, in[0], part);
      return dist::all_gather_in_place(out, in_types[0].numel(), out_type.dtype);
    }
    case Op::local_shard: return pack_window(in_types, in, dist::rank() * n, n, 1.0, out);
    default: WS_CHECK(false) << ir::op_name(op) << " is not a collective start nor local_shard";
  }
}

size_t storage_bytes(Op op, const ir::Attrs& attrs, const ir::Type& type) {
  return op == Op::reduce_scatter_start
             ? type.bytes() * size_t(ir::attr<Op::reduce_scatter_start, "world">(attrs))
             : type.bytes();
}

void choose_collective_kernel(Kernel& k) {
  check_world(k.op, k.attrs, k.loc);
  WS_CHECK(k.op == Op::local_shard || k.collective)
      << ir::op_name(k.op) << " without its collective state";
  k.p[0] = std::bit_cast<int64_t>(reduce_scale(k.op, k.attrs));
  switch (k.op) {
    case Op::all_reduce_start: k.fn = k_all_reduce_start; break;
    case Op::reduce_scatter_start: k.fn = k_reduce_scatter_start; break;
    case Op::all_gather_start: k.fn = k_all_gather_start; break;
    case Op::local_shard: k.fn = k_local_shard; break;
    case Op::wait: k.fn = k_wait; break;
    default: WS_CHECK(false) << ir::op_name(k.op) << " is not a collective";
  }
  k.name = ir::op_name(k.op).data();
}

}  // namespace ws::exec
