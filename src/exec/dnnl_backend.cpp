// The backend ops of matrix products (their construction in dnnl_matmul.cpp)
// and convolutions (dnnl_backend.hpp), built from oneDNN primitives
// (dnnl_op.hpp).
#include "exec/dnnl_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "exec/dnnl_accumulate.hpp"
#include "exec/dnnl_matmul.hpp"
#include "exec/dnnl_op.hpp"
#include "exec/dnnl_teams.hpp"
#include "exec/kernels.hpp"
#include "exec/loops.hpp"
#include "exec/narrow_groups.hpp"
#include "exec/parallel.hpp"
#include "exec/reference.hpp"
#include "ir/attr.hpp"

namespace ws::exec {
namespace {

using ir::Op;

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_all: return "all (none detected)";
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: return "unknown";
  }
}

}  // namespace

bool is_backend_op(Op op, DType dt) {
  return dt == DType::f32 && (op == Op::matmul || op == Op::matmul_add || op == Op::matmul_bias ||
                              op == Op::matmul_bias_add || op == Op::conv2d ||
                              op == Op::conv2d_input_grad || op == Op::conv2d_weight_grad);
}

namespace {

// oneDNN's gemm:jit kernels (its products on CPUs without AVX-512; the
// convolutions its direct kernels do not take: one input channel over a
// one-wide map, ...) split their sums by their team: the products by the one
// OpenMP gives when they run, the convolutions by the one they were made
// for. Its direct and brgemm kernels compute each output on one thread.
bool team_dependent(const BackendOp& k) { return k.impl().find("gemm:jit") != std::string::npos; }

// oneDNN 2.6's jit_1x1:avx2 weight gradient (CPUs without AVX-512) over
// NHWC images with a stride, run on a scratchpad of ours as every primitive
// here is, gives wrong sums: a sweep of 1x1 convolutions with strides 2 and
// 3 over maps up to 8x20 and 1 to 8 channels on an AMD EPYC Zen 3 found 55
// of 4,788 shapes off by 0.3 to 2 (x [1, 3, 4, 18], dy [1, 1, 2, 9] among
// them: a ConvTranspose2d's weight gradient the PyTorch frontend's tester
// found), none over NCHW or nChw8c images, none with oneDNN's own
// scratchpad, and its forward and input gradient right. Such a gradient runs
// as products over the unfolded input, which for a 1x1 window is a copy of
// the strided pixels.
bool jit_1x1_avx2_miscounts(const Conv2dGeom& g) {
  return !avx512_convolutions() && g.layout == ir::ImageLayout::nhwc && !g.volume && g.kh == 1 &&
         g.kw == 1 && (g.sh > 1 || g.sw > 1);
}

// How a weight gradient runs: as im2col and products (a product a group),
// as oneDNN's convolution over fixed parts of the weight (whole groups or
// ranges of output channels, each over the whole batch), or over fixed parts
// of the batch added after. Measured with build/benchmarks/conv_small_maps
// (2-core Zen 5, batch 4, weights from memory; ms, batch parts / weight parts
// / products): products for a 1x1 window on maps of 16 positions or fewer
// (regnet_x_16gf's 896 channels on 4x4 maps 1.06 / 0.65 / 0.35; resnet50's
// 2048x512 on 2x2 2.20 / 1.45 / 0.20) and for a 3x3 without groups on 2x2
// maps (resnet18's layer4 2.89 / 1.19 / 0.77). Weight parts for groups on
// small maps (regnet_x_16gf's groups of 128 on 4x4 maps 1.79 / 1.04 / 1.71,
// on 8x8 1.77 / 1.28 / 2.67; resnext50's groups of 16 0.16 / 0.08 / 0.62;
// depthwise on 8x8 maps 0.072 / 0.050) and where the weight is at least x
// (resnet18's 128 channels on 8x8 maps 0.50 / 0.26 / 0.40; a 3x3 in two
// groups of 128 on 16x16 maps 2.40 / 2.13). Batch parts where x is larger
// and the maps are not small (a 256-channel 1x1 on 16x16 maps 0.53 / 0.59;
// depthwise on 32x32 maps 0.100 / 0.124): weight parts would each reorder
// the whole x, or the batch parts' sums are cheap. The cap on N*S bounds
// the unfolded input in the scratch.
bool weight_grad_as_products(const Conv2dGeom& g) {
  if (jit_1x1_avx2_miscounts(g)) return true;
  const int64_t s = g.oh * g.ow;
  if (g.volume || s > 16 || g.n * s > 256 || g.groups > 1) return false;
  return (g.kh == 1 && g.kw == 1) || (s <= 4 && g.n * s <= 64);
}

bool weight_grad_in_weight_parts(const Conv2dGeom& g) {
  if (g.volume) return false;
  return g.weight_numel() >= g.n * g.in_image() ||
         (g.groups >= kWeightGradParts && g.oh * g.ow <= 256);
}

// Whether a forward convolution or an input gradient runs as products over
// the unfolded input (conv_products.cpp) rather than oneDNN's convolution,
// which reorders the whole weight at every call and the activations around
// it. On 2x2 and smaller maps of wide groups the products win: they read
// the weight once (build/benchmarks/conv_small_maps on a 2-core Zen 5,
// weights from memory: resnet18's layer4 1.5x forward and 2.0x input
// gradient at batch 4, 1.2x and 1.6x at batch 16; regnet_x_16gf's 1x1 on
// 2x2 maps 1.5x and 3.1x, its 3x3 in groups of 128 1.0x and 1.5x). On 4x4
// maps, and for groups of 48 or fewer channels, oneDNN's convolution is as
// fast or faster (0.3-1.1x). The cap on N*S bounds the unfolded input.
bool conv_as_products(const Conv2dGeom& g) {
  const int64_t s = g.oh * g.ow, width = std::min(g.o, g.c) / g.groups;
  if (g.volume || s > 4 || g.n * s > 64) return false;
  return g.groups == 1 || width >= 128;
}

}  // namespace

