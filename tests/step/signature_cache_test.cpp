// The compiled-signature cache TrainStep and Forward share: the least
// recently used signature is freed past the limit and traced again when it
// comes back, and tracing past the warning limit says so on stderr, in the
// same words for both.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "mlp_fixture.hpp"
#include "step/signature_cache.hpp"
#include "test_util.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

using testing::SmallMlp;

struct Made {
  int64_t rows = 0;
};

// A cache of `limits` that records each compile's first dimension.
struct CountingCache {
  explicit CountingCache(step::CacheLimits limits) : cache("thing", limits) {}
  Made& get(int64_t rows) {
    return cache.lookup({Tensor::zeros({rows, 2})}, Loc::current(),
                        [&](const std::vector<ir::Type>& types, const SourceLoc&) {
                          compiled.push_back(types[0].shape[0]);
                          return std::make_unique<Made>(Made{types[0].shape[0]});
                        });
  }
  step::SignatureCache<Made> cache;
  std::vector<int64_t> compiled;
};

TEST(SignatureCache, FreesTheLeastRecentlyUsedSignaturePastTheLimit) {
  CountingCache c({.max_cached = 2, .recompile_warning = 100});
  for (int64_t rows : {1, 2, 1, 3, 2, 1}) EXPECT_EQ(c.get(rows).rows, rows);
  // 1, 2 compiled; 1 hit; 3 frees 2; 2 frees 1; 1 frees 3.
  EXPECT_EQ(c.compiled, (std::vector<int64_t>{1, 2, 3, 2, 1}));
  EXPECT_EQ(c.cache.traces(), 5);
  EXPECT_EQ(c.cache.size(), 2u);
  EXPECT_EQ(c.cache.last()->rows, 1);
  c.cache.clear();
  EXPECT_EQ(c.cache.size(), 0u);
  EXPECT_EQ(c.cache.last(), nullptr);
}

TEST(SignatureCache, NoLimitKeepsEverySignature) {
  CountingCache c({.max_cached = 0, .recompile_warning = 100});
  for (int64_t rows : {1, 2, 3, 1, 2, 3}) c.get(rows);
  EXPECT_EQ(c.cache.traces(), 3);
  EXPECT_EQ(c.cache.size(), 3u);
}

TEST(SignatureCache, WarnsOnEveryTracePastTheLimit) {
  CountingCache c({.max_cached = 0, .recompile_warning = 2});
  ::testing::internal::CaptureStderr();
  c.get(1);
  c.get(2);
  c.get(1);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ::testing::internal::CaptureStderr();
  c.get(3);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "wholestep: warning: the thing has been traced 3 times (new input signature "
            "f32[3,2];); each new shape compiles again\n");
  ::testing::internal::CaptureStderr();
  c.get(3);
  c.get(4);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "wholestep: warning: the thing has been traced 4 times (new input signature "
            "f32[4,2];); each new shape compiles again\n");
}

TEST(SignatureCache, AnArgumentMustBeConcrete) {
  step::SignatureCache<Made> cache("thing", {});
  std::string msg = testing::error_of([&] {
    cache.lookup({Tensor::zeros({1}), Tensor()}, Loc::current(),
                 [](auto&&...) { return std::make_unique<Made>(); });
  });
  EXPECT_NE(msg.find("thing: argument 1 must be a concrete tensor"), std::string::npos) << msg;
}

// Nine batch sizes through a TrainStep and a Forward with default limits
// (8 kept, a warning past 8 traces), then the first again: both warn from
// the ninth trace on, in the same words, and trace the first size again,
// as the ninth freed it.
TEST(SignatureCache, ForwardEvictsAndWarnsLikeTrainStep) {
  ASSERT_EQ(StepOptions{}.max_cached, 8);
  ASSERT_EQ(StepOptions{}.recompile_warning, 8);
  SmallMlp run(3);
  models::Mlp* m = run.model.get();
  TrainStep step(*m, *run.opt, run.loss_fn());
  Forward fwd = compile_forward(*m, [m](const Tensor& x) { return m->forward(x); });
  manual_seed(4);
  std::vector<std::vector<Tensor>> batches;
  for (int64_t rows = 1; rows <= 9; ++rows)
    batches.push_back({randn({rows, SmallMlp::kIn}),
                       Tensor::from_vector(std::vector<int64_t>(size_t(rows), 1), {rows})});
  auto stderr_of = [](auto&& f) {
    ::testing::internal::CaptureStderr();
    f();
    return ::testing::internal::GetCapturedStderr();
  };
  auto warning = [](const char* who, int traces, const std::string& signature) {
    return fmt::format(
        "wholestep: warning: the {} has been traced {} times (new input signature {}); each new "
        "shape compiles again\n",
        who, traces, signature);
  };
  for (size_t i = 0; i < batches.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string step_err = stderr_of([&] { step.run(batches[i]); });
    const std::string fwd_err = stderr_of([&] { fwd(batches[i][0]); });
    EXPECT_EQ(step.traces(), int64_t(i) + 1);
    EXPECT_EQ(fwd.traces(), int64_t(i) + 1);
    EXPECT_EQ(step_err, i < 8 ? "" : warning("train step", 9, "f32[9,12];i64[9];"));
    EXPECT_EQ(fwd_err, i < 8 ? "" : warning("forward", 9, "f32[9,12];"));
  }
  EXPECT_EQ(step.cached(), 8u);
  const std::string step_err = stderr_of([&] { step.run(batches[0]); });
  std::vector<double> again;
  const std::string fwd_err = stderr_of([&] { again = fwd(batches[0][0]).to_vector(); });
  EXPECT_EQ(step.traces(), 10);
  EXPECT_EQ(fwd.traces(), 10);
  EXPECT_EQ(step_err, warning("train step", 10, "f32[1,12];i64[1];"));
  EXPECT_EQ(fwd_err, warning("forward", 10, "f32[1,12];"));
  // The retraced forward computes what a new one does on today's parameters.
  Forward fresh = compile_forward(*m, [m](const Tensor& x) { return m->forward(x); });
  EXPECT_EQ(again, fresh(batches[0][0]).to_vector());
  // Size 2 made room for size 1 again; the most recent sizes are still held.
  stderr_of([&] {
    step.run(batches[8]);
    fwd(batches[8][0]);
  });
  EXPECT_EQ(step.traces(), 10);
  EXPECT_EQ(fwd.traces(), 10);
}

}  // namespace
}  // namespace ws
