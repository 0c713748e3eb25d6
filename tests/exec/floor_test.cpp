// The floor (floor.hpp): one part per shape of contraction, counted over
// the graphs, in the layouts each primitive picks.
#include "exec/floor.hpp"

#include <gtest/gtest.h>

#include "exec/dnnl_op.hpp"
#include "ir/builder.hpp"

namespace ws::exec {
namespace {

using ir::Op;
using ir::ValueId;

TEST(Floor, OnePartPerShapeCountedOverTheGraphsInThePrimitivesLayouts) {
  ir::Graph g, h;
  ir::Builder bg(g), bh(h);
  const ir::Type image{DType::f32, {2, 8, 10, 10}}, weight{DType::f32, {16, 8, 3, 3}};
  const ir::Attrs conv{{"padding", std::vector<int64_t>{1, 1}}};
  ValueId x = bg.input(ir::InputRole::data, "x", image);
  ValueId w = bg.input(ir::InputRole::param, "w", weight);
  ValueId y = bg.add(Op::conv2d, {x, w}, conv);
  bg.add(Op::conv2d_weight_grad, {x, y},
         ir::Attrs{{"padding", std::vector<int64_t>{1, 1}},
                   {"weight_shape", std::vector<int64_t>{16, 8, 3, 3}}});
  ValueId a = bg.input(ir::InputRole::data, "a", {DType::f32, {6, 5}});
  ValueId b = bg.input(ir::InputRole::data, "b", {DType::f32, {4, 5}});
  bg.matmul(a, b, false, true);
  ValueId a64 = bg.input(ir::InputRole::data, "a64", {DType::f64, {6, 5}});
  bg.matmul(a64, a64, false, true);  // not f32: not the backend's
  // The same convolution in a second graph: one part, two calls.
  ValueId x2 = bh.input(ir::InputRole::data, "x", image);
  ValueId w2 = bh.input(ir::InputRole::param, "w", weight);
  bh.add(Op::conv2d, {x2, w2}, conv);

  const std::vector<ir::Graph> graphs{g, h};
  const std::vector<FloorPart> parts = measure_floor(graphs, 2);
  ASSERT_EQ(parts.size(), 3u);
  std::map<std::string, const FloorPart*> by_op;
  for (const FloorPart& p : parts) by_op[p.what.substr(0, p.what.find(' '))] = &p;
  ASSERT_EQ(by_op.size(), 3u);
  const Conv2dGeom geom{.n = 2,
                        .c = 8,
                        .h = 10,
                        .w = 10,
                        .o = 16,
                        .kh = 3,
                        .kw = 3,
                        .oh = 10,
                        .ow = 10,
                        .ph = 1,
                        .pw = 1};
  const FloorPart& fwd = *by_op.at("conv2d");
  EXPECT_EQ(fwd.calls, 2);
  EXPECT_EQ(fwd.flops, 2 * conv_flops(geom));
  EXPECT_EQ(fwd.what,
            "conv2d [2,8,10,10] [16,8,3,3] -> [2,16,10,10] stride 1x1x1 padding 0x1x1 "
            "dilation 1x1x1 groups 1");
  EXPECT_EQ(by_op.at("conv2d_weight_grad")->calls, 1);
  EXPECT_EQ(by_op.at("conv2d_weight_grad")->flops, conv_flops(geom));
  const FloorPart& mm = *by_op.at("matmul");
  EXPECT_EQ(mm.what, "matmul [6,5] [4,5] -> [6,4] tb");
  EXPECT_EQ(mm.flops, 2 * 6 * 5 * 4);
  for (const FloorPart& p : parts) {
    EXPECT_GT(p.ms, 0) << p.what;
    EXPECT_FALSE(p.impl.empty()) << p.what;
    EXPECT_EQ(p.impl.find("reorders"), std::string::npos) << p.what << ": " << p.impl;
    // On the whole team, as oneDNN would run it: the floor trains nothing,
    // so a product whose sums depend on the team (gemm:jit) need not run on
    // one thread as a step's does.
    EXPECT_EQ(p.impl.find("on one thread"), std::string::npos) << p.what << ": " << p.impl;
  }
  for (size_t i = 1; i < parts.size(); ++i) EXPECT_GE(parts[i - 1].ms, parts[i].ms);
}

}  // namespace
}  // namespace ws::exec