bool avx512_convolutions() { return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core; }

bool conv_keeps_nchw(Op op, const Conv2dGeom& g) {
  if (g.layout == ir::ImageLayout::nhwc) return false;
  if (op == Op::conv2d_weight_grad)
    return weight_grad_as_products(g) || weight_grad_in_weight_parts(g);
  return conv_as_products(g);
}

namespace {

// The op for the team pinned now.
std::shared_ptr<const BackendOp> build_backend_op(Op op, const ir::Attrs& attrs,
                                                  std::span<const ir::Type> in_types,
                                                  const ir::Type& out_type,
                                                  std::span<const std::vector<int64_t>> in_strides,
                                                  const std::vector<int64_t>& out_strides) {
  WS_CHECK(is_backend_op(op, out_type.dtype)) << ir::op_name(op) << " is not a backend op";
  WS_CHECK((in_strides.empty() && out_strides.empty()) || op == Op::matmul ||
           op == Op::matmul_add || op == Op::matmul_bias || op == Op::matmul_bias_add)
      << "strided operands of " << ir::op_name(op);
  for (const ir::Type& t : in_types)
    if (t.numel() == 0) {
      if ((op == Op::matmul_bias || op == Op::matmul_bias_add) && out_type.numel() > 0)
        throw Error(
            fmt::format("{}: a product over an empty contraction ({} by {}) with a bias "
                        "is not built; write matmul, then add the bias",
                        ir::op_name(op), in_types[0].str(), in_types[1].str()));
      return make_zero_product(int64_t(out_type.bytes()), op == Op::matmul_add);
    }
  if (op == Op::matmul_bias_add)
    return make_matmul(in_types, out_type, attrs, in_strides, out_strides, false, true, true);
  if (op == Op::matmul_add) {
    WS_CHECK(out_strides.empty()) << "matmul_add accumulates into a contiguous value";
    auto plain = make_matmul(in_types, out_type, attrs, in_strides, out_strides, false, false);
    if (plain->impl().find("brg") == std::string::npos)
      return make_accumulate_after(std::move(plain), out_type.numel());
    return make_accumulate_in_post_ops(
        make_matmul(in_types, out_type, attrs, in_strides, out_strides, true, false),
        make_matmul(in_types, out_type, attrs, in_strides, out_strides, false, false, true),
        out_type.numel());
  }
  if (op == Op::matmul || op == Op::matmul_bias)
    return make_matmul(in_types, out_type, attrs, in_strides, out_strides, false,
                       op == Op::matmul_bias);
  const Conv2dGeom g = conv2d_node_geom(op, attrs, in_types, out_type);
  // Blocks: oneDNN's primitive (a weight gradient in parts of the batch).
  // NHWC takes every choice NCHW does: products over the unfolded input
  // read it, and its slices of channels are strided views.
  if (g.layout != ir::ImageLayout::nchw && g.layout != ir::ImageLayout::nhwc)
    return op == Op::conv2d_weight_grad ? make_weight_grad_in_parts(g) : make_conv(op, g);
  if (op == Op::conv2d_weight_grad)
    return narrow_group_weight_grad(g)      ? make_narrow_group_weight_grad(g)
           : weight_grad_as_products(g)     ? make_conv_products(op, g)
           : weight_grad_in_weight_parts(g) ? make_weight_grad_in_weight_parts(g)
                                            : make_weight_grad_in_parts(g);
  if (conv_as_products(g)) return make_conv_products(op, g);
  if (narrow_group_conv(op, g)) {
    // Ours where oneDNN 2.6 falls back to gemm over NCHW copies (the
    // forward without AVX-512) or its AVX2 jit kernel is slower (the input
    // gradient at stride 1): narrow_groups.cpp. Where the CPU has AVX-512
    // convolutions, oneDNN's jit kernel when it has one (ours was measured
    // only against AVX2's).
    if (!avx512_convolutions()) return make_narrow_group_conv(op, g);
    auto k = make_conv(op, g);
    const bool jit = k->impl().rfind("jit", 0) == 0 || k->impl().rfind("brg", 0) == 0;
    return jit ? k : make_narrow_group_conv(op, g);
  }
  return make_conv(op, g);
}

// k's scratch in `buf`, sized to hold it from a 64-byte boundary: that
// boundary (an op run once, at compile time or on the eager path).
std::byte* aligned_scratch(std::vector<std::byte>& buf, const BackendOp& k) {
  buf.resize(size_t(k.scratch_bytes()) + 64);
  return reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) / 64 * 64);
}

