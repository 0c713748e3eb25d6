// Convolution and pooling geometry (ir/geometry.hpp): defaults, output
// sizes, the same geometry from each op of a family, and the user's errors.
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "ir/attr.hpp"
#include "ir/builder.hpp"
#include "ir/geometry.hpp"

namespace ws::ir {
namespace {

using Ints = std::vector<int64_t>;

Type f32(Shape s) { return Type{DType::f32, std::move(s)}; }

TEST(IrGeometry, ConvolutionDefaultsAndOutputSize) {
  const Conv2dGeom g = conv2d_geom(Op::conv2d, Attrs{}, f32({2, 4, 9, 8}), f32({6, 4, 3, 2}));
  EXPECT_EQ(g.n, 2);
  EXPECT_EQ(g.c, 4);
  EXPECT_EQ(g.o, 6);
  EXPECT_EQ(g.kh, 3);
  EXPECT_EQ(g.kw, 2);
  EXPECT_EQ(g.sh * g.sw * g.dh * g.dw * g.groups, 1);
  EXPECT_EQ(g.ph + g.pw, 0);
  EXPECT_EQ(g.oh, 7);
  EXPECT_EQ(g.ow, 7);

  // oh = (h + 2*ph - dh*(kh-1) - 1) / sh + 1, one value for both dims or two.
  const Attrs a = make_attrs<Op::conv2d>(
      {{"stride", Ints{2}}, {"padding", Ints{1, 0}}, {"dilation", Ints{2, 1}}, {"groups", 2}});
  const Conv2dGeom s = conv2d_geom(Op::conv2d, a, f32({1, 4, 9, 8}), f32({6, 2, 3, 2}));
  EXPECT_EQ(s.sh, 2);
  EXPECT_EQ(s.sw, 2);
  EXPECT_EQ(s.ph, 1);
  EXPECT_EQ(s.pw, 0);
  EXPECT_EQ(s.dh, 2);
  EXPECT_EQ(s.dw, 1);
  EXPECT_EQ(s.groups, 2);
  EXPECT_EQ(s.oh, (9 + 2 - 2 * 2 - 1) / 2 + 1);
  EXPECT_EQ(s.ow, (8 - 1 - 1) / 2 + 1);

  // The shape inference of the op agrees.
  EXPECT_EQ(infer_type(Op::conv2d, {f32({1, 4, 9, 8}), f32({6, 2, 3, 2})}, a, {}),
            f32({1, 6, s.oh, s.ow}));
}

// Each op of the family gives the convolution's geometry, from its own
// operands and result.
TEST(IrGeometry, ConvolutionGradientsHaveTheConvolutionsGeometry) {
  const Type x = f32({2, 3, 7, 7}), w = f32({5, 3, 3, 3}), y = f32({2, 5, 3, 3});
  const Attrs a = make_attrs<Op::conv2d>({{"stride", Ints{2}}});
  const std::vector<Type> fwd{x, w}, dx{y, w}, dw{x, y};
  const Conv2dGeom g = conv2d_node_geom(Op::conv2d, a, fwd, y);
  EXPECT_EQ(g.oh, 3);
  for (const Conv2dGeom& o : {conv2d_node_geom(Op::conv2d_input_grad, a, dx, x),
                              conv2d_node_geom(Op::conv2d_weight_grad, a, dw, w)}) {
    EXPECT_EQ(o.n, g.n);
    EXPECT_EQ(o.c, g.c);
    EXPECT_EQ(o.o, g.o);
    EXPECT_EQ(o.kh, g.kh);
    EXPECT_EQ(o.oh, g.oh);
    EXPECT_EQ(o.ow, g.ow);
    EXPECT_EQ(o.sh, 2);
  }
}

TEST(IrGeometry, PoolingStrideIsTheKernelUnlessGiven) {
  const Attrs a = make_attrs<Op::max_pool2d>({{"kernel", Ints{3, 2}}});
  const Pool2dGeom g = pool2d_geom(Op::max_pool2d, a, {1, 2, 9, 8});
  EXPECT_EQ(g.sh, 3);
  EXPECT_EQ(g.sw, 2);
  EXPECT_EQ(g.ph + g.pw, 0);
  EXPECT_EQ(g.oh, 3);
  EXPECT_EQ(g.ow, 4);
  EXPECT_TRUE(g.count_include_pad);

  const Attrs b = make_attrs<Op::avg_pool2d>(
      {{"kernel", Ints{3}}, {"stride", Ints{1}}, {"padding", Ints{1}}, {"count_include_pad", 0}});
  const Pool2dGeom h = pool2d_geom(Op::avg_pool2d, b, {1, 2, 9, 8});
  EXPECT_EQ(h.sh, 1);
  EXPECT_EQ(h.oh, 9);
  EXPECT_EQ(h.ow, 8);
  EXPECT_FALSE(h.count_include_pad);
  EXPECT_TRUE(pool2d_geom(Op::avg_pool2d, a, {1, 2, 9, 8}).count_include_pad);

  // A gradient's geometry is its result's (the pooled input).
  const std::vector<Type> in{f32({1, 2, 3, 4})};
  EXPECT_EQ(pool2d_node_geom(Op::avg_pool2d_grad, a, in, f32({1, 2, 9, 8})).oh, 3);
}

std::string ErrorOf(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ws::Error";
  return "";
}

TEST(IrGeometry, AttributesThatDoNotFitAreTheUsersErrors) {
  const SourceLoc loc{"m.cpp", 7};
  EXPECT_EQ(ErrorOf([&] {
              conv2d_geom(Op::conv2d, make_attrs<Op::conv2d>({{"groups", 3}}), f32({1, 4, 5, 5}),
                          f32({6, 2, 3, 3}), loc);
            }),
            "conv2d: groups 3 must divide the input channels 4 and output channels 6 (at m.cpp:7)");
  EXPECT_EQ(ErrorOf([&] {
              conv2d_geom(Op::conv2d, make_attrs<Op::conv2d>({{"stride", Ints{1, 0}}}),
                          f32({1, 4, 5, 5}), f32({6, 4, 3, 3}), loc);
            }),
            "conv2d: stride must be one or two integers >= 1, got [1,0] (at m.cpp:7)");
  EXPECT_EQ(ErrorOf([&] {
              pool2d_geom(Op::max_pool2d,
                          make_attrs<Op::max_pool2d>({{"kernel", Ints{2}}, {"padding", Ints{2}}}),
                          {1, 1, 4, 4}, loc);
            }),
            "max_pool2d: padding (2, 2) must be at most half the kernel (2, 2) (at m.cpp:7)");
}

// A layout stores the images differently, never the geometry: each gives
// the NCHW convolution's sizes, and shape inference the result as stored.
TEST(IrGeometry, ImageLayoutsStoreTheSameConvolution) {
  const Type w = f32({32, 16, 3, 3});
  const Attrs plain = make_attrs<Op::conv2d>({{"stride", Ints{2}}, {"padding", Ints{1}}});
  const Conv2dGeom want = conv2d_geom(Op::conv2d, plain, f32({2, 16, 9, 7}), w);
  for (ImageLayout l :
       {ImageLayout::nchw, ImageLayout::nhwc, ImageLayout::nChw8c, ImageLayout::nChw16c}) {
    Attrs a = plain;
    a.set("layout", std::string(layout_name(l)));
    const Type x = f32(stored_image(l, 2, 16, 9, 7));
    const Conv2dGeom g = conv2d_geom(Op::conv2d, a, x, w);
    EXPECT_EQ(g.layout, l);
    EXPECT_EQ(std::tie(g.n, g.c, g.h, g.w, g.o, g.oh, g.ow),
              std::tie(want.n, want.c, want.h, want.w, want.o, want.oh, want.ow))
        << layout_name(l);
    const Type y = f32(stored_image(l, 2, 32, want.oh, want.ow));
    EXPECT_EQ(infer_type(Op::conv2d, {x, w}, a, {}), y) << layout_name(l);
    Attrs dx = a, dw = a;
    dx.set("input_shape", x.shape);
    dw.set("weight_shape", w.shape);
    EXPECT_EQ(infer_type(Op::conv2d_input_grad, {y, w}, dx, {}), x) << layout_name(l);
    EXPECT_EQ(infer_type(Op::conv2d_weight_grad, {x, y}, dw, {}), w) << layout_name(l);
  }
  EXPECT_EQ(stored_image(ImageLayout::nhwc, 2, 16, 9, 7), (Shape{2, 9, 7, 16}));
  EXPECT_EQ(stored_image(ImageLayout::nChw8c, 2, 16, 9, 7), (Shape{2, 2, 9, 7, 8}));
}

TEST(IrGeometry, MaxPoolingOfNhwcImages) {
  const Attrs a = make_attrs<Op::max_pool2d>(
      {{"kernel", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}, {"layout", "nhwc"}});
  const Pool2dGeom g = pool2d_geom(Op::max_pool2d, a, {2, 9, 7, 16});
  EXPECT_EQ(g.layout, ImageLayout::nhwc);
  EXPECT_EQ((std::vector<int64_t>{g.n, g.c, g.h, g.w, g.oh, g.ow}),
            (std::vector<int64_t>{2, 16, 9, 7, 5, 4}));
  EXPECT_EQ(infer_type(Op::max_pool2d, {f32({2, 9, 7, 16})}, a, {}), f32({2, 5, 4, 16}));
  EXPECT_EQ(ErrorOf([&] {
              pool2d_geom(Op::max_pool2d,
                          make_attrs<Op::max_pool2d>({{"kernel", Ints{2}}, {"layout", "nChw16c"}}),
                          {1, 16, 4, 4}, SourceLoc{"m.cpp", 7});
            }),
            "max_pool2d: unknown layout \"nChw16c\": expected nchw or nhwc (at m.cpp:7)");
}

TEST(IrGeometry, ALayoutThatDoesNotFitIsTheUsersError) {
  const SourceLoc loc{"m.cpp", 7};
  auto conv = [&](const std::string& layout, Shape x, Shape w) {
    return ErrorOf([&] {
      infer_type(Op::conv2d, {f32(std::move(x)), f32(std::move(w))},
                 make_attrs<Op::conv2d>({{"layout", layout}}), loc);
    });
  };
  EXPECT_EQ(conv("nchw16", {1, 1, 5, 5, 16}, {16, 16, 3, 3}),
            "conv2d: unknown layout \"nchw16\": expected nchw, nhwc, nChw8c or nChw16c (at "
            "m.cpp:7)");
  EXPECT_EQ(conv("nChw16c", {1, 16, 5, 5}, {16, 16, 3, 3}),
            "conv2d: in layout nChw16c the images are [N, C/16, H, W, 16], got f32[1,16,5,5] (at "
            "m.cpp:7)");
  EXPECT_EQ(conv("nChw8c", {1, 2, 5, 5, 8}, {12, 16, 3, 3}),
            "conv2d: layout nChw8c stores channels in blocks of 8, which do not divide the 12 "
            "output channels (at m.cpp:7)");
  EXPECT_EQ(conv("nhwc", {1, 5, 5, 16}, {16, 16, 3, 3, 3}),
            "conv2d: in layout nhwc the weight must be 4-d [O, C/groups, KH, KW], got "
            "f32[16,16,3,3,3] (at m.cpp:7)");
  EXPECT_EQ(conv("nhwc", {1, 5, 5, 16}, {16, 8, 3, 3}),
            "conv2d: the input f32[1,5,5,16] has 16 channels, but the weight f32[16,8,3,3] "
            "expects 8 per group x 1 groups (at m.cpp:7)");
}

}  // namespace
}  // namespace ws::ir
