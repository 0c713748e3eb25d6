// User errors from the Tensor API name the op, both shapes and the user's line.
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

using testing::error_of;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A shape handed to a factory is checked before anything is allocated or
// multiplied: a negative dimension, or more bytes than 64 bits count.
TEST(TensorErrors, FactoriesRefuseNegativeAndOversizedShapes) {
  const int64_t big = int64_t(1) << 62;
  EXPECT_EQ(error_of([] {
              Tensor::zeros({2, -1});
            }),
            "Tensor::zeros: shape [2,-1] has a negative dimension");
  EXPECT_EQ(error_of([&] {
              Tensor::full({big, 2}, 1.0);
            }),
            "Tensor::full: a f32 tensor of shape [4611686018427387904,2] is too large: its size in "
            "bytes does not fit in 64 bits");
  EXPECT_EQ(Tensor::from_vector(std::vector<float>{}, {big / 4, 0}).numel(), 0);  // holds nothing
  // Empty, but the other dims' bytes do not fit: its strides would overflow.
  EXPECT_NE(error_of([&] {
              Tensor::from_vector(std::vector<float>{}, {big, 4, 0});
            }).find("is too large"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Tensor::empty({big, big}, DType::b8);
            }).find("is too large"),
            std::string::npos);
  EXPECT_NE(error_of([&] { randn({big, 2}); }).find("randn: a f64 tensor"), std::string::npos);
  EXPECT_NE(error_of([&] { iota({-3}, 0); }).find("iota: shape [-3] has a negative dimension"),
            std::string::npos);
}

TEST(TensorErrors, MatmulShapeMismatchNamesBothShapesAndLine) {
  Tensor a = Tensor::zeros({4, 3}), b = Tensor::zeros({5, 2});
  const int line = __LINE__ + 1;
  std::string msg = error_of([&] { matmul(a, b); });
  EXPECT_TRUE(has(msg, "matmul")) << msg;
  EXPECT_TRUE(has(msg, "f32[4,3]") && has(msg, "f32[5,2]")) << msg;
  EXPECT_TRUE(has(msg, "tensor_errors_test.cpp:" + std::to_string(line))) << msg;
}

// conv3d runs eagerly here (outside a trace): a volume through oneDNN or
// the reference, and the errors of a wrong rank or a per-dim option of the
// wrong length.
TEST(TensorErrors, Conv3dTakesVolumesAndNamesWhatDoesNotFit) {
  Tensor x = Tensor::full({1, 2, 3, 4, 4}, 1.0), w = Tensor::full({3, 2, 2, 3, 3}, 1.0);
  Tensor y = conv3d(x, w, {.padding = {0, 1, 1}});
  EXPECT_EQ(y.shape(), (Shape{1, 3, 2, 4, 4}));
  EXPECT_EQ(y.to_vector()[5], 2 * 2 * 3 * 3);  // depth 0, row 1, column 1: every tap inside
  std::string rank = error_of([&] { conv3d(Tensor::full({1, 2, 4, 4}, 1.0), w); });
  EXPECT_TRUE(has(rank, "must be 5-d [N, C, D, H, W], got f32[1,2,4,4]")) << rank;
  std::string conv = error_of([&] { conv2d(Tensor::full({2, 3, 5}, 1.0), w); });
  EXPECT_TRUE(has(conv, "must be 4-d [N, C, H, W] or 5-d [N, C, D, H, W]")) << conv;
  std::string pairs = error_of([&] { conv3d(x, w, {.stride = {1, 1}}); });
  EXPECT_TRUE(has(pairs, "stride must be one or three integers >= 1, got [1,1]")) << pairs;
}

TEST(TensorErrors, AddBroadcastMismatchNamesBothShapesAndLine) {
  Tensor a = Tensor::zeros({4, 3}), b = Tensor::zeros({2});
  const int line = __LINE__ + 1;
  std::string msg = error_of([&] { Tensor c = a + b; });
  EXPECT_TRUE(has(msg, "add")) << msg;
  EXPECT_TRUE(has(msg, "f32[4,3]") && has(msg, "f32[2]")) << msg;
  EXPECT_TRUE(has(msg, "tensor_errors_test.cpp:" + std::to_string(line))) << msg;
}

TEST(TensorErrors, ShapeMismatchWhileTracingNamesTheUserLine) {
  struct M : nn::Module {
    nn::Linear fc{4, 3};
    M() { register_module("fc", fc); }
  } m;
  optim::SGD opt(m, {.lr = 0.1});
  const int line = __LINE__ + 2;
  TrainStep step = compile_train_step(m, opt, [&](const Tensor& x) {
    return sum(matmul(x, m.fc.weight), {0, 1});  // [2,4] x [3,4]: needs transpose_b
  });
  std::string msg = error_of([&] { step(Tensor::zeros({2, 4})); });
  EXPECT_TRUE(has(msg, "f32[2,4]") && has(msg, "f32[3,4]")) << msg;
  EXPECT_TRUE(has(msg, "tensor_errors_test.cpp:" + std::to_string(line))) << msg;
}

TEST(TensorErrors, LinearInputWithWrongFeatureCount) {
  nn::Linear fc(4, 3);
  std::string msg = error_of([&] { fc(Tensor::zeros({2, 5})); });
  EXPECT_TRUE(has(msg, "Linear(4, 3)") && has(msg, "f32[2,5]")) << msg;
}

TEST(TensorErrors, MixedDtypesNeedAnExplicitCast) {
  std::string msg = error_of([&] { add(Tensor::zeros({2}), Tensor::zeros({2}, DType::f64)); });
  EXPECT_TRUE(has(msg, "f32[2]") && has(msg, "f64[2]")) << msg;
}

TEST(TensorErrors, OneHotLabelOutOfRange) {
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 7}, {2});
  std::string msg = error_of([&] { one_hot(y, 5); });
  EXPECT_TRUE(has(msg, "label 7") && has(msg, "[0, 5)")) << msg;
}

TEST(TensorErrors, CrossEntropyShapes) {
  std::string msg = error_of([&] {
    nn::cross_entropy(Tensor::zeros({3, 4}), Tensor::from_vector(std::vector<int64_t>{1, 2}, {2}));
  });
  EXPECT_TRUE(has(msg, "f32[3,4]") && has(msg, "i64[2]")) << msg;
}

TEST(Tensor, EagerOpsComputeWithBroadcasting) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector(std::vector<float>{10, 20, 30}, {3});
  EXPECT_EQ((a + b).to_vector(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(relu(a - 3.0).to_vector(), (std::vector<double>{0, 0, 0, 1, 2, 3}));
  EXPECT_EQ(a.sum({1}).to_vector(), (std::vector<double>{6, 15}));
  EXPECT_EQ(a.max({0}).to_vector(), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(matmul(a, a, false, true).to_vector(), (std::vector<double>{14, 32, 32, 77}));
  EXPECT_EQ(a.t().shape(), (Shape{3, 2}));
}

}  // namespace
}  // namespace ws
