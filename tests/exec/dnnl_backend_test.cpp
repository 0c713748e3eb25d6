// The oneDNN backend: every matrix-product and convolution configuration the
// reference models use (and the odd ones: strides, padding, dilation,
// groups, transposes, batches, empty dimensions) against the f64 reference
// loops; its scratch stays inside what it asked for; the eager path computes
// what a program's kernel computes, bit for bit; and thread counts.
#include "exec/dnnl_backend.hpp"

#include <omp.h>

#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "exec/conv_cases.hpp"
#include "exec/dnnl_op.hpp"
#include "exec/dnnl_teams.hpp"
#include "exec/kernels.hpp"
#include "exec/narrow_groups.hpp"
#include "exec/reference.hpp"
#include "ir/builder.hpp"

namespace ws::exec {
namespace {

using ir::Op;

ir::Attrs conv_attrs(const Conv2dGeom& g) {
  using V = std::vector<int64_t>;
  if (g.volume)
    return ir::Attrs{{"stride", V{g.sd, g.sh, g.sw}},
                     {"padding", V{g.pd, g.ph, g.pw}},
                     {"dilation", V{g.dd, g.dh, g.dw}},
                     {"groups", g.groups}};
  return ir::Attrs{{"stride", V{g.sh, g.sw}},
                   {"padding", V{g.ph, g.pw}},
                   {"dilation", V{g.dh, g.dw}},
                   {"groups", g.groups}};
}

ir::Type f32(Shape s) { return ir::Type{DType::f32, std::move(s)}; }

// The three convolution nodes' operand and result types.
struct ConvTypes {
  std::vector<ir::Type> in;
  ir::Type out;
};

ConvTypes conv_types(Op op, const Conv2dGeom& g) {
  const ir::Type x = g.volume ? f32({g.n, g.c, g.d, g.h, g.w}) : f32({g.n, g.c, g.h, g.w}),
                 w = g.volume ? f32({g.o, g.c / g.groups, g.kd, g.kh, g.kw})
                              : f32({g.o, g.c / g.groups, g.kh, g.kw}),
                 y = g.volume ? f32({g.n, g.o, g.od, g.oh, g.ow}) : f32({g.n, g.o, g.oh, g.ow});
  if (op == Op::conv2d) return {{x, w}, y};
  if (op == Op::conv2d_input_grad) return {{y, w}, x};
  return {{x, y}, w};
}

// Runs the node's BackendOp with its scratch followed by a guard region it
// must not touch; the output starts as NaN so a missing write shows. A
// `team` > 0 runs it on that team (made for the whole pool).
std::vector<float> run_op_guarded(const std::shared_ptr<const BackendOp>& k, const ir::Type& out,
                                  const std::vector<float>& a, const std::vector<float>& b,
                                  const std::string& what, int team = 0) {
  std::optional<TeamScope> on_team;
  if (team > 0) on_team.emplace(team);
  EXPECT_EQ(k->impl().rfind("ref", 0), std::string::npos)
      << what << " runs oneDNN's reference kernel: " << k->impl();
  constexpr size_t kGuard = 256;
  constexpr std::byte kFill{0x5a};
  auto* raw = static_cast<std::byte*>(std::aligned_alloc(64, size_t(k->scratch_bytes()) + kGuard));
  std::memset(raw, int(kFill), size_t(k->scratch_bytes()) + kGuard);
  std::vector<float> y(size_t(out.numel()), NAN);
  k->run(a.data(), b.data(), y.data(), raw);
  for (size_t i = 0; i < kGuard; ++i)
    if (raw[size_t(k->scratch_bytes()) + i] != kFill) {
      ADD_FAILURE() << what << ": scratch overrun at byte " << k->scratch_bytes() + int64_t(i);
      break;
    }
  std::free(raw);
  return y;
}

std::vector<float> run_guarded(Op op, const ir::Attrs& attrs, const std::vector<ir::Type>& in,
                               const ir::Type& out, const std::vector<float>& a,
                               const std::vector<float>& b, const std::string& what, int team = 0) {
  return run_op_guarded(make_backend_op(op, attrs, in, out), out, a, b, what, team);
}

// The reference models' convolutions (cnn: 3x3, padding 1, strides 1, 2, 2),
// at a smaller batch, plus the general geometries.
std::vector<Conv2dGeom> backend_conv_cases() {
  std::vector<Conv2dGeom> c = conv_geometries();
  c.push_back(conv_geom(8, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1));
  c.push_back(conv_geom(8, 32, 28, 28, 64, 3, 3, 2, 2, 1, 1));
  c.push_back(conv_geom(8, 64, 14, 14, 64, 3, 3, 2, 2, 1, 1));
  c.push_back(conv_geom(4, 48, 9, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 2));  // blocked, grouped
  // Small maps: the weight gradient as im2col and a product (resnet's layer4,
  // uneven row parts, dilation and a clipped right edge).
  c.push_back(conv_geom(8, 64, 2, 2, 48, 3, 3, 1, 1, 1, 1));
  c.push_back(conv_geom(3, 16, 7, 5, 37, 3, 2, 2, 2, 1, 1, 2, 1));
  // ... one product a group (regnet's), uneven row parts in each group.
  c.push_back(conv_geom(4, 68, 4, 4, 66, 3, 3, 1, 1, 1, 1, 1, 1, 2));
  c.push_back(conv_geom(2, 80, 3, 3, 80, 3, 3, 2, 2, 1, 1, 1, 1, 5));
  for (const Conv2dGeom& g : conv3d_geometries()) c.push_back(g);
  return c;
}

// The f64 reference of a convolution node: (a, b) -> its result.
Vec conv_ref(Op op, const Conv2dGeom& g, const Vec& a, const Vec& b) {
  const ConvTypes t = conv_types(op, g);
  Vec out(size_t(t.out.numel()));
  if (op == Op::conv2d) conv2d_ref(g, a.data(), b.data(), out.data());
  if (op == Op::conv2d_input_grad) conv2d_input_grad_ref(g, a.data(), b.data(), out.data());
  if (op == Op::conv2d_weight_grad) conv2d_weight_grad_ref(g, a.data(), b.data(), out.data());
  return out;
}

// Our primitives are made outside oneDNN's primitive cache, which is the
// process's (PyTorch's eager primitives live there too): making them leaves
// its capacity as it was, and takes nothing from it (oneDNN's verbose log
// says at each creation whether the cache served it: making the same ops
// twice, none is served).
TEST(DnnlConv, MakingOpsLeavesOneDnnsPrimitiveCacheAsItWas) {
  const int before = dnnl::get_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(321);
  const Conv2dGeom g = conv_geom(2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1);
  testing::internal::CaptureStdout();
  dnnl::set_verbose(2);
  for (int twice = 0; twice < 2; ++twice)
    for (Op op : {Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad}) {
      const ConvTypes t = conv_types(op, g);
      EXPECT_NE(make_backend_op(op, conv_attrs(g), t.in, t.out), nullptr);
    }
  dnnl::set_verbose(0);
  const std::string log = testing::internal::GetCapturedStdout();
  EXPECT_NE(log.find("cache_miss"), std::string::npos) << log;
  EXPECT_EQ(log.find("cache_hit"), std::string::npos) << log;
  EXPECT_EQ(dnnl::get_primitive_cache_capacity(), 321);
  dnnl::set_primitive_cache_capacity(before);
}

TEST(DnnlConv, ForwardInputGradAndWeightGradMatchF64Reference) {
  std::mt19937 rng(4);
  for (Op op : {Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad})
    for (const Conv2dGeom& g : backend_conv_cases()) {
      const ConvTypes t = conv_types(op, g);
      const Vec a = random_vec(t.in[0].numel(), rng), b = random_vec(t.in[1].numel(), rng);
      const std::string what = fmt::format("{} {}", ir::op_name(op), describe(g));
      expect_close(run_guarded(op, conv_attrs(g), t.in, t.out, to_f32(a), to_f32(b), what),
                   conv_ref(op, g, a, b), 1e-5, what);
    }
}

// An NCHW image batch [n, c, h, w] stored in layout l, or back (to_nchw),
// written here from the layout's definition (geometry.hpp).
template <class V>
V relaid(const V& v, ir::ImageLayout l, int64_t n, int64_t c, int64_t h, int64_t w, bool to_nchw) {
  V out(v.size());
  const int64_t b = ir::channel_block(l);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t iw = 0; iw < w; ++iw) {
          const int64_t plain = ((in * c + ic) * h + ih) * w + iw;
          const int64_t stored = l == ir::ImageLayout::nhwc
                                     ? ((in * h + ih) * w + iw) * c + ic
                                     : (((in * (c / b) + ic / b) * h + ih) * w + iw) * b + ic % b;
          if (to_nchw)
            out[size_t(plain)] = v[size_t(stored)];
          else
            out[size_t(stored)] = v[size_t(plain)];
        }
  return out;
}

// Every direction with its images stored NHWC or in blocks of 8 or 16
// channels, compiled (oneDNN, reading and writing those layouts; a weight
// gradient NHWC in parts of the weight, blocked in parts of the batch) and
// interpreted in f64 (the loops over NCHW copies): each within rounding of
// the NCHW f64 reference, relaid. Groups, depthwise, strides, padding, 1x1;
// in blocks, the shapes whose channel counts they divide.
TEST(DnnlConv, EveryImageLayoutMatchesTheF64ReferenceRelaid) {
  std::mt19937 rng(11);
  const std::vector<Conv2dGeom> geoms = {
      conv_geom(3, 16, 9, 7, 32, 3, 3, 1, 1, 1, 1),
      conv_geom(2, 32, 8, 8, 48, 3, 3, 2, 2, 1, 1),
      conv_geom(2, 48, 5, 5, 16, 1, 1),
      conv_geom(2, 32, 6, 6, 32, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      conv_geom(4, 16, 7, 7, 16, 3, 3, 2, 2, 1, 1, 1, 1, 16),  // depthwise
      conv_geom(9, 32, 4, 4, 64, 3, 3, 1, 1, 1, 1),  // weight parts (NHWC), batch parts of 2 and 3
      // 1x1, strided: oneDNN's jit_1x1:avx2 weight gradient over NHWC gets
      // these wrong (dnnl_backend.cpp: jit_1x1_avx2_miscounts).
      conv_geom(1, 3, 4, 18, 1, 1, 1, 2, 2, 0, 0),
      conv_geom(1, 3, 4, 18, 8, 1, 1, 2, 2, 0, 0),
      conv_geom(2, 8, 4, 18, 8, 1, 1, 2, 2, 0, 0),
  };
  for (ir::ImageLayout l :
       {ir::ImageLayout::nhwc, ir::ImageLayout::nChw8c, ir::ImageLayout::nChw16c})
    for (Op op : {Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad})
      for (Conv2dGeom g : geoms) {
        const int64_t block = ir::channel_block(l);  // NHWC: 1, any channel count
        if (g.c % block != 0 || g.o % block != 0) continue;
        const ConvTypes plain = conv_types(op, g);
        const Vec a = random_vec(plain.in[0].numel(), rng),
                  b = random_vec(plain.in[1].numel(), rng);
        const Vec want = conv_ref(op, g, a, b);
        ir::Attrs attrs = conv_attrs(g);
        attrs.set("layout", std::string(ir::layout_name(l)));
        auto stored = [&](const Vec& v, int64_t c, int64_t h, int64_t w) {
          return relaid(v, l, g.n, c, h, w, false);
        };
        const ir::Type x = f32(ir::stored_image(l, g.n, g.c, g.h, g.w)),
                       y = f32(ir::stored_image(l, g.n, g.o, g.oh, g.ow)),
                       wt = f32({g.o, g.c / g.groups, g.kh, g.kw});
        std::vector<ir::Type> in;
        ir::Type out;
        Vec sa, sb;
        if (op == Op::conv2d) {
          in = {x, wt}, out = y, sa = stored(a, g.c, g.h, g.w), sb = b;
        } else if (op == Op::conv2d_input_grad) {
          in = {y, wt}, out = x, sa = stored(a, g.o, g.oh, g.ow), sb = b;
          attrs.set("input_shape", x.shape);
        } else {
          in = {x, y}, out = wt, sa = stored(a, g.c, g.h, g.w), sb = stored(b, g.o, g.oh, g.ow);
          attrs.set("weight_shape", wt.shape);
        }
        EXPECT_EQ(ir::infer_type(op, in, attrs, {}), out) << ir::layout_name(l);
        auto plain_result = [&](auto v) {
          if (op == Op::conv2d) return relaid(v, l, g.n, g.o, g.oh, g.ow, true);
          if (op == Op::conv2d_input_grad) return relaid(v, l, g.n, g.c, g.h, g.w, true);
          return v;
        };
        const std::string what =
            fmt::format("{} {} stored {}", ir::op_name(op), describe(g), ir::layout_name(l));
        if (op == Op::conv2d_weight_grad && l == ir::ImageLayout::nhwc && g.groups == 2)
          EXPECT_NE(make_backend_op(op, attrs, in, out)->impl().find("weight parts"),
                    std::string::npos)
              << what << ": NHWC's strided slices of channels serve the parts of the weight";
        if (op == Op::conv2d_weight_grad && l == ir::ImageLayout::nhwc && g.groups == 16)
          EXPECT_NE(make_backend_op(op, attrs, in, out)->impl().find("narrow groups"),
                    std::string::npos)
              << what << ": depthwise over NHWC runs as our kernel";
        const std::vector<float> got =
            run_guarded(op, attrs, in, out, to_f32(sa), to_f32(sb), what);
        expect_close(plain_result(got), want, 1e-5, what + " (compiled)");
        Vec f64(size_t(out.numel()));
        const void* operands[] = {sa.data(), sb.data()};
        std::vector<ir::Type> in64 = in;
        for (ir::Type& t : in64) t.dtype = DType::f64;
        run_reference(op, attrs, in64, operands, ir::Type{DType::f64, out.shape}, f64.data());
        const Vec interpreted = plain_result(f64);
        double scale = 1e-6;
        for (double v : want) scale = std::max(scale, std::abs(v));
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(interpreted[i], want[i], 1e-12 * scale)
              << what << " (f64 interpreter) at " << i;
      }
}

// Every direction as products over the unfolded input, whichever way the
// backend would take for the shape: within float rounding of the f64
// reference, and the same bits on 1, 2 and 3 threads.
TEST(DnnlConv, ProductsOverTheUnfoldedInputMatchF64ReferenceAndGiveTheSameBitsOnAnyTeam) {
  std::mt19937 rng(5);
  const int before = num_threads();
  for (Op op : {Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad})
    for (const Conv2dGeom& g : backend_conv_cases()) {
      if (g.volume) continue;
      const ConvTypes t = conv_types(op, g);
      const Vec a = random_vec(t.in[0].numel(), rng), b = random_vec(t.in[1].numel(), rng);
      const std::string what = fmt::format("{} as products {}", ir::op_name(op), describe(g));
      std::vector<float> first;
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        const std::vector<float> got =
            run_op_guarded(make_conv_products(op, g), t.out, to_f32(a), to_f32(b), what);
        if (threads == 1) {
          expect_close(got, conv_ref(op, g, a, b), 1e-5, what);
          first = got;
        } else {
          EXPECT_EQ(got, first) << what << " on " << threads << " threads";
        }
      }
    }
  set_num_threads(before);
}

// Images stored NHWC or in the CPU's blocks (of 16 channels with AVX-512,
// else 8: the step's `blocked` layout) are read and written where they lie:
// the primitive oneDNN picks for a plain, a strided and a pointwise
// convolution in every direction is a jit kernel over that layout, with no
// reorder of an image around it (only the weight is reordered to its blocks).
TEST(DnnlConv, StoredImagesAreReadWhereTheyLieWithoutReorders) {
  const ir::ImageLayout blocks =
      native_channel_block() == 16 ? ir::ImageLayout::nChw16c : ir::ImageLayout::nChw8c;
  for (ir::ImageLayout l : {ir::ImageLayout::nhwc, blocks})
    for (Op op : {Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad})
      for (Conv2dGeom g : {conv_geom(4, 32, 16, 16, 32, 3, 3, 1, 1, 1, 1),
                           conv_geom(4, 32, 16, 16, 64, 3, 3, 2, 2, 1, 1),
                           conv_geom(4, 64, 8, 8, 32, 1, 1, 1, 1, 0, 0)}) {
        g.layout = l;
        TeamScope one(1);
        const std::string impl = make_conv(op, g)->impl();
        SCOPED_TRACE(fmt::format("{} {} {}", ir::layout_name(l), ir::op_name(op), describe(g)));
        EXPECT_TRUE(impl.rfind("jit", 0) == 0 || impl.rfind("brg", 0) == 0) << impl;
        for (const char* image : {"src", "dst", "diff_src", "diff_dst"})
          EXPECT_EQ(impl.find(fmt::format(" {}", image), impl.find("reorders:")), std::string::npos)
              << impl;
      }
}

// The products over NHWC images: the same matrices, so the same bits as
// over NCHW images, relaid; and the weight gradient in parts of the weight
// reading strided slices of NHWC channels, the same bits too.
TEST(DnnlConv, OurKernelsOverNhwcImagesGiveTheBitsTheyGiveOverNchw) {
  std::mt19937 rng(6);
  const auto l = ir::ImageLayout::nhwc;
  for (Op op : {Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad})
    for (const Conv2dGeom& g : backend_conv_cases()) {
      if (g.volume) continue;
      Conv2dGeom last = g;
      last.layout = l;
      const ConvTypes t = conv_types(op, g);
      const std::vector<float> a = to_f32(random_vec(t.in[0].numel(), rng)),
                               b = to_f32(random_vec(t.in[1].numel(), rng));
      std::vector<float> la = a, lb = b;
      if (op == Op::conv2d_input_grad)
        la = relaid(a, l, g.n, g.o, g.oh, g.ow, false);
      else
        la = relaid(a, l, g.n, g.c, g.h, g.w, false);
      if (op == Op::conv2d_weight_grad) lb = relaid(b, l, g.n, g.o, g.oh, g.ow, false);
      auto plain = [&](const std::vector<float>& v) {
        if (op == Op::conv2d) return relaid(v, l, g.n, g.o, g.oh, g.ow, true);
        if (op == Op::conv2d_input_grad) return relaid(v, l, g.n, g.c, g.h, g.w, true);
        return v;
      };
      const std::string what = fmt::format("{} {} NHWC", ir::op_name(op), describe(g));
      EXPECT_EQ(plain(run_op_guarded(make_conv_products(op, last), t.out, la, lb, what)),
                run_op_guarded(make_conv_products(op, g), t.out, a, b, what))
          << what << " as products";
      if (op == Op::conv2d_weight_grad)
        EXPECT_EQ(run_op_guarded(make_weight_grad_in_weight_parts(last), t.out, la, lb, what),
                  run_op_guarded(make_weight_grad_in_weight_parts(g), t.out, a, b, what))
            << what << " in weight parts";
    }
}

TEST(DnnlConv, WeightGradientsRunAsProductsWeightPartsOrBatchParts) {
  auto impl = [](const Conv2dGeom& g) {
    const ConvTypes t = conv_types(Op::conv2d_weight_grad, g);
    return make_backend_op(Op::conv2d_weight_grad, conv_attrs(g), t.in, t.out)->impl();
  };
  const std::pair<Conv2dGeom, std::string> cases[] = {
      // 1x1 windows on small maps, and 3x3 without groups on 2x2 maps.
      {conv_geom(4, 896, 4, 4, 896, 1, 1), "im2col + 4 parts,"},
      {conv_geom(4, 512, 2, 2, 512, 3, 3, 1, 1, 1, 1), "im2col + 4 parts,"},
      // Groups on small maps (regnet's, depthwise), and weights at least x.
      {conv_geom(4, 896, 4, 4, 896, 3, 3, 1, 1, 1, 1, 1, 1, 7), "4 weight parts"},
      {conv_geom(4, 384, 8, 8, 384, 3, 3, 1, 1, 1, 1, 1, 1, 384), "4 weight parts"},
      {conv_geom(4, 128, 8, 8, 128, 3, 3, 1, 1, 1, 1), "4 weight parts"},
      {conv_geom(4, 256, 16, 16, 256, 3, 3, 1, 1, 1, 1, 1, 1, 2), "4 weight parts"},
      // x larger than the weight on larger maps.
      {conv_geom(4, 256, 16, 16, 256, 1, 1), "4 batch parts"},
      {conv_geom(4, 32, 32, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 32), "4 batch parts"},
      {in_depth(conv_geom(2, 4, 6, 5, 6, 3, 3, 1, 1, 1, 1), 4, 3, 1, 1), "batch parts"}};
  for (const auto& [g, want] : cases)
    EXPECT_NE(impl(g).find(want), std::string::npos) << describe(g) << ": " << impl(g);
}

// Runs the op make() builds (made anew on each team) on 1, 2 and 3
// threads: its impl() names `kind`, it is within float rounding of the f64
// reference `want`, and every team gives the first one's bits.
template <class Make>
void expect_on_every_team(Make make, const std::string& kind, const ir::Type& out,
                          const std::vector<float>& x, const std::vector<float>& dy,
                          const Vec& want, const std::string& what) {
  const int before = num_threads();
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const auto k = make();
    EXPECT_NE(k->impl().find(kind), std::string::npos) << what << ": " << k->impl();
    const std::vector<float> got = run_op_guarded(k, out, x, dy, what);
    if (threads == 1) {
      expect_close(got, want, 1e-5, what);
      first = got;
    } else {
      EXPECT_EQ(got, first) << what << " on " << threads << " threads";
    }
  }
  set_num_threads(before);
}

