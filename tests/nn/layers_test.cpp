// The layers: gradients of every composite layer against finite differences
// (f64), PyTorch's semantics where they are easy to state by hand, and the
// errors for inputs of the wrong shape.
#include <cmath>

#include <gtest/gtest.h>

#include "test_util.hpp"
#include "wholestep/check.hpp"
#include "wholestep/models.hpp"

namespace ws {
namespace {

using testing::error_of;

// A module holding one layer and a fixed projection of its output, so the
// loss is a weighted sum of every output element.
template <class L>
struct Probe : nn::Module {
  template <class... A>
  explicit Probe(A&&... args) : layer(std::forward<A>(args)...) {
    register_module("layer", layer);
  }
  L layer;
};

check::GradcheckResult check_layer(nn::Module& m, std::function<Tensor(const Tensor&)> f,
                                   const Tensor& x) {
  // Weights fixed at trace time (a constant), drawn once.
  Tensor out = f(x);
  Tensor w = randn(out.shape());
  LossFn loss = [&, w](const std::vector<Tensor>& d) {
    Tensor y = f(d[0]);
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < y.dim(); ++i) axes.push_back(i);
    return sum(mul(y, w), axes);
  };
  check::GradcheckResult r = check::gradcheck(m, loss, {x}, {.max_elements = 24});
  EXPECT_GT(r.checked, 0);
  return r;
}

TEST(LayersGradcheck, Conv2dWithStridePaddingAndBias) {
  manual_seed(1);
  Probe<nn::Conv2d> m(3, 4, 3, nn::Conv2dOptions{.stride = 2, .padding = 1});
  auto r = check_layer(
      m, [&](const Tensor& x) { return m.layer(x); }, randn({2, 3, 7, 6}));
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(LayersGradcheck, BatchNorm2dTrainingAndEval) {
  manual_seed(2);
  // A convolution first, so parameter gradients flow through the
  // normalization's own derivative (batch statistics depend on them).
  struct M : nn::Module {
    nn::Conv2d conv{2, 3, 1};
    nn::BatchNorm2d bn{3};
    M() {
      register_module("conv", conv);
      register_module("bn", bn);
    }
  } m;
  m.bn.weight.copy_(randn({3}));
  m.bn.bias.copy_(randn({3}));
  Tensor x = randn({4, 2, 3, 2});
  auto f = [&](const Tensor& in) { return m.bn(m.conv(in)); };
  auto r = check_layer(m, f, x);
  EXPECT_TRUE(r.ok) << r.report;
  m.eval();
  m.bn.running_var.copy_(Tensor::from_vector(std::vector<float>{0.5f, 1.5f, 2.0f}, {3}));
  r = check_layer(m, f, x);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(LayersGradcheck, LayerNormSoftmaxLogSoftmaxGelu) {
  manual_seed(3);
  struct M : nn::Module {
    nn::Linear fc{5, 6};
    nn::LayerNorm ln{6};
    M() {
      register_module("fc", fc);
      register_module("ln", ln);
    }
  } m;
  m.ln.weight.copy_(randn({6}));
  m.ln.bias.copy_(randn({6}));
  Tensor x = randn({3, 5});
  for (int which = 0; which < 5; ++which) {
    SCOPED_TRACE(which);
    auto r = check_layer(
        m,
        [&](const Tensor& in) {
          Tensor h = m.ln(m.fc(in));
          switch (which) {
            case 0: return h;
            case 1: return nn::softmax(h, -1);
            case 2: return nn::log_softmax(h, 0);
            case 3: return nn::gelu(h, false);
            default: return nn::gelu(h, true);
          }
        },
        x);
    EXPECT_TRUE(r.ok) << r.report;
  }
}

TEST(LayersGradcheck, EmbeddingWithRepeatedIndices) {
  manual_seed(4);
  Probe<nn::Embedding> m(7, 3);
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{1, 6, 1, 0, 1, 3}, {2, 3});
  auto r = check_layer(
      m, [&](const Tensor& i) { return m.layer(i); }, idx);
  EXPECT_TRUE(r.ok) << r.report;
}

// Through log_softmax torch's CTC gradient is the loss's own: finite
// differences of the parameters agree, for each reduction.
TEST(LayersGradcheck, CtcLossThroughLogSoftmax) {
  manual_seed(6);
  Probe<nn::Linear> m(3, 4);
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{1, 1, 3, 2, 0, 0}, {2, 3});
  const Tensor input_lengths = Tensor::from_vector(std::vector<int64_t>{5, 4}, {2});
  const Tensor target_lengths = Tensor::from_vector(std::vector<int64_t>{3, 1}, {2});
  for (nn::Reduction red : {nn::Reduction::none, nn::Reduction::mean, nn::Reduction::sum}) {
    SCOPED_TRACE(int(red));
    auto r = check_layer(
        m,
        [&](const Tensor& x) {
          return nn::ctc_loss(nn::log_softmax(m.layer(x), 2), targets, input_lengths,
                              target_lengths, 0, red)
              .reshape({red == nn::Reduction::none ? 2 : 1});
        },
        randn({5, 2, 3}));
    EXPECT_TRUE(r.ok) << r.report;
  }
}

TEST(LayersGradcheck, CausalSelfAttentionAndPooling) {
  manual_seed(5);
  Probe<nn::CausalSelfAttention> m(8, 2);
  auto r = check_layer(
      m, [&](const Tensor& x) { return m.layer(x); }, randn({2, 5, 8}));
  EXPECT_TRUE(r.ok) << r.report;
  Probe<nn::Conv2d> c(2, 2, 1);
  for (int pool = 0; pool < 3; ++pool) {
    SCOPED_TRACE(pool);
    r = check_layer(
        c,
        [&](const Tensor& x) {
          Tensor h = c.layer(x);
          if (pool == 0) return max_pool2d(h, {2, 2});
          if (pool == 1) return avg_pool2d(h, {3, 3}, {2, 2}, {1, 1});
          return nn::GlobalAvgPool2d()(h);
        },
        randn({2, 2, 6, 5}));
    EXPECT_TRUE(r.ok) << r.report;
  }
}

TEST(Layers, CausalMaskHidesTheFuture) {
  Tensor s = Tensor::zeros({3, 3});
  Tensor p = nn::softmax(nn::causal_mask(s), -1);
  std::vector<double> v = p.to_vector();
  const double expect[9] = {1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(v[size_t(i)], expect[i], 1e-6) << i;
}

TEST(Layers, BatchNormUpdatesRunningStatisticsAsPyTorch) {
  nn::BatchNorm2d bn(1, 1e-5, 0.1);
  // One channel, values 1..4: mean 2.5, biased var 1.25, unbiased 5/3.
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 1, 1, 2});
  Tensor y = bn(x);
  EXPECT_NEAR(bn.running_mean.item(), 0.25, 1e-6);
  EXPECT_NEAR(bn.running_var.item(), 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(y.to_vector()[0], (1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-5);
  bn.eval();
  Tensor z = bn(x);  // running statistics, unchanged by eval
  EXPECT_NEAR(z.to_vector()[0], (1 - 0.25) / std::sqrt(bn.running_var.item() + 1e-5), 1e-5);
  EXPECT_NEAR(bn.running_mean.item(), 0.25, 1e-6);
}

TEST(Layers, DropoutKeepsExpectedFractionScaledAndIsOffInEval) {
  manual_seed(9);
  nn::Dropout d(0.25);
  Tensor y = d(Tensor::full({4000}, 1.0));
  int64_t kept = 0;
  for (double v : y.to_vector()) {
    EXPECT_TRUE(v == 0 || std::abs(v - 1 / 0.75) < 1e-6) << v;
    kept += v != 0;
  }
  EXPECT_NEAR(double(kept) / 4000, 0.75, 0.03);
  d.eval();
  EXPECT_EQ(d(Tensor::full({4}, 1.0)).to_vector(), std::vector<double>(4, 1.0));
}

TEST(LayersErrors, ConvolutionInputOfWrongRankOrChannels) {
  nn::Conv2d conv(3, 8, 3);
  std::string rank = error_of([&] { conv(Tensor::zeros({2, 3, 5})); });
  EXPECT_NE(rank.find("Conv2d(3, 8, 3): expected input [N, 3, H, W], got f32[2,3,5]"),
            std::string::npos)
      << rank;
  EXPECT_NE(rank.find("layers_test.cpp"), std::string::npos) << rank;
  std::string channels = error_of([&] { conv(Tensor::zeros({2, 1, 5, 5})); });
  EXPECT_NE(channels.find("got f32[2,1,5,5]"), std::string::npos) << channels;
  // The functional form names the channel mismatch.
  std::string f = error_of([&] { conv2d(Tensor::zeros({1, 2, 5, 5}), conv.weight); });
  EXPECT_NE(f.find("has 2 channels, but the weight f32[8,3,3,3] expects 3"), std::string::npos)
      << f;
  std::string small = error_of([&] { conv2d(Tensor::zeros({1, 3, 2, 2}), conv.weight); });
  EXPECT_NE(small.find("larger than the padded input"), std::string::npos) << small;
}

TEST(Layers, TakeReadsPositionsAlongADimInTheirOrder) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  using V = std::vector<double>;
  EXPECT_EQ(nn::take(x, 1, {2, 0, 0}).to_vector(), (V{3, 1, 1, 6, 4, 4}));
  EXPECT_EQ(nn::take(x, -2, {1}).to_vector(), (V{4, 5, 6}));
  EXPECT_EQ(nn::take(x, 1, {}).shape(), (Shape{2, 0}));
  std::string dim = error_of([&] { nn::take(x, 2, {0}); });
  EXPECT_NE(dim.find("take: dim 2 is not a dim of f32[2,3]"), std::string::npos) << dim;
  EXPECT_NE(dim.find("layers_test.cpp"), std::string::npos) << dim;
  std::string position = error_of([&] { nn::take(x, 1, {0, 3}); });
  EXPECT_NE(position.find("take: position 3 is outside dim 1 of f32[2,3] (size 3)"),
            std::string::npos)
      << position;
}

TEST(LayersGradcheck, TakeSumsIntoThePositionsRead) {
  manual_seed(6);
  Probe<nn::Linear> m(4, 4);
  auto r = check_layer(
      m,
      [&](const Tensor& x) {
        return nn::take(m.layer(x), 1, {3, 1, 1, 0, 3});
      },
      randn({3, 4}));
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(Layers, PadEveryModeAsTorch) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {1, 3});
  auto padded = [&](std::vector<int64_t> pads, nn::PadMode mode) {
    return nn::pad(x, pads, mode, 9).to_vector();
  };
  using V = std::vector<double>;
  EXPECT_EQ(padded({2, 1}, nn::PadMode::constant), (V{9, 9, 1, 2, 3, 9}));
  EXPECT_EQ(padded({-1, 1}, nn::PadMode::constant), (V{2, 3, 9}));  // a negative pad crops
  EXPECT_EQ(padded({2, 1}, nn::PadMode::reflect), (V{3, 2, 1, 2, 3, 2}));
  EXPECT_EQ(padded({2, 1}, nn::PadMode::replicate), (V{1, 1, 1, 2, 3, 3}));
  EXPECT_EQ(padded({2, 3}, nn::PadMode::circular), (V{2, 3, 1, 2, 3, 1, 2, 3}));
  // Both dims, the last one's pair first.
  EXPECT_EQ(nn::pad(x, {0, 1, 1, 0}, nn::PadMode::constant).to_vector(),
            (V{0, 0, 0, 0, 1, 2, 3, 0}));
}

