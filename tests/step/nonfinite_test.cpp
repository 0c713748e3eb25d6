// Non-finite values: a NaN in a batch is caught, never silently trained on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

// Every value of the model, its optimizer and the random stream, as bits
// (a NaN compares equal to itself).
std::vector<uint64_t> bits(const std::vector<double>& v) {
  std::vector<uint64_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(double));
  return b;
}
std::vector<double> state_of(const nn::Module& m, const optim::Optimizer& opt) {
  std::vector<double> all;
  auto add = [&](const nn::NamedTensors& ts) {
    for (const auto& [n, t] : ts) {
      const std::vector<double> v = t.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
  };
  add(m.named_parameters());
  add(m.named_buffers());
  add(opt.state());
  all.push_back(double(opt.step_count()));
  all.push_back(double(random_stream().offset));
  return all;
}

// The model's batch with one NaN in its first floating-point input (a
// pixel), or for gpt a NaN in its output bias.
std::vector<Tensor> poisoned_batch(const models::Spec& spec, nn::Module& model) {
  std::vector<Tensor> batch = models::random_batch(spec, 1);
  if (batch[0].dtype() == DType::f32) {
    batch[0] = batch[0].clone();
    batch[0].data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  } else {
    Tensor w = model.named_parameters().back().second;  // the output bias: every row reads it
    w.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  }
  return batch;
}

// With NonFinite::skip, a step whose batch holds a NaN leaves every
// parameter, optimizer state, buffer (BatchNorm's running statistics) and
// the random stream bit-identical, does not advance the step count, and
// says it skipped; the next good step trains as if it had not happened.
TEST(NonFinite, SkipLeavesEverythingBitIdenticalInEveryMode) {
  for (const char* name : {"mlp", "cnn", "tiny_mlp"}) {
    const models::Spec spec = models::spec(name);
    for (StepMode mode : {StepMode::interpret, StepMode::three_graph, StepMode::single_graph}) {
      SCOPED_TRACE(std::string(name) + " " + mode_name(mode));
      manual_seed(0);
      auto model = models::make(spec);
      optim::SGD opt(*model, {.lr = 0.01, .momentum = 0.9});
      TrainStep step(*model, opt, models::loss_fn(*model),
                     {.mode = mode, .on_nonfinite = NonFinite::skip});
      EXPECT_FALSE(step.run(models::random_batch(spec, 0)).skipped);
      const std::vector<double> before = state_of(*model, opt);
      const StepResult bad = step.run(poisoned_batch(spec, *model));
      EXPECT_TRUE(bad.skipped);
      EXPECT_TRUE(std::isnan(bad.loss));
      EXPECT_EQ(bad.step, 1);
      const std::vector<double> after = state_of(*model, opt);
      ASSERT_EQ(after.size(), before.size());
      for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(after[i], before[i]) << "value " << i;
      EXPECT_FALSE(step.run(models::random_batch(spec, 2)).skipped);
      EXPECT_EQ(opt.step_count(), 2);
    }
  }
}

// gpt with AdamW and dropout: a NaN in the output bias is skipped too,
// and the random stream does not move.
TEST(NonFinite, SkipCoversAdamStateAndTheRandomStream) {
  const models::Spec spec = models::spec("gpt");
  for (StepMode mode : {StepMode::three_graph, StepMode::single_graph}) {
    SCOPED_TRACE(mode_name(mode));
    manual_seed(0);
    auto model = models::make(spec);
    optim::AdamW opt(*model);
    TrainStep step(*model, opt, models::loss_fn(*model),
                   {.mode = mode, .on_nonfinite = NonFinite::skip});
    step.run(models::random_batch(spec, 0));
    const std::vector<Tensor> batch = poisoned_batch(spec, *model);
    const std::vector<double> before = state_of(*model, opt);
    EXPECT_TRUE(step.run(batch).skipped);
    EXPECT_EQ(bits(state_of(*model, opt)),
              bits(before));  // no NaN: the poisoned weight was saved above
  }
}

// By default a non-finite loss is an error naming the step.
TEST(NonFinite, ByDefaultANonFiniteLossIsAnErrorNamingTheStep) {
  const models::Spec spec = models::spec("mlp");
  for (StepMode mode : {StepMode::interpret, StepMode::single_graph}) {
    manual_seed(0);
    auto model = models::make(spec);
    optim::SGD opt(*model, {.lr = 0.01});
    TrainStep step(*model, opt, models::loss_fn(*model), {.mode = mode});
    step.run(models::random_batch(spec, 0));
    try {
      step.run(poisoned_batch(spec, *model));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("step 2: the loss is NaN"), std::string::npos)
          << e.what();
    }
    TrainStep quiet(*model, opt, models::loss_fn(*model),
                    {.mode = mode, .on_nonfinite = NonFinite::ignore});
    EXPECT_TRUE(std::isnan(quiet.run(poisoned_batch(spec, *model)).loss));
  }
}