// The weight gradient of a convolution in narrow groups over NHWC images
// runs as our kernel (depthwise, groups of 2, 4 and 8; channels filling
// whole blocks of lanes and not; strides, padding, dilation, windows of 1 to
// 7, maps down to 1x1 and rows whose taps all read padding, maps large
// enough for a task to take every window row): within float rounding of the
// f64 reference, and the same bits on 1, 2 and 3 threads.
TEST(DnnlConv, NarrowGroupWeightGradientsMatchF64ReferenceAndGiveTheSameBitsOnAnyTeam) {
  std::mt19937 rng(9);
  for (const Conv2dGeom& g : {conv_geom(8, 960, 2, 2, 960, 3, 3, 1, 1, 1, 1, 1, 1, 960),
                              conv_geom(3, 40, 9, 7, 40, 5, 5, 2, 2, 2, 2, 1, 1, 40),
                              conv_geom(2, 24, 6, 6, 24, 3, 3, 1, 1, 2, 2, 2, 2, 6),
                              conv_geom(4, 128, 8, 8, 128, 3, 3, 1, 1, 1, 1, 1, 1, 32),
                              conv_geom(2, 36, 5, 6, 36, 3, 2, 2, 1, 1, 0, 1, 1, 18),
                              conv_geom(2, 64, 7, 7, 64, 7, 7, 1, 1, 3, 3, 1, 1, 8),
                              conv_geom(3, 20, 1, 1, 20, 3, 3, 1, 1, 1, 1, 1, 1, 20),
                              conv_geom(2, 16, 4, 4, 16, 1, 1, 1, 1, 0, 0, 1, 1, 4),
                              // maps of 128 outputs and more: a task's window
                              // rows all at once (every team here, and on 1
                              // and 2 threads only)
                              conv_geom(2, 40, 16, 12, 40, 3, 3, 1, 1, 1, 1, 1, 1, 40),
                              conv_geom(2, 32, 18, 17, 32, 5, 5, 1, 1, 2, 2, 1, 1, 32),
                              conv_geom(2, 48, 24, 24, 48, 3, 3, 2, 2, 1, 1, 1, 1, 12)}) {
    const auto l = ir::ImageLayout::nhwc;
    const ConvTypes t = conv_types(Op::conv2d_weight_grad, g);
    const Vec x = random_vec(t.in[0].numel(), rng), dy = random_vec(t.in[1].numel(), rng);
    const std::vector<float> xl = to_f32(relaid(x, l, g.n, g.c, g.h, g.w, false)),
                             dyl = to_f32(relaid(dy, l, g.n, g.o, g.oh, g.ow, false));
    ir::Attrs attrs = conv_attrs(g);
    attrs.set("layout", std::string(ir::layout_name(l)));
    const std::vector<ir::Type> in = {f32(ir::stored_image(l, g.n, g.c, g.h, g.w)),
                                      f32(ir::stored_image(l, g.n, g.o, g.oh, g.ow))};
    expect_on_every_team([&] { return make_backend_op(Op::conv2d_weight_grad, attrs, in, t.out); },
                         "narrow groups", t.out, xl, dyl,
                         conv_ref(Op::conv2d_weight_grad, g, x, dy), describe(g));
  }
}