TEST(Layers, InterpolateAsTorch) {
  Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3}, {1, 1, 4});
  using V = std::vector<double>;
  // Nearest: source index floor(o * in / out); with a scale factor, 1 / scale.
  EXPECT_EQ(nn::interpolate(x, {6}).to_vector(), (V{0, 0, 1, 2, 2, 3}));
  EXPECT_EQ(nn::interpolate(x, {2}, nn::ResizeMode::nearest, false, {0.6}).to_vector(), (V{0, 1}));
  // Linear, half-pixel centers (clamped at 0) and align_corners.
  EXPECT_EQ(nn::interpolate(x, {8}, nn::ResizeMode::linear).to_vector(),
            (V{0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3}));
  EXPECT_EQ(nn::interpolate(x, {7}, nn::ResizeMode::linear, true).to_vector(),
            (V{0, 0.5, 1, 1.5, 2, 2.5, 3}));
  // Cubic: halfway, weights (-3, 19, 19, -3) / 32; a tap past the edge
  // reads the edge (position 0.5 reads 0, 0, 1, 2).
  EXPECT_EQ(nn::interpolate(x, {7}, nn::ResizeMode::cubic, true).to_vector(),
            (V{0, 0.40625, 1, 1.5, 2, 2.59375, 3}));
  // Two spatial dims, each its own matrix.
  Tensor img = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2});
  EXPECT_EQ(nn::interpolate(img, {3, 3}, nn::ResizeMode::linear, true).to_vector(),
            (V{1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}));
  std::string sizes = error_of([&] { nn::interpolate(img, {3}); });
  EXPECT_NE(sizes.find("needs one size (and one scale, if any) per spatial dim, got sizes [3]"),
            std::string::npos)
      << sizes;
}