// Hyperparameter setters and options refuse inf and NaN.
TEST(NonFinite, HyperparameterSettersRejectNonFiniteValues) {
  manual_seed(0);
  auto model = models::make(models::spec("tiny_mlp"));
  optim::SGD sgd(*model, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  auto expect_error = [](const std::function<void()>& f, const std::string& text) {
    try {
      f();
      ADD_FAILURE() << "no error; expected " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_error([&] { sgd.set_lr(inf); }, "set_lr(inf): the learning rate must be a finite number");
  expect_error([&] { sgd.set_lr(nan); }, "set_lr(nan)");
  expect_error([&] { sgd.set_momentum(inf); }, "momentum must be a finite number >= 0");
  expect_error([&] { sgd.set_weight_decay(nan); }, "weight decay must be a finite number >= 0");
  expect_error([&] { sgd.set_max_grad_norm(inf); }, "set_max_grad_norm(inf)");
  expect_error([&] { optim::Adam(*model, {.eps = inf}); }, "must be finite numbers >= 0");
  expect_error([&] { optim::SGD(*model, {.lr = 0.1, .momentum = nan}); }, "SGD: momentum nan");
  EXPECT_EQ(sgd.lr(), 0.1);
}

// relu keeps NaN, as PyTorch's does, eagerly and compiled.
TEST(NonFinite, ReluKeepsNaN) {
  const Tensor x = Tensor::from_vector(
      std::vector<float>{-1, 0, 2, std::numeric_limits<float>::quiet_NaN()}, {4});
  const std::vector<double> y = relu(x).to_vector();
  EXPECT_EQ(y[0], 0);
  EXPECT_EQ(y[1], 0);
  EXPECT_EQ(y[2], 2);
  EXPECT_TRUE(std::isnan(y[3]));
  const std::vector<double> m = maximum(x, Tensor::zeros({4})).to_vector();
  EXPECT_TRUE(std::isnan(m[3]));
}

}  // namespace
}  // namespace ws

namespace ws {
namespace {

struct LogOfInput : nn::Module {
  nn::Linear fc{4, 2};
  LogOfInput() { register_module("fc", fc); }
};

// In interpret mode, detect_anomaly names the first node that produced a
// non-finite value, with the user's source line; a step graph whose values
// are all finite runs as before.
TEST(NonFinite, AnomalyDetectionNamesTheFirstNonFiniteNodeAndItsLine) {
  manual_seed(0);
  LogOfInput m;
  optim::SGD opt(m, {.lr = 0.1});
  const int line = __LINE__ + 2;
  auto loss = [&](const std::vector<Tensor>& d) {
    return log(m.fc(d[0]) * 0.0 - 1.0).sum({0, 1});  // log(-1): NaN
  };
  TrainStep step(
      m, opt, loss,
      {.mode = StepMode::interpret, .on_nonfinite = NonFinite::ignore, .detect_anomaly = true});
  const Tensor x = Tensor::full({3, 4}, -1.0);
  try {
    step.run({x});
    ADD_FAILURE() << "no anomaly";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("anomaly: %"), std::string::npos) << msg;
    EXPECT_NE(msg.find(" = log("), std::string::npos) << msg;
    EXPECT_NE(msg.find("is NaN"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("nonfinite_test.cpp:{}", line)), std::string::npos) << msg;
  }
  EXPECT_THROW(TrainStep(m, opt, loss, {.mode = StepMode::single_graph, .detect_anomaly = true}),
               Error);
}

}  // namespace
}  // namespace ws