// The forward convolution in groups of 2 and 4 channels over NHWC images,
// and its input gradient at stride 1, run as our kernel on a CPU without
// AVX-512 (channels filling whole blocks of lanes and not, strides, padding,
// dilation, windows of 1 to 7, rows narrower than the interior's block of
// positions, maps down to 1x1, rows whose taps all read padding): within
// float rounding of the f64 reference (the result relaid back), and the
// same bits on 1, 2 and 3 threads.
TEST(DnnlConv, NarrowGroupConvolutionsMatchF64ReferenceAndGiveTheSameBitsOnAnyTeam) {
  std::mt19937 rng(10);
  const auto l = ir::ImageLayout::nhwc;
  for (Op op : {Op::conv2d, Op::conv2d_input_grad})
    for (const Conv2dGeom& g : {conv_geom(4, 128, 8, 8, 128, 3, 3, 1, 1, 1, 1, 1, 1, 32),
                                conv_geom(2, 36, 9, 7, 36, 3, 3, 1, 1, 1, 1, 1, 1, 9),
                                conv_geom(3, 32, 11, 13, 32, 5, 3, 1, 1, 2, 1, 2, 1, 16),
                                conv_geom(2, 64, 7, 7, 64, 7, 7, 1, 1, 3, 3, 1, 1, 16),
                                conv_geom(2, 48, 16, 16, 48, 3, 3, 2, 2, 1, 1, 1, 1, 12),
                                conv_geom(2, 40, 6, 9, 40, 3, 3, 3, 2, 0, 2, 1, 1, 20),
                                conv_geom(3, 16, 1, 1, 16, 3, 3, 1, 1, 1, 1, 1, 1, 4),
                                conv_geom(2, 16, 3, 5, 16, 1, 1, 1, 1, 0, 0, 1, 1, 8),
                                conv_geom(2, 32, 4, 4, 32, 3, 3, 1, 1, 2, 2, 3, 3, 8)}) {
      if (op == Op::conv2d_input_grad && (g.sh > 1 || g.sw > 1)) continue;
      const ConvTypes t = conv_types(op, g);
      const Vec a = random_vec(t.in[0].numel(), rng), w = random_vec(t.in[1].numel(), rng);
      const bool fwd = op == Op::conv2d;
      const std::vector<float> al = to_f32(fwd ? relaid(a, l, g.n, g.c, g.h, g.w, false)
                                               : relaid(a, l, g.n, g.o, g.oh, g.ow, false));
      ir::Attrs attrs = conv_attrs(g);
      attrs.set("layout", std::string(ir::layout_name(l)));
      const ir::Type in_t = f32(fwd ? ir::stored_image(l, g.n, g.c, g.h, g.w)
                                    : ir::stored_image(l, g.n, g.o, g.oh, g.ow));
      const ir::Type out_t = f32(fwd ? ir::stored_image(l, g.n, g.o, g.oh, g.ow)
                                     : ir::stored_image(l, g.n, g.c, g.h, g.w));
      const std::vector<ir::Type> in = {in_t, t.in[1]};
      const Vec want = conv_ref(op, g, a, w);
      const Vec want_l = fwd ? relaid(want, l, g.n, g.o, g.oh, g.ow, false)
                             : relaid(want, l, g.n, g.c, g.h, g.w, false);
      const std::string what = fmt::format("{} {}", ir::op_name(op), describe(g));
      // the step's choice: ours without AVX-512 (oneDNN's jit kernel, when
      // it has one, with)
      const std::string impl = make_backend_op(op, attrs, in, out_t)->impl();
      if (!avx512_convolutions())
        EXPECT_NE(impl.find("narrow groups"), std::string::npos) << what << ": " << impl;
      Conv2dGeom gl = g;
      gl.layout = l;
      expect_on_every_team([&] { return make_narrow_group_conv(op, gl); }, "narrow groups", out_t,
                           al, to_f32(w), want_l, what);
    }
}

