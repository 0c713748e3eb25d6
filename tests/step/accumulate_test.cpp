// Gradient accumulation (StepOptions::accumulate): k calls, one update from
// the sum of their gradients, in every mode.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>

#include "step/mlp_fixture.hpp"
#include "test_util.hpp"

namespace ws {
namespace {

using testing::SmallMlp;

constexpr StepMode kModes[] = {StepMode::interpret, StepMode::three_graph, StepMode::single_graph};

std::vector<std::vector<double>> values(const nn::NamedTensors& ts) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, t] : ts) out.push_back(t.to_vector());
  return out;
}

void expect_error_contains(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// `k` batches as one: a loss function over 2k tensors, the sum of each
// pair's loss.
LossFn summed_loss(models::Mlp& m, int k) {
  return [&m, k](const std::vector<Tensor>& d) {
    Tensor total = nn::cross_entropy(m.forward(d[0]), d[1]);
    for (int i = 1; i < k; ++i)
      total = total + nn::cross_entropy(m.forward(d[2 * i]), d[2 * i + 1]);
    return total;
  };
}

std::vector<Tensor> joined(const std::vector<std::vector<Tensor>>& batches, size_t from, int k) {
  std::vector<Tensor> out;
  for (int i = 0; i < k; ++i)
    for (const Tensor& t : batches[from + size_t(i)]) out.push_back(t);
  return out;
}

// accumulate=k over 3 cycles trains as one step per cycle whose loss is the
// sum of the cycle's losses (SGD with momentum and weight decay, the total
// clipped): the same parameters, momentum and gradient norms, in every mode.
TEST(Accumulate, EqualsOneStepOnTheSummedLossInEveryMode) {
  const int k = 3, cycles = 3;
  const optim::SgdOptions sgd{
      .lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .max_grad_norm = 0.5};
  const auto batches = testing::random_batches(k * cycles, 7);
  for (StepMode mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    SmallMlp acc(5, sgd), ref(5, sgd);
    TrainStep step(*acc.model, *acc.opt, acc.loss_fn(), {.mode = mode, .accumulate = k});
    TrainStep one(*ref.model, *ref.opt, summed_loss(*ref.model, k), {.mode = mode});
    for (int c = 0; c < cycles; ++c) {
      double total = 0;
      StepResult r;
      for (int i = 0; i < k; ++i) {
        r = step.run(batches[size_t(c * k + i)]);
        total += r.loss;
        EXPECT_EQ(r.updated, i == k - 1);
        EXPECT_EQ(r.accumulated, (i + 1) % k);
        EXPECT_EQ(step.accumulated(), (i + 1) % k);
        EXPECT_EQ(r.step, c + 1 - (i < k - 1));
        EXPECT_EQ(r.grad_norm.has_value(), i == k - 1);
      }
      const StepResult want = one.run(joined(batches, size_t(c * k), k));
      EXPECT_NEAR(total, want.loss, 1e-5 * std::abs(want.loss));
      ASSERT_TRUE(r.grad_norm && want.grad_norm);
      EXPECT_GT(*want.grad_norm, 0.5);  // the clipping acts
      EXPECT_NEAR(*r.grad_norm, *want.grad_norm, 1e-5 * *want.grad_norm);
    }
    EXPECT_EQ(acc.opt->step_count(), cycles);
    const nn::NamedTensors pa = acc.model->named_parameters(), pr = ref.model->named_parameters();
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_LT(max_rel_diff(pa[i].second, pr[i].second), 1e-5) << pa[i].first;
    const nn::NamedTensors sa = acc.opt->state(), sr = ref.opt->state();
    for (size_t i = 0; i < sa.size(); ++i)
      EXPECT_LT(max_rel_diff(sa[i].second, sr[i].second), 1e-4) << sa[i].first;
  }
}

// The calls before a cycle's last change no parameter or optimizer state
// (bit for bit), only the sums; the compiled modes give the interpreter's
// numbers; and the same bits on 1 and 2 threads.
TEST(Accumulate, SummingCallsUpdateNothingAndModesAgree) {
  const int k = 2;
  const auto batches = testing::random_batches(6, 8);
  std::vector<std::vector<std::vector<double>>> finals;  // [run][param]
  struct Run {
    StepMode mode;
    int threads;
  };
  const Run runs[] = {{StepMode::interpret, 2},
                      {StepMode::three_graph, 1},
                      {StepMode::three_graph, 2},
                      {StepMode::single_graph, 1},
                      {StepMode::single_graph, 2}};
  for (const Run& run : runs) {
    SCOPED_TRACE(std::string(mode_name(run.mode)) + " on " + std::to_string(run.threads));
    set_num_threads(run.threads);
    SmallMlp s(9, {.lr = 0.1, .momentum = 0.9});
    TrainStep step(*s.model, *s.opt, s.loss_fn(),
                   {.mode = run.mode, .accumulate = k, .adapt_threads = false});
    for (size_t b = 0; b < batches.size(); ++b) {
      const auto params = values(s.model->named_parameters());
      const auto state = values(s.opt->state());
      const StepResult r = step.run(batches[b]);
      if (b % k != k - 1) {
        EXPECT_FALSE(r.updated);
        EXPECT_EQ(values(s.model->named_parameters()), params) << "call " << b;
        EXPECT_EQ(values(s.opt->state()), state) << "call " << b;
        // The sums hold this call's gradients now.
        double norm = 0;
        for (const auto& [name, t] : step.accumulated_gradients())
          for (double v : t.to_vector()) norm += v * v;
        EXPECT_GT(norm, 0);
      } else {
        EXPECT_TRUE(r.updated);
        EXPECT_NE(values(s.model->named_parameters()), params) << "call " << b;
        for (const auto& [name, t] : step.accumulated_gradients())
          for (double v : t.to_vector()) ASSERT_EQ(v, 0) << name << " not reset";
      }
    }
    finals.push_back(values(s.model->named_parameters()));
  }
  set_num_threads(0);
  for (size_t r = 1; r < finals.size(); ++r)
    for (size_t p = 0; p < finals[0].size(); ++p)
      for (size_t i = 0; i < finals[0][p].size(); ++i)
        ASSERT_NEAR(finals[r][p][i], finals[0][p][i], 1e-5) << "run " << r << " param " << p;
  // Threads change no bit.
  EXPECT_EQ(finals[1], finals[2]);
  EXPECT_EQ(finals[3], finals[4]);
}

// BatchNorm's running statistics advance on every call, as each forward of
// torch's loop advances them; accumulate=2 on the cnn gives the
// interpreter's numbers.
TEST(Accumulate, BuffersAdvanceEveryCall) {
  const models::Spec spec = models::spec("cnn");
  std::vector<std::vector<std::vector<double>>> finals;
  for (StepMode mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    manual_seed(0);
    auto model = models::make(spec);
    optim::Adam opt(*model, {.lr = 1e-3});
    TrainStep step(*model, opt, models::loss_fn(*model), {.mode = mode, .accumulate = 2});
    for (int b = 0; b < 4; ++b) {
      const auto buffers = values(model->named_buffers());
      step.run(models::random_batch(spec, uint64_t(b)));
      EXPECT_NE(values(model->named_buffers()), buffers) << "call " << b;
    }
    EXPECT_EQ(opt.step_count(), 2);
    finals.push_back(values(model->named_parameters()));
    for (auto& b : values(model->named_buffers())) finals.back().push_back(b);
  }
  for (size_t r = 1; r < finals.size(); ++r)
    for (size_t p = 0; p < finals[0].size(); ++p)
      for (size_t i = 0; i < finals[0][p].size(); ++i)
        ASSERT_NEAR(finals[r][p][i], finals[0][p][i], 1e-4 * (1 + std::abs(finals[0][p][i])))
            << "run " << r << " tensor " << p << " element " << i;
}

// A short last batch (a new signature) mid-cycle sums into the same sums.
TEST(Accumulate, NewSignatureContinuesTheCycle) {
  auto batches = testing::random_batches(2, 12);
  batches[1] = {slice(batches[1][0], 0, 0, 5).clone(), slice(batches[1][1], 0, 0, 5).clone()};
  for (StepMode mode : {StepMode::three_graph, StepMode::single_graph}) {
    SCOPED_TRACE(mode_name(mode));
    SmallMlp acc(4, {.lr = 0.1}), ref(4, {.lr = 0.1});
    TrainStep step(*acc.model, *acc.opt, acc.loss_fn(), {.mode = mode, .accumulate = 2});
    TrainStep one(*ref.model, *ref.opt, summed_loss(*ref.model, 2), {.mode = mode});
    EXPECT_FALSE(step.run(batches[0]).updated);
    EXPECT_TRUE(step.run(batches[1]).updated);
    EXPECT_EQ(step.traces(), 1 + 1);
    one.run(joined(batches, 0, 2));
    const nn::NamedTensors pa = acc.model->named_parameters(), pr = ref.model->named_parameters();
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_LT(max_rel_diff(pa[i].second, pr[i].second), 1e-5) << pa[i].first;
  }
}

// NonFinite::skip: a micro-batch with a NaN writes nothing and does not
// count; the cycle completes with the next good ones, as if it had not
// been given.
TEST(Accumulate, SkippedCallDoesNotCount) {
  const auto batches = testing::random_batches(4, 13);
  std::vector<Tensor> bad = {batches[1][0].clone(), batches[1][1]};
  bad[0].data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
  for (StepMode mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    SmallMlp a(6), b(6);
    const StepOptions o{.mode = mode, .accumulate = 2, .on_nonfinite = NonFinite::skip};
    TrainStep with(*a.model, *a.opt, a.loss_fn(), o);
    TrainStep without(*b.model, *b.opt, b.loss_fn(), o);
    with.run(batches[0]);
    const auto sums = with.accumulated_gradients();
    for (int at : {1, 2}) {  // mid-cycle, then as the cycle's last call
      if (at == 2) {
        with.run(batches[1]);
        with.run(batches[2]);
      }
      const StepResult r = with.run(bad);
      EXPECT_TRUE(r.skipped);
      EXPECT_FALSE(r.updated);
      EXPECT_EQ(r.accumulated, 1);
      EXPECT_EQ(with.accumulated(), 1);
    }
    const auto later = with.accumulated_gradients();
    ASSERT_EQ(later.size(), sums.size());
    with.run(batches[3]);
    for (int i = 0; i < 4; ++i) without.run(batches[size_t(i)]);
    EXPECT_EQ(a.opt->step_count(), 2);
    EXPECT_EQ(values(a.model->named_parameters()), values(b.model->named_parameters()));
  }
}

// A call that fails before it runs (a label out of range) leaves the
// cycle, the sums and the model as they were.
TEST(Accumulate, ErrorMidCycleChangesNothing) {
  auto batches = testing::random_batches(3, 14);
  std::vector<Tensor> wrong = {batches[1][0], batches[1][1].clone()};
  wrong[1].data<int64_t>()[0] = SmallMlp::kClasses;
  SmallMlp a(2), b(2);
  TrainStep with(*a.model, *a.opt, a.loss_fn(), {.accumulate = 2});
  TrainStep without(*b.model, *b.opt, b.loss_fn(), {.accumulate = 2});
  with.run(batches[0]);
  const auto before = with.accumulated_gradients();
  EXPECT_THROW(with.run(wrong), Error);
  EXPECT_EQ(with.accumulated(), 1);
  const auto after = with.accumulated_gradients();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i].second.to_vector(), before[i].second.to_vector()) << after[i].first;
  with.run(batches[1]);
  without.run(batches[0]);
  without.run(batches[1]);
  EXPECT_EQ(values(a.model->named_parameters()), values(b.model->named_parameters()));
}