// Whether a convolution made for the pool and its one-thread twin give the
// same bits. oneDNN chooses a brgemm convolution's blocking by the team it
// is made for, and over NHWC images of one image with a padded width that
// can change the order of an output's sum (5 of 4500 random shapes, the
// same kernel named either way; its blocked and jit kernels showed none), so
// both run once on the same operands: magnitudes within [0.5, 4), random
// signs and mantissas, so that products are alike and a sum of three or
// more taken in another order shows in the last bits. Where they differ the
// step runs the twin on any team (none in 5000 random shapes after, against
// 6 before; wide magnitudes, where the small products vanish either way,
// missed one of the five).
bool same_bits(const BackendOp& whole, const BackendOp& solo, std::span<const ir::Type> in_types,
               const ir::Type& out_type) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto operand = [&](const ir::Type& t) {
    std::vector<float> v(size_t(t.numel()));
    for (float& x : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const uint32_t r = uint32_t(state >> 32);
      x = std::ldexp(1.0f + float(r & 0xffff) / 65536.0f, int((r >> 16) % 3) - 1) *
          ((r >> 31) ? -1.0f : 1.0f);
    }
    return v;
  };
  const std::vector<float> a = operand(in_types[0]), b = operand(in_types[1]);
  auto run = [&](const BackendOp& k, int team) {
    TeamScope on(team);
    std::vector<float> out(size_t(out_type.numel()));
    std::vector<std::byte> scratch;
    k.run(a.data(), b.data(), out.data(), aligned_scratch(scratch, k));
    return out;
  };
  return run(whole, num_threads()) == run(solo, 1);
}

}  // namespace