// A weight gradient in fixed parts of the weight (whole groups, ranges of a
// group's output channels, or of the output channels of a convolution
// without groups; channels not a multiple of 16, strides, padding and
// dilation), each part reading its slices of x and dy: within float
// rounding of the f64 reference, and the same bits on 1, 2 and 3 threads.
TEST(DnnlConv, WeightGradientInWeightPartsMatchesF64ReferenceAndGivesTheSameBitsOnAnyTeam) {
  std::mt19937 rng(7);
  for (const Conv2dGeom& g :
       {conv_geom(3, 28, 5, 5, 28, 3, 3, 1, 1, 1, 1, 1, 1, 7),
        conv_geom(2, 40, 6, 6, 40, 3, 3, 2, 2, 1, 1, 1, 1, 5),
        conv_geom(4, 36, 7, 7, 60, 3, 3, 1, 1, 2, 2, 2, 2, 2),
        conv_geom(2, 12, 8, 8, 12, 3, 3, 1, 1, 1, 1, 1, 1, 12),
        conv_geom(3, 20, 6, 5, 37, 3, 2, 1, 1, 1, 0), conv_geom(2, 24, 4, 4, 70, 1, 1),
        conv_geom(2, 10, 3, 3, 3, 3, 3, 1, 1, 1, 1)}) {
    const ConvTypes t = conv_types(Op::conv2d_weight_grad, g);
    const Vec x = random_vec(t.in[0].numel(), rng), dy = random_vec(t.in[1].numel(), rng);
    expect_on_every_team([&] { return make_weight_grad_in_weight_parts(g); }, "weight parts", t.out,
                         to_f32(x), to_f32(dy), conv_ref(Op::conv2d_weight_grad, g, x, dy),
                         describe(g));
  }
}

