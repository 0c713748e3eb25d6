// One finite-difference gradient check per differentiable op, and a walk of
// the op table so an op added without a case (or without a rule) fails.
#include <functional>
#include <map>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include "autograd/gradcheck.hpp"
#include "autograd/vjp.hpp"
#include "ir/attr.hpp"
#include "ir/builder.hpp"
#include "ir/verify.hpp"
#include "test_util.hpp"

namespace ws {
namespace {

using ir::Op;
using ir::ValueId;

struct Range {
  double lo = -1, hi = 1;
};

// Builds loss = sum(op(inputs...) * fixed weights) over f32 inputs (checked in
// f64), with inputs drawn from their ranges.
class OpCase {
 public:
  ValueId input(const Shape& s, Range r = {}) {
    ranges_.push_back(r);
    return b_.input(ir::InputRole::param, "x" + std::to_string(ranges_.size()),
                    ir::Type{DType::f32, s});
  }
  ir::Builder& b() { return b_; }

  check::GradcheckResult check(ValueId out) {
    std::mt19937_64 gen(7);
    auto uni = [&](Range r) { return r.lo + (r.hi - r.lo) * double(gen() >> 11) * 0x1.0p-53; };
    const ir::Type t = g_.type(out);  // a copy: appending moves the nodes
    std::vector<double> w(size_t(t.numel()));
    for (double& x : w) x = uni({-1, 1});
    ValueId weights = b_.constant(w, ir::Type{t.dtype, t.shape});
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < t.rank(); ++d) axes.push_back(d);
    ValueId prod = b_.binary(Op::mul, out, weights);
    ValueId loss = axes.empty() ? prod : b_.reduce(Op::reduce_sum, prod, axes);
    g_.outputs.push_back(ir::Output{ir::OutputRole::loss, loss, ir::kNoValue, "loss"});
    ir::verify(g_);
    testing::expect_round_trip(g_);
    std::vector<Tensor> values;
    for (size_t i = 0; i < g_.inputs.size(); ++i) {
      std::vector<double> v(size_t(g_.type(g_.inputs[i]).numel()));
      for (double& x : v) x = uni(ranges_[i]);
      values.push_back(cast(Tensor::from_vector(v, g_.type(g_.inputs[i]).shape), DType::f32));
    }
    return autograd::gradcheck_graph(g_, g_.inputs, values, {});
  }