std::shared_ptr<const BackendOp> make_backend_op(Op op, const ir::Attrs& attrs,
                                                 std::span<const ir::Type> in_types,
                                                 const ir::Type& out_type,
                                                 std::span<const std::vector<int64_t>> in_strides,
                                                 const std::vector<int64_t>& out_strides) {
  std::shared_ptr<const BackendOp> whole;
  {
    TeamScope pool(num_threads());
    whole = build_backend_op(op, attrs, in_types, out_type, in_strides, out_strides);
  }
  if (num_threads() == 1 || op == Op::conv2d_weight_grad || whole->flops() == 0 ||
      whole->impl().rfind("im2col", 0) == 0 || whole->impl().rfind("col2im", 0) == 0)
    return whole;  // made of one-thread parts: the same op on any team
  TeamScope one(1);
  std::shared_ptr<const BackendOp> solo =
      build_backend_op(op, attrs, in_types, out_type, in_strides, out_strides);
  // A primitive whose bits depend on its team is made for one thread and
  // runs on one (DnnlOp), whatever the pool: the same bits on any team.
  if (team_dependent(*whole) || whole->impl() != solo->impl()) return solo;
  if ((op == Op::conv2d || op == Op::conv2d_input_grad) && whole->impl().rfind("brg", 0) == 0 &&
      !same_bits(*whole, *solo, in_types, out_type))  // made for one thread, runs on one
    return solo;
  return make_team_or_solo(whole, solo);
}

int64_t backend_flops(Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types,
                      const ir::Type& out_type) {
  if (op == Op::matmul || op == Op::matmul_add || op == Op::matmul_bias ||
      op == Op::matmul_bias_add)
    return matmul_flops(matmul_dims(in_types[0].shape, in_types[1].shape, attrs));
  return conv_flops(conv2d_node_geom(op, attrs, in_types, out_type));
}

// The eager path's ops, each thread's own (a DnnlOp binds its operands as it
// runs), by op, attributes, types and team: the last kEagerOps made. Ours
// are never taken from oneDNN's primitive cache (dnnl_op.hpp:
// UncachedPrimitives).
constexpr size_t kEagerOps = 64;
std::shared_ptr<const BackendOp> eager_backend_op(Op op, const ir::Attrs& attrs,
                                                  std::span<const ir::Type> in_types,
                                                  const ir::Type& out_type) {
  struct Made {
    Op op;
    int team;
    ir::Attrs attrs;
    std::vector<ir::Type> in;
    ir::Type out;
    std::shared_ptr<const BackendOp> k;
  };
  thread_local std::vector<Made> made;
  for (const Made& m : made)
    if (m.op == op && m.team == team() && m.out == out_type && m.attrs == attrs &&
        std::equal(m.in.begin(), m.in.end(), in_types.begin(), in_types.end()))
      return m.k;
  auto k = build_backend_op(op, attrs, in_types, out_type, {}, {});
  if (team_dependent(*k)) {  // made for one thread, as a compiled step makes it
    TeamScope one(1);
    k = build_backend_op(op, attrs, in_types, out_type, {}, {});
  }
  if (made.size() >= kEagerOps) made.clear();
  made.push_back({op, team(), attrs, {in_types.begin(), in_types.end()}, out_type, k});
  return k;
}

void run_backend(Op op, const ir::Attrs& attrs, std::span<const ir::Type> in_types,
                 const void* const* in, const ir::Type& out_type, void* out) {
  if (out_type.numel() == 0) return;
  pin_team();  // made for the team it runs on now
  const std::shared_ptr<const BackendOp> k = eager_backend_op(op, attrs, in_types, out_type);
  std::vector<std::byte> scratch;
  std::byte* aligned = aligned_scratch(scratch, *k);
  if (op == Op::matmul_add) {  // the accumulator is in[2], alpha in[3], beta in[4]
    if (out != in[2]) std::memcpy(out, in[2], out_type.bytes());
    k->run(in[0], in[1], out, aligned, in[3], in[4]);
    return;
  }
  if (op == Op::matmul_bias_add && out != in[3]) std::memcpy(out, in[3], out_type.bytes());
  k->run(in[0], in[1], out, aligned,
         op == Op::matmul_bias || op == Op::matmul_bias_add ? in[2] : nullptr);
}

int64_t native_channel_block() { return avx512_convolutions() ? 16 : 8; }

std::string backend_isa() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{}, ISA {}", v->major, v->minor, v->patch,
                     isa_name(dnnl_get_effective_cpu_isa()));
}

}  // namespace ws::exec