// The batch parts of a weight gradient add their sums in the layout their
// primitive writes (blocked, padded when the channels are not a multiple of
// its block), then reorder once: the bits of each part reordered to ours and
// added in part order, on any team.
TEST(DnnlConv, WeightGradientPartsAddInTheirPrimitivesLayoutThenReorderOnce) {
  std::mt19937 rng(6);
  const int before = num_threads();
  for (const Conv2dGeom& g :
       {conv_geom(5, 24, 9, 9, 20, 3, 3, 1, 1, 1, 1), conv_geom(4, 64, 8, 8, 32, 3, 3, 2, 2, 1, 1),
        conv_geom(3, 48, 6, 6, 48, 1, 1, 1, 1, 0, 0, 1, 1, 3)}) {
    const ConvTypes t = conv_types(Op::conv2d_weight_grad, g);
    const std::vector<float> x = to_f32(random_vec(t.in[0].numel(), rng)),
                             dy = to_f32(random_vec(t.in[1].numel(), rng));
    const std::string what = describe(g);
    // Each part alone, reordered to ours by its own primitive, added in order.
    const int64_t parts = std::min<int64_t>(g.n, 4);
    std::vector<float> want(size_t(t.out.numel()), 0.0f);
    for (int64_t i = 0; i < parts; ++i) {
      const int64_t first = g.n * i / parts;
      Conv2dGeom gi = g;
      gi.n = g.n * (i + 1) / parts - first;
      const ConvTypes ti = conv_types(Op::conv2d_weight_grad, gi);
      std::shared_ptr<const BackendOp> part;
      {
        TeamScope one(1);
        part = make_conv(Op::conv2d_weight_grad, gi);
      }
      const std::vector<float> xi(x.begin() + first * g.in_image(),
                                  x.begin() + (first + gi.n) * g.in_image()),
          dyi(dy.begin() + first * g.out_image(), dy.begin() + (first + gi.n) * g.out_image());
      const std::vector<float> s = run_op_guarded(part, ti.out, xi, dyi, what);
      for (size_t j = 0; j < want.size(); ++j) want[j] = i == 0 ? s[j] : want[j] + s[j];
    }
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      const auto k = make_weight_grad_in_parts(g);
      EXPECT_NE(k->impl().find("summed so, then"), std::string::npos) << what << ": " << k->impl();
      EXPECT_EQ(run_op_guarded(k, t.out, x, dy, what), want) << what << " on " << threads;
    }
  }
  set_num_threads(before);
}

TEST(DnnlConv, FlopsCountMultiplyAddsOfEveryDirection) {
  const Conv2dGeom g = conv_geom(2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2);
  const int64_t want = 2 * g.n * g.o * g.oh * g.ow * (g.c / g.groups) * g.kh * g.kw;
  for (Op op : {Op::conv2d, Op::conv2d_input_grad, Op::conv2d_weight_grad}) {
    const ConvTypes t = conv_types(op, g);
    EXPECT_EQ(make_backend_op(op, conv_attrs(g), t.in, t.out)->flops(), want) << ir::op_name(op);
  }
}

// ---------------------------------------------------------------------------
// Matrix products.

struct MatmulCase {
  int64_t batch, m, k, n;
  bool ta, tb;
  Shape lead = {};  // the batch's dims, when more than one (their product is batch)
};

using exec::describe;  // a convolution's (conv_cases.hpp), overloaded here for a product's
std::string describe(const MatmulCase& c) {
  return fmt::format("batch {} [{}x{}] x [{}x{}]{}{}", c.batch, c.m, c.k, c.k, c.n,
                     c.ta ? " transpose_a" : "", c.tb ? " transpose_b" : "");
}

Shape stored(int64_t batch, int64_t rows, int64_t cols, bool transposed) {
  Shape s = transposed ? Shape{cols, rows} : Shape{rows, cols};
  if (batch > 1) s.insert(s.begin(), batch);
  return s;
}

// A case's operands and result as stored: [batch..., rows, cols].
struct MatmulTypes {
  ir::Type a, b, c;
};
MatmulTypes matmul_types(const MatmulCase& c) {
  auto with_lead = [&](Shape s) {  // the batch's dim replaced by its dims
    if (c.lead.empty()) return s;
    s.erase(s.begin());
    s.insert(s.begin(), c.lead.begin(), c.lead.end());
    return s;
  };
  return {f32(with_lead(stored(c.batch, c.m, c.k, c.ta))),
          f32(with_lead(stored(c.batch, c.k, c.n, c.tb))),
          f32(with_lead(c.batch > 1 ? Shape{c.batch, c.m, c.n} : Shape{c.m, c.n}))};
}

ir::Attrs matmul_attrs(const MatmulCase& c) {
  return ir::Attrs{{"transpose_a", int64_t(c.ta)}, {"transpose_b", int64_t(c.tb)}};
}

// The models' products (mlp, tiny_mlp, gpt forward and both gradients, gpt
// attention per head) and every transpose combination on odd sizes.
std::vector<MatmulCase> matmul_cases() {
  std::vector<MatmulCase> c = {
      {1, 128, 784, 512, false, true},   // mlp fc1 forward: x w^T
      {1, 128, 512, 784, false, false},  // mlp fc1 input grad: dy w
      {1, 512, 128, 784, true, false},   // mlp fc1 weight grad: dy^T x
      {1, 32, 64, 64, false, true},      // tiny_mlp
      {1, 512, 128, 384, false, true},   // gpt qkv
      {1, 512, 512, 128, false, true},   // gpt fc2
      {32, 64, 32, 64, false, true},     // gpt attention scores q k^T (8 x 4 heads)
      {32, 64, 64, 32, false, false},    // gpt attention values
      {32, 64, 64, 32, true, false},     // gpt attention grads
      {1, 0, 5, 3, false, false},        // empty
      {1, 4, 0, 3, false, false},        // empty sum: zeros
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      c.push_back({1, 7, 13, 5, ta, tb});
      c.push_back({3, 9, 4, 11, ta, tb});
    }
  return c;
}