TEST(LayersGradcheck, PadReflectAndReplicateSumIntoThePositionsRead) {
  manual_seed(5);
  Probe<nn::Linear> m(4, 4);
  for (nn::PadMode mode : {nn::PadMode::reflect, nn::PadMode::replicate, nn::PadMode::circular}) {
    auto r = check_layer(
        m,
        [&](const Tensor& x) {
          return nn::pad(m.layer(x), {2, 1, 1, 2}, mode);
        },
        randn({3, 4}));
    EXPECT_TRUE(r.ok) << r.report;
  }
}

TEST(LayersErrors, PadOutOfItsModesLimits) {
  Tensor x = Tensor::zeros({2, 3});
  std::string reflect = error_of([&] { nn::pad(x, {3, 0}, nn::PadMode::reflect); });
  EXPECT_NE(
      reflect.find("pad: reflect padding (3, 0) of dim 1 of f32[2,3]: each must be at most 2"),
      std::string::npos)
      << reflect;
  EXPECT_NE(reflect.find("layers_test.cpp"), std::string::npos) << reflect;
  std::string circular = error_of([&] { nn::pad(x, {0, 4}, nn::PadMode::circular); });
  EXPECT_NE(circular.find("each must be at most 3"), std::string::npos) << circular;
  std::string odd = error_of([&] { nn::pad(x, {1, 1, 1}); });
  EXPECT_NE(odd.find("pad: [1, 1, 1] is not (before, after) pairs"), std::string::npos) << odd;
  std::string crop = error_of([&] { nn::pad(x, {-2, -2}); });
  EXPECT_NE(crop.find("pad: [-2, -2] crops all 3 elements of dim 1 of f32[2,3]"), std::string::npos)
      << crop;
  std::string mode = error_of([&] { nn::pad_mode("mirror"); });
  EXPECT_NE(mode.find("mode 'mirror' is not constant, reflect, replicate or circular"),
            std::string::npos)
      << mode;
}

// A label outside [0, C) fails naming the range and the first such
// position, below zero and at C alike (either would read another row's
// log-probability).
TEST(LayersErrors, CrossEntropyLabelOutOfRangeEagerly) {
  const Tensor logits = Tensor::from_vector(std::vector<float>(12, 0.5f), {3, 4});
  for (int64_t bad : {int64_t(4), int64_t(-1)}) {
    const Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 3, bad}, {3});
    std::string msg = error_of([&] { nn::cross_entropy(logits, labels); });
    EXPECT_NE(msg.find("nll_loss: a label is out of range [0, 4) (first at position [2]"),
              std::string::npos)
        << msg;
  }
}

TEST(LayersErrors, EmbeddingIndexOutOfRangeEagerly) {
  nn::Embedding e(4, 2);
  std::string msg = error_of([&] { e(Tensor::from_vector(std::vector<int64_t>{0, 4}, {2})); });
  EXPECT_NE(msg.find("index 4 at position 1 is out of range [0, 4)"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ws
