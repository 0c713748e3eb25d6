// The seam a frontend uses (step/step_source.hpp): a training step compiled
// from a forward graph built by hand, with no nn::Module, trains its own
// tensors in place like one compiled from the C++ API.
#include <cmath>

#include <gtest/gtest.h>

#include "ir/builder.hpp"
#include "step/step_source.hpp"
#include "test_util.hpp"

namespace ws {
namespace {

using ir::InputRole;
using ir::Op;
using ir::ValueId;

constexpr int64_t kBatch = 8, kFeatures = 4;

// x w + b.
ValueId predict(ir::Builder& bl, ValueId x, ValueId w, ValueId b) {
  const Shape out = {bl.type(x).shape[0], bl.type(w).shape[1]};
  return bl.binary(Op::add, bl.matmul(x, w, false, false), bl.broadcast_to(b, out));
}

// A captured graph named "joint" whose first inputs are the parameters w
// and b, bound to the given tensors.
struct LinearGraph {
  step::CapturedStep cap;
  ir::Builder bl{cap.joint.graph};
  ValueId w, b;

  LinearGraph(const Tensor& wt, const Tensor& bt) {
    cap.joint.graph.name = "joint";
    w = bl.input(InputRole::param, "w", {DType::f32, wt.shape()});
    b = bl.input(InputRole::param, "b", {DType::f32, bt.shape()});
    cap.persistent = {{"w", wt}, {"b", bt}};
    cap.sources = {{InputRole::param, 0}, {InputRole::param, 1}};
  }
  ValueId input(InputRole role, const char* name, const ir::Type& t, size_t index) {
    cap.sources.push_back({role, index});
    return bl.input(role, name, t);
  }
};

// Linear regression, loss = mean((x w + b - y)^2), trained by plain SGD
// with learning rate `lr`: its graph made with the IR builder, its
// parameters two tensors the test owns.
class LinearSource final : public step::StepSource {
 public:
  LinearSource(Tensor w, Tensor b, double lr) : w_(w), b_(b), lr_(lr) {}

  step::CapturedStep trace(const std::vector<ir::Type>& data_types, const SourceLoc&) override {
    ++traces;
    LinearGraph lg(w_, b_);
    lg.input(InputRole::hyper, "lr", {DType::f64, {}}, 0);  // read by the update
    const ValueId x = lg.input(InputRole::data, "x", data_types.at(0), 0);
    const ValueId y = lg.input(InputRole::data, "y", data_types.at(1), 1);
    lg.cap.hyper_names = {"lr"};
    ir::Builder& bl = lg.bl;
    ir::Graph& g = lg.cap.joint.graph;
    const ValueId pred = predict(bl, x, lg.w, lg.b);
    const Shape out = bl.type(pred).shape;
    const ValueId err = bl.binary(Op::sub, pred, y);
    const ValueId sum = bl.reduce(Op::reduce_sum, bl.binary(Op::mul, err, err), {0, 1});
    const ValueId loss = bl.binary(Op::div, sum, bl.scalar(double(out[0])));
    g.outputs.push_back(ir::Output{ir::OutputRole::loss, loss, ir::kNoValue, "loss"});
    lg.cap.joint.forward_end = g.size();
    return std::move(lg.cap);
  }
  std::vector<optim::UpdateGroup> update_groups() const override {
    optim::UpdateSpec s;
    s.kind = "sgd";
    s.hyper_names = {"lr"};
    return {{s, {0, 1}}};
  }
  void hyper_values(std::span<double> out) const override { out[0] = lr_; }
  void advance() override { ++steps_; }
  int64_t step_count() const override { return steps_; }

  int traces = 0;

 private:
  Tensor w_, b_;
  double lr_;
  int64_t steps_ = 0;
};

// The prediction alone, over the same tensors.
class LinearForward final : public step::ForwardSource {
 public:
  LinearForward(Tensor w, Tensor b) : w_(w), b_(b) {}

  step::CapturedStep trace(const std::vector<ir::Type>& data_types, const SourceLoc&) override {
    LinearGraph lg(w_, b_);
    const ValueId x = lg.input(InputRole::data, "x", data_types.at(0), 0);
    ir::Graph& g = lg.cap.joint.graph;
    g.outputs.push_back(
        ir::Output{ir::OutputRole::user, predict(lg.bl, x, lg.w, lg.b), ir::kNoValue, "output"});
    lg.cap.joint.forward_end = g.size();
    return std::move(lg.cap);
  }