TEST(DnnlMatmul, EveryLayoutMatchesF64Reference) {
  std::mt19937 rng(7);
  for (const MatmulCase& c : matmul_cases()) {
    const auto [ta, tb, tc] = matmul_types(c);
    const Vec a = random_vec(ta.numel(), rng), b = random_vec(tb.numel(), rng);
    Vec want(size_t(tc.numel()));
    const void* in[2] = {a.data(), b.data()};
    const std::vector<ir::Type> in64 = {{DType::f64, ta.shape}, {DType::f64, tb.shape}};
    run_reference(Op::matmul, matmul_attrs(c), in64, in, {DType::f64, tc.shape}, want.data());
    const std::vector<float> got =
        run_guarded(Op::matmul, matmul_attrs(c), {ta, tb}, tc, to_f32(a), to_f32(b), describe(c));
    expect_close(got, want, 1e-5, describe(c));
  }
}

TEST(DnnlMatmul, ReadsTransposedOperandsThroughStridesWithoutReorders) {
  const MatmulCase c{4, 16, 32, 8, true, true};
  const auto k = make_backend_op(
      Op::matmul, matmul_attrs(c),
      std::vector<ir::Type>{f32(stored(4, 16, 32, true)), f32(stored(4, 32, 8, true))},
      f32({4, 16, 8}));
  EXPECT_EQ(k->impl().find("reorders"), std::string::npos) << k->impl();
  EXPECT_EQ(k->flops(), 2 * 4 * 16 * 32 * 8);
}

// The reference (eager, interpreter) path and a lowered program's kernel run
// the same primitive: identical bits.
TEST(DnnlBackend, EagerPathMatchesProgramKernelBitwise) {
  std::mt19937 rng(8);
  const Conv2dGeom g = conv_geom(4, 32, 14, 14, 64, 3, 3, 2, 2, 1, 1);
  const ConvTypes t = conv_types(Op::conv2d, g);
  const std::vector<float> x = to_f32(random_vec(x_size(g), rng)),
                           w = to_f32(random_vec(w_size(g), rng));
  std::vector<float> eager(size_t(y_size(g)));
  const void* in[2] = {x.data(), w.data()};
  run_reference(Op::conv2d, conv_attrs(g), t.in, in, t.out, eager.data());
  const std::vector<float> kernel = run_guarded(Op::conv2d, conv_attrs(g), t.in, t.out, x, w, "");
  EXPECT_EQ(std::memcmp(eager.data(), kernel.data(), eager.size() * sizeof(float)), 0);
}

// Thread counts give the same bits. oneDNN splits products and
// forward/input-gradient convolutions over output elements, so each
// element's sum runs in the same order whatever the count; the weight
// gradient runs fixed parts of the weight or sums fixed parts of the batch
// in a fixed order, or (small maps) runs fixed row parts of one product,
// each on one thread. The same holds
// for an op made for two threads run on one (its one-thread twin, which a
// step runs under load) and for one made for one thread.
TEST(DnnlBackend, OneAndTwoThreadsGiveTheSameBits) {
  std::mt19937 rng(9);
  const int before = num_threads();
  auto run_with = [&](int threads, int team, Op op, const Conv2dGeom& g,
                      const std::vector<float>& a, const std::vector<float>& b) {
    set_num_threads(threads);
    const ConvTypes t = conv_types(op, g);
    return run_guarded(op, conv_attrs(g), t.in, t.out, a, b, describe(g), team);
  };
  for (const Conv2dGeom& g :
       {conv_geom(8, 32, 28, 28, 64, 3, 3, 2, 2, 1, 1),
        conv_geom(64, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1), conv_geom(3, 8, 9, 9, 16, 3, 3, 1, 1, 1, 1),
        conv_geom(8, 24, 4, 4, 37, 3, 3, 2, 2, 1, 1),
        conv_geom(4, 68, 4, 4, 66, 3, 3, 1, 1, 1, 1, 1, 1, 2)}) {
    SCOPED_TRACE(describe(g));
    const std::vector<float> x = to_f32(random_vec(x_size(g), rng)),
                             w = to_f32(random_vec(w_size(g), rng)),
                             dy = to_f32(random_vec(y_size(g), rng));
    for (const auto& [op, a, b] :
         {std::tuple{Op::conv2d, &x, &w}, std::tuple{Op::conv2d_input_grad, &dy, &w},
          std::tuple{Op::conv2d_weight_grad, &x, &dy}}) {
      SCOPED_TRACE(ir::op_name(op));
      const std::vector<float> one = run_with(1, 0, op, g, *a, *b);
      EXPECT_EQ(one, run_with(2, 0, op, g, *a, *b));
      EXPECT_EQ(one, run_with(2, 1, op, g, *a, *b));
      EXPECT_EQ(one, run_with(3, 0, op, g, *a, *b));
    }
  }

  // Over images stored NHWC or in blocks, the kernels made for them where
  // they lie: among them oneDNN's brgemm convolutions over NHWC, whose
  // blocking follows the team they are made for and for a few shapes of one
  // image with a padded width changes the order of a sum (the first four
  // found by a sweep of random shapes, the fifth by the differential tester).
  for (ir::ImageLayout l : {ir::ImageLayout::nhwc, ir::ImageLayout::nChw16c})
    for (Conv2dGeom g :
         {conv_geom(1, 28, 4, 12, 25, 3, 2, 2, 2, 0, 1),
          conv_geom(1, 32, 4, 12, 16, 3, 2, 2, 2, 0, 1),
          conv_geom(1, 11, 2, 6, 8, 1, 2, 3, 1, 0, 1), conv_geom(1, 25, 5, 8, 33, 4, 5, 2, 1, 0, 4),
          conv_geom(1, 13, 6, 10, 26, 5, 2, 3, 2, 0, 1), conv_geom(1, 1, 4, 8, 2, 5, 2, 2, 2, 1, 1),
          conv_geom(8, 32, 28, 28, 64, 3, 3, 2, 2, 1, 1),
          conv_geom(4, 64, 8, 8, 32, 1, 1, 1, 1, 0, 0)}) {
      const int64_t block = l == ir::ImageLayout::nChw16c ? 16 : 1;
      if (g.c % block != 0 || g.o % block != 0) continue;
      const std::string what = fmt::format("{} {}", ir::layout_name(l), describe(g));
      SCOPED_TRACE(what);
      ir::Attrs attrs = conv_attrs(g);
      attrs.set("layout", std::string(ir::layout_name(l)));
      const ir::Type x = f32(ir::stored_image(l, g.n, g.c, g.h, g.w)),
                     y = f32(ir::stored_image(l, g.n, g.o, g.oh, g.ow)),
                     wt = f32({g.o, g.c / g.groups, g.kh, g.kw});
      const std::vector<float> xv = to_f32(random_vec(x.numel(), rng)),
                               wv = to_f32(random_vec(wt.numel(), rng)),
                               dyv = to_f32(random_vec(y.numel(), rng));
      for (const auto& [op, in, out, a, b] :
           {std::tuple{Op::conv2d, std::vector{x, wt}, y, &xv, &wv},
            std::tuple{Op::conv2d_input_grad, std::vector{y, wt}, x, &dyv, &wv},
            std::tuple{Op::conv2d_weight_grad, std::vector{x, y}, wt, &xv, &dyv}}) {
        SCOPED_TRACE(ir::op_name(op));
        ir::Attrs at = attrs;
        if (op == Op::conv2d_input_grad) at.set("input_shape", x.shape);
        if (op == Op::conv2d_weight_grad) at.set("weight_shape", wt.shape);
        auto with = [&](int threads, int team) {
          set_num_threads(threads);
          return run_guarded(op, at, in, out, *a, *b, what, team);
        };
        const std::vector<float> one = with(1, 0);
        EXPECT_EQ(one, with(2, 0));
        EXPECT_EQ(one, with(2, 1));
        EXPECT_EQ(one, with(3, 0));
      }
    }

  const MatmulCase c{1, 128, 784, 512, false, true};
  const std::vector<float> a = to_f32(random_vec(c.m * c.k, rng)),
                           b = to_f32(random_vec(c.k * c.n, rng));
  auto mm = [&](int threads, int team) {
    set_num_threads(threads);
    return run_guarded(Op::matmul, matmul_attrs(c), {f32({c.m, c.k}), f32({c.n, c.k})},
                       f32({c.m, c.n}), a, b, describe(c), team);
  };
  EXPECT_EQ(mm(1, 0), mm(2, 0));
  EXPECT_EQ(mm(1, 0), mm(2, 1));
  set_num_threads(before);
}