// A cycle saved mid-way and loaded into another step continues as the
// first would have.
TEST(Accumulate, SavedCycleContinues) {
  const auto batches = testing::random_batches(3, 15);
  SmallMlp a(3), b(3);
  TrainStep first(*a.model, *a.opt, a.loss_fn(), {.accumulate = 3});
  first.run(batches[0]);
  first.run(batches[1]);
  const auto saved = first.accumulated_gradients();
  const int64_t calls = first.accumulated();
  first.run(batches[2]);

  TrainStep second(*b.model, *b.opt, b.loss_fn(), {.accumulate = 3});
  expect_error_contains([&] { second.load_accumulated(3, saved); }, "accumulate=3");
  auto wrong = saved;
  wrong[0].second = Tensor::zeros({2});
  // Before the first call nothing is bound: checked when it compiles.
  second.load_accumulated(calls, wrong);
  expect_error_contains([&] { second.run(batches[2]); }, wrong[0].first);
  second.load_accumulated(0, {});
  second.run(batches[2]);  // compiles, and starts a cycle
  EXPECT_EQ(second.accumulated(), 1);
  expect_error_contains([&] { second.load_accumulated(calls, wrong); }, wrong[0].first);
  EXPECT_EQ(second.accumulated(), 1);  // nothing changed
  second.load_accumulated(calls, saved);
  EXPECT_TRUE(second.run(batches[2]).updated);
  EXPECT_EQ(values(a.model->named_parameters()), values(b.model->named_parameters()));
}

TEST(Accumulate, OptionChecked) {
  SmallMlp s(1);
  expect_error_contains([&] { TrainStep(*s.model, *s.opt, s.loss_fn(), {.accumulate = 0}); },
                        "accumulate=0");
  TrainStep step(*s.model, *s.opt, s.loss_fn(), {.accumulate = 2});
  expect_error_contains([&] { step.profile(testing::random_batches(1, 1)[0], 2); }, "accumulate=2");
}

}  // namespace
}  // namespace ws