 private:
  Tensor w_, b_;
};

struct Trained {
  std::vector<float> losses, w, b;
};

Trained train(StepMode mode, const Tensor& x, const Tensor& y, int steps, bool fuse = true) {
  Tensor w = Tensor::from_vector(std::vector<float>{0.5f, -0.25f, 0.125f, 1.0f}, {kFeatures, 1});
  Tensor b = Tensor::from_vector(std::vector<float>{0.1f}, {1});
  const float* w_storage = w.data<float>();
  auto source = std::make_unique<LinearSource>(w, b, 0.05);
  LinearSource& src = *source;
  StepOptions opts;
  opts.mode = mode;
  opts.fuse = fuse;
  TrainStep step = step::StepFactory::train_step(std::move(source), opts);
  Trained r;
  for (int i = 0; i < steps; ++i) {
    const StepResult s = step(x, y);
    EXPECT_EQ(s.step, i + 1);
    r.losses.push_back(s.loss);
  }
  EXPECT_EQ(src.traces, 1) << mode_name(mode);
  EXPECT_EQ(w.data<float>(), w_storage) << "the step updates the source's own tensor";
  for (double v : w.to_vector()) r.w.push_back(float(v));
  r.b.push_back(float(b.item()));
  return r;
}

TEST(StepSource, AHandBuiltGraphTrainsItsOwnTensorsInEveryModeWithTheSameBits) {
  std::vector<float> xv(kBatch * kFeatures), yv(kBatch);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(std::sin(0.7 * double(i)));
  for (size_t i = 0; i < yv.size(); ++i) yv[i] = float(std::cos(0.3 * double(i)));
  const Tensor x = Tensor::from_vector(xv, {kBatch, kFeatures});
  const Tensor y = Tensor::from_vector(yv, {kBatch, 1});

  const Trained ref = train(StepMode::interpret, x, y, 20);
  EXPECT_LT(ref.losses.back(), ref.losses.front());
  for (StepMode mode : {StepMode::three_graph, StepMode::single_graph}) {
    const Trained r = train(mode, x, y, 20, /*fuse=*/false);
    EXPECT_EQ(r.losses, ref.losses) << mode_name(mode);
    EXPECT_EQ(r.w, ref.w) << mode_name(mode);
    EXPECT_EQ(r.b, ref.b) << mode_name(mode);
  }
  // Fused, single_graph runs plain SGD as the gradient's product
  // accumulated into the weight (update_into_product) and the bias inside
  // the forward product (bias_into_product): the same bits too, also for
  // the [4,8] x [8,1] weight gradient, a single column.
  const Trained fused = train(StepMode::single_graph, x, y, 20);
  EXPECT_EQ(fused.losses, ref.losses);
  EXPECT_EQ(fused.w, ref.w);
  EXPECT_EQ(fused.b, ref.b);
}

// The first step's update is SGD's: w - lr * 2/N X^T (X w + b - y).
TEST(StepSource, TheFirstUpdateIsPlainSgdOnTheGraphsGradient) {
  std::vector<float> xv(kBatch * kFeatures), yv(kBatch);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(i % 5) - 2.0f;
  for (size_t i = 0; i < yv.size(); ++i) yv[i] = float(i % 3);
  const Tensor x = Tensor::from_vector(xv, {kBatch, kFeatures});
  const Tensor y = Tensor::from_vector(yv, {kBatch, 1});
  const std::vector<double> w0 = {0.5, -0.25, 0.125, 1.0};
  const double b0 = 0.1, lr = 0.05;
  std::vector<double> gw(kFeatures, 0.0);
  double gb = 0;
  for (int64_t i = 0; i < kBatch; ++i) {
    double e = b0 - yv[size_t(i)];
    for (int64_t k = 0; k < kFeatures; ++k) e += xv[size_t(i * kFeatures + k)] * w0[size_t(k)];
    for (int64_t k = 0; k < kFeatures; ++k)
      gw[size_t(k)] += 2.0 / kBatch * e * xv[size_t(i * kFeatures + k)];
    gb += 2.0 / kBatch * e;
  }
  const Trained r = train(StepMode::single_graph, x, y, 1);
  for (int64_t k = 0; k < kFeatures; ++k)
    EXPECT_NEAR(r.w[size_t(k)], w0[size_t(k)] - lr * gw[size_t(k)], 1e-6) << "w[" << k << "]";
  EXPECT_NEAR(r.b[0], b0 - lr * gb, 1e-6);
}

// A forward from a source reads the tensors the training step updates.
TEST(StepSource, AHandBuiltForwardReadsTheTrainedTensors) {
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {kFeatures, 1});
  Tensor b = Tensor::from_vector(std::vector<float>{0.5f}, {1});
  Forward f = step::StepFactory::forward(std::make_unique<LinearForward>(w, b));
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 0, 0, 0, 0, 1, 1, 1}, {2, kFeatures});
  EXPECT_EQ(f(x).to_vector(), (std::vector<double>{1.5, 9.5}));
  w.data<float>()[0] = 10;  // what a step's in-place update does
  EXPECT_EQ(f(x).to_vector(), (std::vector<double>{10.5, 9.5}));
  EXPECT_EQ(f.traces(), 1);
}

}  // namespace
}  // namespace ws