// Each product plain, with a bias and accumulating (alpha and beta): the
// same bits on 1, 2 and 3 threads and on the one-thread team, no reference
// kernel, and values within float rounding of the f64 reference.
void expect_the_same_bits_on_any_team(std::initializer_list<MatmulCase> cases, uint32_t seed) {
  std::mt19937 rng(seed);
  const int before = num_threads();
  for (const MatmulCase& c : cases) {
    SCOPED_TRACE(describe(c));
    const auto [ta, tb, tc] = matmul_types(c);
    const Vec a = random_vec(ta.numel(), rng), b = random_vec(tb.numel(), rng),
              bias = random_vec(c.n, rng), acc = random_vec(tc.numel(), rng);
    // The product, and the product of the magnitudes that bounds its rounding.
    const std::vector<ir::Type> types64 = {{DType::f64, ta.shape}, {DType::f64, tb.shape}};
    auto product = [&](const Vec& x, const Vec& y) {
      Vec p(size_t(tc.numel()));
      const void* in64[2] = {x.data(), y.data()};
      run_reference(Op::matmul, matmul_attrs(c), types64, in64, {DType::f64, tc.shape}, p.data());
      return p;
    };
    auto magnitudes = [](Vec v) {
      for (double& x : v) x = std::abs(x);
      return v;
    };
    const Vec prod = product(a, b), size = product(magnitudes(a), magnitudes(b));
    const std::vector<float> a32 = to_f32(a), b32 = to_f32(b), bias32 = to_f32(bias),
                             acc32 = to_f32(acc);
    const float alpha = 0.5f, beta = 0.75f;
    for (Op op : {Op::matmul, Op::matmul_bias, Op::matmul_add}) {
      SCOPED_TRACE(ir::op_name(op));
      std::vector<ir::Type> in{ta, tb};
      if (op == Op::matmul_bias) in.push_back(f32({c.n}));
      auto run = [&](int threads, int team) {
        set_num_threads(threads);
        const auto k = make_backend_op(op, matmul_attrs(c), in, tc);
        EXPECT_EQ(k->impl().find("ref:"), std::string::npos) << k->impl();
        std::optional<TeamScope> on_team;
        if (team > 0) on_team.emplace(team);
        std::vector<float> y = op == Op::matmul_add ? acc32 : std::vector<float>(prod.size());
        std::vector<std::byte> scratch(size_t(k->scratch_bytes()) + 64);
        void* aligned =
            reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
        k->run(a32.data(), b32.data(), y.data(), aligned,
               op == Op::matmul_bias  ? static_cast<const void*>(bias32.data())
               : op == Op::matmul_add ? &alpha
                                      : nullptr,
               op == Op::matmul_add ? &beta : nullptr);
        return y;
      };
      const std::vector<float> one = run(1, 0);
      EXPECT_EQ(one, run(2, 0));
      EXPECT_EQ(one, run(2, 1));
      EXPECT_EQ(one, run(3, 0));
      for (size_t i = 0; i < one.size(); ++i) {
        const double want = op == Op::matmul_bias  ? prod[i] + bias[i % size_t(c.n)]
                            : op == Op::matmul_add ? double(beta) * acc[i] + double(alpha) * prod[i]
                                                   : prod[i];
        ASSERT_NEAR(one[i], want, 1e-5 * (size[i] + 1.0)) << "element " << i;
      }
    }
  }
  set_num_threads(before);
}

// A product with a transposed A and a long K (every weight gradient X^T dY
// of a large batch): oneDNN's own primitive splits its sums by its team, so
// it runs as fixed parts of its output; by rows and by columns, batched.
TEST(DnnlBackend, TransposedProductsWithALongSumGiveTheSameBitsOnAnyTeam) {
  expect_the_same_bits_on_any_team(
      {MatmulCase{1, 2, 2048, 16, true, false}, MatmulCase{1, 64, 2048, 33, true, true},
       MatmulCase{2, 8, 4096, 64, true, false}, MatmulCase{1, 100, 8192, 16, true, false},
       MatmulCase{1, 1, 4096, 1, true, false}},
      10);
}

// Products of every kind of shape. Where oneDNN's products are gemm:jit
// (CPUs without AVX-512) they split their sums by the team OpenMP gives when
// they run, for short sums too ([64x9] x [9x3] rounded differently on 1 and
// 2 threads): they run as fixed one-thread parts.
TEST(DnnlBackend, ProductsOfEveryShapeGiveTheSameBitsOnAnyTeam) {
  expect_the_same_bits_on_any_team(
      {MatmulCase{1, 64, 9, 3, false, false}, MatmulCase{1, 64, 9, 3, true, false},
       MatmulCase{1, 32, 4096, 32, false, false}, MatmulCase{1, 3, 20000, 3, false, true},
       MatmulCase{1, 128, 512, 1, true, false}, MatmulCase{3, 17, 40, 5, false, true},
       MatmulCase{1, 1, 300, 77, false, false}, MatmulCase{1, 513, 64, 100, false, false},
       MatmulCase{4, 30, 1000, 2, true, true}},
      11);
}

