// Convolution and pooling geometry (ir/geometry.hpp): defaults, output
// sizes, the same geometry from each op of a family, and the user's errors.
#include <string>
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

}  // namespace
}  // namespace ws::ir