 private:
  ir::Graph g_;
  ir::Builder b_{g_};
  std::vector<Range> ranges_;
};

using CaseFn = std::function<check::GradcheckResult()>;

std::map<Op, std::vector<CaseFn>> cases() {
  std::map<Op, std::vector<CaseFn>> m;
  for (Op op : {Op::add, Op::sub, Op::mul, Op::maximum})
    m[op].push_back([op] {
      OpCase c;
      ValueId a = c.input({2, 3}), b = c.input({2, 3});
      return c.check(c.b().binary(op, a, b));
    });
  m[Op::div].push_back([] {
    OpCase c;
    ValueId a = c.input({2, 3}), b = c.input({2, 3}, {0.5, 2});
    return c.check(c.b().binary(Op::div, a, b));
  });
  m[Op::neg].push_back([] {
    OpCase c;
    return c.check(c.b().unary(Op::neg, c.input({4})));
  });
  m[Op::identity].push_back([] {  // read twice after it: both gradients pass, summed
    OpCase c;
    ValueId x = c.input({4});
    ValueId i = c.b().unary(Op::identity, x);
    return c.check(c.b().binary(Op::mul, i, c.b().unary(Op::exp, i)));
  });
  // y overwritten with y + c where autograd does not see it: y's gradient
  // is all of x's (here also the finite differences'), and none goes to x.
  m[Op::straight_through].push_back([] {
    OpCase c;
    ir::Builder& b = c.b();
    const ValueId y = c.input({2, 3});
    const ValueId x = b.binary(Op::add, y, b.constant({0.5, -1, 2, 0.25, 3, -2}, b.type(y)));
    return c.check(b.binary(Op::straight_through, x, y));
  });
  m[Op::check].push_back([] {  // x's gradient, none to the condition
    OpCase c;
    ir::Builder& b = c.b();
    const ValueId x = c.input({2, 3}, {0.5, 2});
    const ValueId ok = b.binary(Op::ge, x, b.full(0.0, b.type(x)));
    return c.check(
        b.unary(Op::log, b.add(Op::check, {x, ok}, ir::Attrs{{"message", std::string("x < 0")}})));
  });
  m[Op::exp].push_back([] {
    OpCase c;
    return c.check(c.b().unary(Op::exp, c.input({4})));
  });
  m[Op::log].push_back([] {
    OpCase c;
    return c.check(c.b().unary(Op::log, c.input({4}, {0.5, 2})));
  });
  m[Op::select].push_back([] {
    OpCase c;
    ValueId k = c.input({5}), a = c.input({5}), b = c.input({5});
    ValueId cond = c.b().binary(Op::gt, k, c.b().full(0.0, c.b().type(k)));
    return c.check(c.b().add(Op::select, {cond, a, b}));
  });
  m[Op::convert].push_back([] {
    OpCase c;
    ValueId x = c.input({3});
    return c.check(c.b().convert(c.b().unary(Op::exp, c.b().convert(x, DType::f64)), DType::f32));
  });
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      m[Op::matmul].push_back([ta, tb] {
        OpCase c;
        ValueId a = c.input(ta ? Shape{4, 2} : Shape{2, 4}),
                b = c.input(tb ? Shape{3, 4} : Shape{4, 3});
        return c.check(c.b().matmul(a, b, ta, tb));
      });
  for (std::vector<int64_t> axes : {std::vector<int64_t>{0}, {1}, {0, 1}}) {
    m[Op::reduce_sum].push_back([axes] {
      OpCase c;
      return c.check(c.b().reduce(Op::reduce_sum, c.input({3, 4}), axes));
    });
    m[Op::reduce_max].push_back([axes] {
      OpCase c;
      return c.check(c.b().reduce(Op::reduce_max, c.input({3, 4}), axes));
    });
  }
  m[Op::broadcast].push_back([] {
    OpCase c;
    return c.check(c.b().broadcast_to(c.input({3}), {2, 3}));
  });
  m[Op::broadcast].push_back([] {
    OpCase c;
    ValueId x = c.input({2, 1});
    return c.check(
        c.b().add(Op::broadcast, {x},
                  ir::Attrs{{"dims", std::vector<int64_t>{0, 1}}, {"shape", Shape{2, 3}}}));
  });
  m[Op::reshape].push_back([] {
    OpCase c;
    return c.check(c.b().reshape(c.input({2, 3}), {3, 2}));
  });
  m[Op::transpose].push_back([] {
    OpCase c;
    return c.check(c.b().add(Op::transpose, {c.input({2, 3, 4})},
                             ir::Attrs{{"perm", std::vector<int64_t>{2, 0, 1}}}));
  });
  for (Op op : {Op::tanh, Op::sigmoid, Op::erf, Op::expm1})
    m[op].push_back([op] {
      OpCase c;
      return c.check(c.b().unary(op, c.input({5}, {-2, 2})));
    });
  m[Op::log1p].push_back([] {
    OpCase c;
    return c.check(c.b().unary(Op::log1p, c.input({5}, {-0.5, 2})));
  });
  for (Op op : {Op::sqrt, Op::rsqrt})
    m[op].push_back([op] {
      OpCase c;
      return c.check(c.b().unary(op, c.input({5}, {0.5, 2})));
    });
  for (Op op : {Op::sin, Op::cos})
    m[op].push_back([op] {
      OpCase c;
      return c.check(c.b().unary(op, c.input({5}, {-4, 4})));
    });
  // each inside its domain, away from its poles
  const std::pair<Op, std::pair<double, double>> ranged[] = {
      {Op::tan, {-1.2, 1.2}},      {Op::asin, {-0.9, 0.9}},    {Op::acos, {-0.9, 0.9}},
      {Op::atan, {-3, 3}},         {Op::sinh, {-2, 2}},        {Op::cosh, {-2, 2}},
      {Op::asinh, {-3, 3}},        {Op::acosh, {1.2, 3}},      {Op::atanh, {-0.9, 0.9}},
      {Op::erfinv, {-0.9, 0.9}},   {Op::lgamma, {-2.8, -2.2}}, {Op::lgamma, {0.3, 6}},
      {Op::digamma, {-1.8, -1.2}}, {Op::digamma, {0.3, 12}}};
  for (const auto& [op, range] : ranged)
    m[op].push_back([op, range] {
      OpCase c;
      return c.check(c.b().unary(op, c.input({5}, {range.first, range.second})));
    });
  // atan2 in every quadrant: a and b of both signs.
  m[Op::atan2].push_back([] {
    OpCase c;
    ValueId a = c.input({2, 3}, {-2, 2}), b = c.input({2, 3}, {-2, 2});
    return c.check(c.b().binary(Op::atan2, a, b));
  });
  // Quotients away from whole numbers, where fmod jumps: trunc 2 and -2.
  for (Range ra : {Range{2.2, 2.8}, Range{-2.8, -2.2}})
    m[Op::fmod].push_back([ra] {
      OpCase c;
      ValueId a = c.input({2, 3}, ra), b = c.input({2, 3}, {1.0, 1.05});
      return c.check(c.b().binary(Op::fmod, a, b));
    });
  m[Op::pow].push_back([] {
    OpCase c;
    ValueId a = c.input({2, 3}, {0.5, 2}), b = c.input({2, 3}, {-1.5, 2.5});
    return c.check(c.b().binary(Op::pow, a, b));
  });
  m[Op::matmul].push_back([] {  // batched, both transposed
    OpCase c;
    ValueId a = c.input({2, 3, 4, 2}), b = c.input({2, 3, 5, 4});
    return c.check(c.b().matmul(a, b, true, true));
  });
  m[Op::slice].push_back([] {
    OpCase c;
    return c.check(
        c.b().add(Op::slice, {c.input({3, 5})},
                  ir::Attrs{{"axis", int64_t(1)}, {"end", int64_t(4)}, {"start", int64_t(1)}}));
  });
  m[Op::concat].push_back([] {
    OpCase c;
    ValueId a = c.input({2, 1, 3}), b = c.input({2, 2, 3}), d = c.input({2, 3, 3});
    return c.check(c.b().add(Op::concat, {a, b, d}, ir::Attrs{{"axis", int64_t(1)}}));
  });
  auto indices = [](OpCase& c) {
    return c.b().constant({3, 0, 3, 1, 4, 3}, ir::Type{DType::i64, {2, 3}});
  };
  m[Op::gather].push_back([indices] {  // repeated indices: gradients add up
    OpCase c;
    ValueId table = c.input({5, 2, 2});
    return c.check(c.b().add(Op::gather, {table, indices(c)}));
  });
  // Through log-probabilities (x minus its log-sum-exp over the classes),
  // where torch's gradient, ctc_loss's rule, is the loss's own: padded
  // targets with a repeat, a sample shorter than the input, an empty target.
  m[Op::ctc_loss].push_back([] {
    OpCase c;
    ir::Builder& b = c.b();
    const ValueId x = c.input({5, 3, 4});
    const ValueId norm = b.unary(Op::log, b.reduce(Op::reduce_sum, b.unary(Op::exp, x), {2}));
    const ValueId lp = b.binary(Op::sub, x, b.broadcast_to(b.reshape(norm, {5, 3, 1}), {5, 3, 4}));
    const ir::Type lengths{DType::i64, {3}};
    return c.check(b.add(Op::ctc_loss,
                         {lp, b.constant({1, 1, 3, 2, 0, 0, 0, 0, 0}, ir::Type{DType::i64, {3, 3}}),
                          b.constant({5, 4, 2}, lengths), b.constant({3, 1, 0}, lengths)},
                         ir::Attrs{{"blank", int64_t(0)}}));
  });
  m[Op::scatter_add].push_back([indices] {
    OpCase c;
    ValueId src = c.input({2, 3, 4});
    return c.check(c.b().add(Op::scatter_add, {indices(c), src}, ir::Attrs{{"rows", int64_t(6)}}));
  });
  // In one process a collective's reduction is over that process alone:
  // the checks see the packing, the unpacking and the rule's own collective.
  for (const char* reduce : {"sum", "mean"}) {
    auto collective = [reduce] {
      OpCase c;
      ValueId a = c.input({2, 3}), b = c.input({4});
      ValueId start = c.b().add(
          Op::all_reduce_start, {a, b},
          ir::make_attrs<Op::all_reduce_start>({{"reduce", std::string(reduce)}, {"seq", 0}}));
      return c.check(c.b().add(Op::wait, {start}));
    };
    m[Op::all_reduce_start].push_back(collective);
    m[Op::wait].push_back(collective);
    m[Op::reduce_scatter_start].push_back([reduce] {
      OpCase c;
      ValueId a = c.input({2, 3}), b = c.input({4});
      return c.check(c.b().reduce_scatter({a, b}, reduce, 1));
    });
  }
  m[Op::all_gather_start].push_back([] {
    OpCase c;
    return c.check(c.b().all_gather(c.input({5}), 1));
  });
  using V = std::vector<int64_t>;
  struct ConvCase {
    Shape x, w;
    std::vector<int64_t> stride, padding, dilation;
    int64_t groups;
  };
  for (const ConvCase& cc : {ConvCase{{2, 3, 5, 5}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
                             ConvCase{{2, 3, 6, 5}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
                             ConvCase{{1, 2, 7, 6}, {2, 2, 2, 3}, {1, 2}, {2, 1}, {2, 2}, 1},
                             ConvCase{{2, 4, 5, 5}, {6, 2, 3, 3}, {2, 1}, {1, 1}, {1, 1}, 2}})
    m[Op::conv2d].push_back([cc] {
      OpCase c;
      ValueId x = c.input(cc.x), w = c.input(cc.w);
      return c.check(c.b().add(Op::conv2d, {x, w},
                               ir::Attrs{{"dilation", cc.dilation},
                                         {"groups", cc.groups},
                                         {"padding", cc.padding},
                                         {"stride", cc.stride}}));
    });
  // Images stored NHWC or in channel blocks (geometry.hpp): the gradients'
  // convolutions keep the layout.
  m[Op::conv2d].push_back([] {
    OpCase c;
    ValueId x = c.input({2, 5, 4, 3}), w = c.input({4, 3, 3, 3});
    return c.check(c.b().add(Op::conv2d, {x, w},
                             ir::Attrs{{"layout", std::string("nhwc")}, {"padding", V{1, 0}}}));
  });
  m[Op::conv2d].push_back([] {
    OpCase c;
    ValueId x = c.input({2, 2, 5, 5, 8}), w = c.input({8, 8, 3, 3});
    return c.check(c.b().add(
        Op::conv2d, {x, w},
        ir::Attrs{{"groups", 2}, {"layout", std::string("nChw8c")}, {"stride", V{2, 1}}}));
  });
  m[Op::conv2d_input_grad].push_back([] {
    OpCase c;
    ValueId g = c.input({2, 3, 3, 4}), w = c.input({4, 3, 3, 3});
    return c.check(
        c.b().add(Op::conv2d_input_grad, {g, w},
                  ir::Attrs{{"input_shape", V{2, 5, 5, 3}}, {"layout", std::string("nhwc")}}));
  });
  // The transposed convolution: conv2d's input gradient as a forward op,
  // its operand the shape of that convolution's output.
  for (const ConvCase& cc : {ConvCase{{2, 3, 5, 5}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
                             ConvCase{{2, 3, 6, 5}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
                             ConvCase{{2, 4, 5, 5}, {6, 2, 3, 3}, {2, 1}, {1, 1}, {1, 1}, 2}})
    m[Op::conv2d_input_grad].push_back([cc] {
      OpCase c;
      Shape y{cc.x[0], cc.w[0], 0, 0};
      for (int i = 0; i < 2; ++i)
        y[2 + i] = (cc.x[2 + i] + 2 * cc.padding[i] - cc.dilation[i] * (cc.w[2 + i] - 1) - 1) /
                       cc.stride[i] +
                   1;
      ValueId g = c.input(y), w = c.input(cc.w);
      return c.check(c.b().add(Op::conv2d_input_grad, {g, w},
                               ir::Attrs{{"dilation", cc.dilation},
                                         {"groups", cc.groups},
                                         {"input_shape", cc.x},
                                         {"padding", cc.padding},
                                         {"stride", cc.stride}}));
    });
  for (auto [k, st, pad] : {std::tuple{V{2, 2}, V{2, 2}, V{0, 0}},
                            {V{3, 3}, V{2, 2}, V{1, 1}},
                            {V{3, 2}, V{1, 2}, V{1, 0}}}) {
    m[Op::max_pool2d].push_back([=] {
      OpCase c;
      return c.check(c.b().add(Op::max_pool2d, {c.input({2, 2, 5, 6})},
                               ir::Attrs{{"kernel", k}, {"padding", pad}, {"stride", st}}));
    });
    for (int64_t include : {0, 1})
      m[Op::avg_pool2d].push_back([=] {
        OpCase c;
        return c.check(c.b().add(
            Op::avg_pool2d, {c.input({2, 2, 5, 6})},
            ir::Attrs{
                {"count_include_pad", include}, {"kernel", k}, {"padding", pad}, {"stride", st}}));
      });
  }
  return m;
}

TEST(GradcheckOps, EveryDifferentiableOpHasARuleAndPassingCases) {
  const auto all = cases();
  for (const ir::OpInfo& info : ir::kOpTable) {
    SCOPED_TRACE(std::string(info.name));
    if (!info.differentiable) {
      EXPECT_EQ(autograd::vjp_rule(info.op), nullptr) << "non-differentiable op has a VJP rule";
      EXPECT_EQ(all.count(info.op), 0u);
      continue;
    }
    EXPECT_NE(autograd::vjp_rule(info.op), nullptr) << "differentiable op without a VJP rule";
    if (info.op == Op::trigamma) {  // its rule refuses: polygamma(2) is not built
      OpCase c;
      EXPECT_THROW(
          {
            try {
              c.check(c.b().unary(Op::trigamma, c.input({5}, {0.5, 3})));
            } catch (const Error& e) {
              EXPECT_NE(std::string(e.what()).find("polygamma(2, x), is not supported"),
                        std::string::npos)
                  << e.what();
              throw;
            }
          },
          Error);
      continue;
    }
    auto it = all.find(info.op);
    ASSERT_NE(it, all.end()) << "differentiable op " << info.name << " has no gradcheck case";
    for (size_t i = 0; i < it->second.size(); ++i) {
      check::GradcheckResult r = it->second[i]();
      EXPECT_TRUE(r.ok) << "case " << i << ":\n" << r.report;
      EXPECT_GT(r.checked, 0);
    }
  }
}

TEST(GradcheckOps, DetectsAWrongGradient) {
  // The check must be able to fail: with a huge step, central differences of
  // exp are far from its derivative, and tight tolerances must say so.
  ir::Graph g;
  ir::Builder b(g);
  ValueId in = b.input(ir::InputRole::param, "x", ir::Type{DType::f32, {3}});
  ValueId loss = b.reduce(Op::reduce_sum, b.unary(Op::exp, in), {0});
  g.outputs.push_back(ir::Output{ir::OutputRole::loss, loss, ir::kNoValue, "loss"});
  check::GradcheckOptions opts;
  opts.eps = 0.5;  // a step this large makes central differences visibly wrong for exp
  opts.atol = 1e-9;
  opts.rtol = 1e-9;
  check::GradcheckResult r = autograd::gradcheck_graph(
      g, {in}, {Tensor::from_vector(std::vector<float>{0.1f, 0.2f, 0.3f}, {3})}, opts);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.report.find("x["), std::string::npos);
}

TEST(GradcheckOps, UnusedInputGetsZeroGradientAndIntegerInputsNone) {
  ir::Graph g;
  ir::Builder b(g);
  ValueId used = b.input(ir::InputRole::param, "used", ir::Type{DType::f32, {2}});
  ValueId unused = b.input(ir::InputRole::param, "unused", ir::Type{DType::f32, {2}});
  ValueId loss = b.reduce(Op::reduce_sum, b.binary(Op::mul, used, used), {0});
  g.outputs.push_back(ir::Output{ir::OutputRole::loss, loss, ir::kNoValue, "loss"});
  check::GradcheckResult r =
      autograd::gradcheck_graph(g, {used, unused},
                                {Tensor::from_vector(std::vector<float>{1, 2}, {2}),
                                 Tensor::from_vector(std::vector<float>{3, 4}, {2})},
                                {});
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_EQ(r.checked, 4);
}

}  // namespace
}  // namespace ws