// Batches of small matrices (attention's per head, an adaptive pooling's)
// run as parts of the batch's leading dim (the first longer than 1), each
// one primitive over its matrices: one leading dim, several, a leading 1,
// fewer matrices than parts, strided by the transposes.
TEST(DnnlBackend, BatchesOfSmallProductsGiveTheSameBitsOnAnyTeam) {
  expect_the_same_bits_on_any_team(
      {MatmulCase{96, 17, 64, 17, false, true}, MatmulCase{96, 17, 17, 64, false, false},
       MatmulCase{24, 6, 1, 6, false, true, {2, 12}},
       MatmulCase{12, 5, 7, 3, true, true, {1, 3, 4}}, MatmulCase{3, 9, 4, 2, true, false},
       MatmulCase{20, 8, 8, 8, false, false, {10, 2}}},
      16);
}

// Wider than tall, one matrix: parts of the output's columns (a recurrent
// step's products), uneven, narrower than the alignment, B either way.
TEST(DnnlBackend, WideProductsInColumnPartsGiveTheSameBitsOnAnyTeam) {
  expect_the_same_bits_on_any_team(
      {MatmulCase{1, 32, 256, 1024, false, true}, MatmulCase{1, 32, 1024, 256, false, false},
       MatmulCase{1, 8, 64, 100, false, false}, MatmulCase{1, 5, 33, 70, true, true},
       MatmulCase{1, 3, 40, 20, false, true}, MatmulCase{1, 2, 17, 9, true, false}},
      12);
}

// Parts that read A transposed into their scratch (gemm:jit's products with
// a transposed A, dnnl_matmul.cpp): uneven parts of the rows, over a K and
// row counts that end mid-tile, A read at padded strides either way round,
// and with its rows a page or more apart (copied in blocks of up to 256
// rows): parts of more and fewer rows than a block, K not a multiple of 16.
TEST(DnnlBackend, MatrixPartsTransposeTheirRowsOfAIntoTheScratch) {
  std::mt19937 rng(13);
  // Parts of 10, 27, 23 and 17 rows over K = 45: whole blocks of 16 rows and
  // 8 of K, and the rows and K that end mid-block.
  struct Case {
    int64_t m, k, sk, sm;
    std::vector<int64_t> starts;
  };
  const Case cases[] = {{77, 45, 80, 1, {0, 10, 37, 60, 77}},
                        {77, 45, 1, 47, {0, 10, 37, 60, 77}},
                        {300, 45, 1030, 1, {0, 10, 275, 293, 300}},
                        {64, 48, 1024, 1, {0, 16, 32, 64}}};
  const int64_t n = 6;
  for (const auto& [m, k, sk, sm, starts] : cases) {
    const int64_t stored = std::max((k - 1) * sk + (m - 1) * sm + 1, int64_t(0));
    const Vec a = random_vec(stored, rng), b = random_vec(k * n, rng);
    std::vector<MatrixPart> parts;
    for (size_t i = 0; i + 1 < starts.size(); ++i) {
      const int64_t m0 = starts[i], rows = starts[i + 1] - m0;
      MatrixPart p;
      TeamScope one(1);  // a part runs on one thread
      p.op = make_whole_matmul(std::vector<ir::Type>{f32({rows, k}), f32({k, n})}, f32({rows, n}),
                               ir::Attrs{});
      p.a = m0 * sm, p.out = m0 * n;
      p.dense_rows = rows, p.k = k, p.sk = sk, p.sm = sm, p.transpose_a = true;
      parts.push_back(std::move(p));
    }
    const auto op = make_matrix_parts(std::move(parts));
    std::vector<float> got(size_t(m * n));
    std::vector<std::byte> scratch(size_t(op->scratch_bytes()) + 64);
    void* aligned =
        reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
    const std::vector<float> a32 = to_f32(a), b32 = to_f32(b);
    op->run(a32.data(), b32.data(), got.data(), aligned, nullptr, nullptr);
    Vec want(size_t(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t q = 0; q < k; ++q)
          want[size_t(i * n + j)] += double(a32[size_t(q * sk + i * sm)]) * b32[size_t(q * n + j)];
    expect_close(got, want, 1e-5, fmt::format("A at strides ({}, {})", sk, sm));
  }
}

// Where products are gemm:jit (CPUs without AVX-512), one with a transposed
// A whose stored rows lie a multiple of 512 floats apart transposes its
// parts' rows of A first, for a short K too (the kernel's own copy of such
// an A is half as fast: make_matmul); at other strides and with a short K it
// reads A where it lies. Elsewhere products are not gemm:jit's parts.
TEST(DnnlBackend, GemmJitPartsTransposeAnAWhoseRowsAliasInTheCache) {
  auto impl = [](int64_t m) {
    const MatmulCase c{1, m, 64, 32, true, false};
    const std::vector<ir::Type> in{f32({64, m}), f32({64, 32})};
    return make_backend_op(Op::matmul, matmul_attrs(c), in, f32({m, 32}))->impl();
  };
  const std::string aliasing = impl(1024), other = impl(1000);
  if (aliasing.find("gemm:jit") == std::string::npos) {
    EXPECT_EQ(aliasing.find("parts"), std::string::npos) << aliasing;
    return;
  }
  EXPECT_NE(aliasing.find("A transposed into the scratch"), std::string::npos) << aliasing;
  EXPECT_NE(other.find("parts"), std::string::npos) << other;
  EXPECT_EQ(other.find("A transposed"), std::string::npos) << other;
}

// Where products are gemm:jit, one whose B's rows lie a multiple of 512
// floats apart (and whose output has 64 rows or more) copies B at another
// row stride first, which every part reads: split by rows, by columns (each
// part at its offset into the copy), with a bias and accumulated; the same
// bits on any team, and right.
TEST(DnnlBackend, GemmJitPartsStageABWhoseRowsAliasInTheCache) {
  const MatmulCase c{1, 600, 40, 512, false, false};
  const std::vector<ir::Type> in{f32({600, 40}), f32({40, 512})};
  const std::string impl =
      make_backend_op(Op::matmul, matmul_attrs(c), in, f32({600, 512}))->impl();
  if (impl.find("gemm:jit") != std::string::npos)
    EXPECT_NE(impl.find("B copied at row stride 528"), std::string::npos) << impl;
  expect_the_same_bits_on_any_team(
      {c, MatmulCase{1, 70, 33, 1024, false, false}, MatmulCase{1, 64, 20, 512, true, false}}, 14);
}

// The thread count is the library's, not the calling thread's OpenMP
// setting: a step run from a thread of its own uses it too.
TEST(DnnlBackend, ProductsRunWithTheLibrarysThreadCountFromAnyThread) {
  const int before = num_threads();
  set_num_threads(1);
  int seen = 0;
  std::thread worker([&] {
    const MatmulCase c{1, 8, 8, 8, false, false};
    run_guarded(Op::matmul, matmul_attrs(c), {f32({8, 8}), f32({8, 8})}, f32({8, 8}),
                std::vector<float>(64, 1.0f), std::vector<float>(64, 1.0f), describe(c));
    seen = omp_get_max_threads();
  });
  worker.join();
  EXPECT_EQ(seen, 1);
  set_num_threads(before);
}

TEST(DnnlBackend, ReportsVersionAndInstructionSet) {
  const std::string isa = backend_isa();
  EXPECT_NE(isa.find("oneDNN "), std::string::npos) << isa;
  EXPECT_NE(isa.find("ISA "), std::string::npos) << isa;
  EXPECT_EQ(isa.find("unknown"), std::string::npos) << isa;
}

}  // namespace
}  // namespace ws::exec
