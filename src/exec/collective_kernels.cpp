#include "exec/collective_kernels.hpp"

#include <bit>
#include <cstring>

#include "ir/attr.hpp"

namespace ws::exec {

namespace {

template <class T>
void pack_into(const T* x, int64_t n, double scale, T* y) {
  if (scale == 1) {
    std::memcpy(y, x, size_t(n) * sizeof(T));
    return;
  }
  const T s = T(scale);
  for (int64_t e = 0; e < n; ++e) y[e] = x[e] * s;
}

}  // namespace

void pack_operand(const ir::Type& type, const void* in, double scale, void* out) {
  if (type.dtype == DType::f32)
    pack_into(static_cast<const float*>(in), type.numel(), scale, static_cast<float*>(out));
  else
    pack_into(static_cast<const double*>(in), type.numel(), scale, static_cast<double*>(out));
}

void pack_bucket(std::span<const ir::Type> types, const void* const* in, double scale, void* out) {
  char* dst = static_cast<char*>(out);
  for (size_t i = 0; i < types.size(); ++i) {
    pack_operand(types[i], in[i], scale, dst);
    dst += types[i].bytes();
  }
}

double reduce_scale(const ir::Attrs& start_attrs) {
  return ir::attr<ir::Op::all_reduce_start, "reduce">(start_attrs) == "mean"
             ? 1.0 / double(dist::world_size())
             : 1.0;
}

namespace {

// Packs as pack_bucket does, each operand read from its slot: no list of
// pointers to build per step.
void k_all_reduce_start(const Kernel& k, void* const* s) {
  const double scale = std::bit_cast<double>(k.p[0]);
  char* dst = static_cast<char*>(s[k.out]);
  for (size_t i = 0; i < k.in.size(); ++i) {
    pack_operand(k.in_types[i], s[k.in[i]], scale, dst);
    dst += k.in_types[i].bytes();
  }
  k.collective->start_all_reduce_sum(s[k.out], k.out_type.numel(), k.out_type.dtype);
}

void k_wait(const Kernel& k, void* const* s) {
  k.collective->wait();
  if (s[k.out] != s[k.in[0]]) std::memcpy(s[k.out], s[k.in[0]], k.out_type.bytes());
}

}  // namespace

void choose_collective_kernel(Kernel& k) {
  WS_CHECK(k.collective) << ir::op_name(k.op) << " without its collective state";
  switch (k.op) {
    case ir::Op::all_reduce_start:
      k.p[0] = std::bit_cast<int64_t>(reduce_scale(k.attrs));  // p[0]: the scale, as bits
      k.fn = k_all_reduce_start;
      k.name = "all_reduce_start";
      return;
    case ir::Op::wait:
      k.fn = k_wait;
      k.name = "wait";
      return;
    default: WS_CHECK(false) << ir::op_name(k.op) << " is not a collective";
  }
}

}  // namespace ws::exec
