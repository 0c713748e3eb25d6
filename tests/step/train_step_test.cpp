// The compiled training step: modes agree, updates are in place, hypers are
// inputs, errors are clear.
#include <map>

#include <omp.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "exec/threads.hpp"
#include "step/mlp_fixture.hpp"
#include "test_util.hpp"
#include "wholestep/models.hpp"

namespace ws {
namespace {

using testing::SmallMlp;

struct Config {
  StepMode mode;
  bool aliasing;
};

const Config kConfigs[] = {{StepMode::interpret, true},
                           {StepMode::three_graph, true},
                           {StepMode::single_graph, true},
                           {StepMode::three_graph, false},
                           {StepMode::single_graph, false}};

void expect_modes_agree(optim::SgdOptions sgd) {
  auto batches = testing::random_batches(20, 11);
  std::vector<std::unique_ptr<SmallMlp>> runs;
  for (const Config& c : kConfigs) {
    runs.push_back(std::make_unique<SmallMlp>(3, sgd));
    TrainStep step(*runs.back()->model, *runs.back()->opt, runs.back()->loss_fn(),
                   {.mode = c.mode, .aliasing = c.aliasing});
    for (auto& b : batches) step.run(b);
    EXPECT_EQ(runs.back()->opt->step_count(), 20);
  }
  const SmallMlp& ref = *runs[0];
  for (size_t r = 1; r < runs.size(); ++r) {
    SCOPED_TRACE(std::string(mode_name(kConfigs[r].mode)) +
                 (kConfigs[r].aliasing ? "" : " no alias"));
    auto ps = runs[r]->model->named_parameters(), pr = ref.model->named_parameters();
    ASSERT_EQ(ps.size(), pr.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_LT(max_rel_diff(ps[i].second, pr[i].second), 1e-5) << ps[i].first;
      EXPECT_GT(max_rel_diff(ps[i].second, SmallMlp(3, sgd).model->named_parameters()[i].second),
                1e-3)
          << ps[i].first << " did not train";
    }
    auto ss = runs[r]->opt->state(), sr = ref.opt->state();
    ASSERT_EQ(ss.size(), sr.size());
    for (size_t i = 0; i < ss.size(); ++i)
      EXPECT_LT(max_rel_diff(ss[i].second, sr[i].second), 1e-5) << ss[i].first;
  }
}

TEST(TrainStep, ModesAgreeAfter20MomentumSteps) {
  expect_modes_agree({.lr = 0.1, .momentum = 0.9});
}

TEST(TrainStep, ModesAgreeWithDampeningWeightDecayAndNesterov) {
  expect_modes_agree({.lr = 0.05, .momentum = 0.8, .dampening = 0.1, .weight_decay = 0.01});
  expect_modes_agree({.lr = 0.05, .momentum = 0.8, .weight_decay = 0.01, .nesterov = true});
}

TEST(TrainStep, SgdMatchesPyTorchFormulaOnOneParameter) {
  // loss = sum(w * x) has gradient x, so the update can be written by hand.
  struct Lin : nn::Module {
    Tensor w = register_parameter("w", Tensor::from_vector(std::vector<float>{1, -2, 3}, {3}));
  } m;
  optim::SGD opt(m, {.lr = 0.5, .momentum = 0.9, .dampening = 0.25, .weight_decay = 0.1});
  TrainStep step =
      compile_train_step(m, opt, [&](const Tensor& x) { return sum(mul(m.w, x), {0}); });
  std::vector<double> w = {1, -2, 3}, buf = {0, 0, 0}, x = {0.5, 1, -1};
  for (int s = 0; s < 3; ++s) {
    step(Tensor::from_vector(std::vector<float>{0.5f, 1.f, -1.f}, {3}));
    for (int i = 0; i < 3; ++i) {
      double d = x[size_t(i)] + 0.1 * w[size_t(i)];
      buf[size_t(i)] = s == 0 ? d : 0.9 * buf[size_t(i)] + 0.75 * d;
      w[size_t(i)] -= 0.5 * buf[size_t(i)];
    }
    std::vector<double> got = m.w.to_vector();
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[size_t(i)], w[size_t(i)], 1e-5) << "step " << s;
  }
}

TEST(TrainStep, InPlaceUpdatesKeepStorageAndCopyNothing) {
  for (StepMode mode : {StepMode::single_graph, StepMode::three_graph}) {
    SmallMlp run(5);
    std::vector<const void*> ptrs;
    std::vector<Tensor> before;
    for (auto& [n, p] : run.model->named_parameters()) {
      ptrs.push_back(p.data<float>());
      before.push_back(p.clone());
    }
    TrainStep step(*run.model, *run.opt, run.loss_fn(), {.mode = mode});
    for (auto& b : testing::random_batches(3, 1)) {
      StepResult r = step.run(b);
      EXPECT_EQ(r.counters.bytes_copied, 0);
    }
    auto params = run.model->named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].second.data<float>(), ptrs[i]) << params[i].first;
      EXPECT_GT(max_rel_diff(params[i].second, before[i]), 0) << params[i].first << " unchanged";
    }
  }
}

TEST(TrainStep, WithoutAliasingCopiesTwiceTheUpdatedState) {
  for (StepMode mode : {StepMode::single_graph, StepMode::three_graph}) {
    SmallMlp run(5);
    int64_t state_bytes = 0;
    for (auto& [n, p] : run.model->named_parameters()) state_bytes += int64_t(p.nbytes());
    for (auto& [n, s] : run.opt->state()) state_bytes += int64_t(s.nbytes());
    TrainStep step(*run.model, *run.opt, run.loss_fn(), {.mode = mode, .aliasing = false});
    StepResult r = step.run(testing::random_batches(1, 1)[0]);
    EXPECT_EQ(r.counters.bytes_copied, 2 * state_bytes);
  }
}

TEST(TrainStep, CountersReportGraphsAndKernels) {
  SmallMlp a(1), b(1);
  TrainStep one(*a.model, *a.opt, a.loss_fn(), {.mode = StepMode::single_graph});
  TrainStep three(*b.model, *b.opt, b.loss_fn(), {.mode = StepMode::three_graph});
  auto batch = testing::random_batches(1, 2)[0];
  StepResult r1 = one.run(batch), r3 = three.run(batch);
  EXPECT_EQ(r1.counters.graphs, 1);
  EXPECT_EQ(r3.counters.graphs, 3);
  EXPECT_GT(r1.counters.kernels, 0);
  EXPECT_EQ(r1.counters.interface_bytes, 0);
  EXPECT_GT(r3.counters.interface_bytes, 0);
  EXPECT_DOUBLE_EQ(r1.loss, r3.loss);
}

TEST(TrainStep, ChangingTheLearningRateDoesNotTraceAgain) {
  SmallMlp run(2);
  TrainStep step(*run.model, *run.opt, run.loss_fn());
  auto batches = testing::random_batches(3, 4);
  step.run(batches[0]);
  EXPECT_EQ(step.traces(), 1);
  run.opt->set_lr(0);
  run.opt->set_momentum(0.5);
  std::vector<Tensor> before;
  for (auto& [n, p] : run.model->named_parameters()) before.push_back(p.clone());
  step.run(batches[1]);  // lr 0: parameters must not move
  auto params = run.model->named_parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(max_rel_diff(params[i].second, before[i]), 0);
  run.opt->set_lr(0.2);
  step.run(batches[2]);
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_GT(max_rel_diff(params[i].second, before[i]), 0);
  EXPECT_EQ(step.traces(), 1);
}

TEST(TrainStep, NewInputShapeTracesAgain) {
  SmallMlp run(2);
  TrainStep step(*run.model, *run.opt, run.loss_fn());
  step.run(testing::random_batches(1, 4)[0]);
  step(randn({3, SmallMlp::kIn}), Tensor::from_vector(std::vector<int64_t>{0, 1, 2}, {3}));
  step.run(testing::random_batches(1, 5)[0]);
  EXPECT_EQ(step.traces(), 2);
}

TEST(TrainStep, LossMustBeAScalar) {
  SmallMlp run(2);
  models::Mlp* m = run.model.get();
  TrainStep step(*run.model, *run.opt,
                 [m](const std::vector<Tensor>& d) { return m->forward(d[0]); });
  std::string msg = testing::error_of([&] { step.run(testing::random_batches(1, 4)[0]); });
  EXPECT_NE(msg.find("0-d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[8,5]"), std::string::npos) << msg;
}

// A step's oneDNN primitives are made for a team of their own; inside a
// user's parallel region they would run on one thread and skip work.
TEST(TrainStep, ARunInsideAnOpenMpParallelRegionIsAnError) {
  SmallMlp run(2);
  models::Mlp* m = run.model.get();
  TrainStep step(*run.model, *run.opt, [m](const std::vector<Tensor>& d) {
    return nn::cross_entropy(m->forward(d[0]), d[1]);
  });
  const std::vector<Tensor> batch = testing::random_batches(1, 4)[0];
  std::string msg;
#pragma omp parallel num_threads(2)
  {
#pragma omp master
    msg = testing::error_of([&] { step.run(batch); });
  }
  EXPECT_NE(msg.find("a training step was called inside an OpenMP parallel region"),
            std::string::npos)
      << msg;
  EXPECT_NO_THROW(step.run(batch));  // outside the region it runs
}

TEST(TrainStep, ReadingATracedValueNamesTheLine) {
  SmallMlp run(2);
  models::Mlp* m = run.model.get();
  const int line = __LINE__ + 2;
  TrainStep step(*run.model, *run.opt, [m](const std::vector<Tensor>& d) {
    double v = m->forward(d[0]).sum({0, 1}).item();
    return d[0].sum({0, 1}) * v;
  });
  std::string msg = testing::error_of([&] { step.run(testing::random_batches(1, 4)[0]); });
  EXPECT_NE(msg.find("item()"), std::string::npos) << msg;
  EXPECT_NE(msg.find("traced"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train_step_test.cpp:" + std::to_string(line)), std::string::npos) << msg;
}

TEST(TrainStep, MomentumCannotBeSwitchedOnAfterConstruction) {
  SmallMlp run(2, {.lr = 0.1});
  std::string msg = testing::error_of([&] { run.opt->set_momentum(0.9); });
  EXPECT_NE(msg.find("momentum"), std::string::npos) << msg;
}

// Two flops per multiply-add of every product: forward, weight gradients,
// and input gradients of every layer but the first (the data needs none).
TEST(TrainStep, FlopsCountEveryProductOnceInEveryMode) {
  const int64_t b = SmallMlp::kBatch, in = SmallMlp::kIn, c = SmallMlp::kClasses;
  const int64_t macs = b * (in * 16 + 16 * 16 + 16 * c);
  const int64_t want = 2 * (3 * macs - b * in * 16);
  for (const Config& cfg : kConfigs) {
    SmallMlp run(1);
    TrainStep step(*run.model, *run.opt, run.loss_fn(), {.mode = cfg.mode});
    EXPECT_EQ(step.run(testing::random_batches(1, 2)[0]).counters.flops, want)
        << mode_name(cfg.mode);
  }
}

TEST(TrainStep, ProfileTimesEveryKernelAndTheProductsAlone) {
  SmallMlp run(1);
  TrainStep step(*run.model, *run.opt, run.loss_fn());
  auto batch = testing::random_batches(1, 2)[0];
  const int64_t kernels = step.run(batch).counters.kernels;
  const std::vector<double> before = run.model->named_parameters()[0].second.to_vector();
  const StepProfile p = step.profile(batch, 3);
  EXPECT_EQ(p.steps, 3);
  EXPECT_EQ(run.opt->step_count(), 4);  // profiled steps are real steps
  EXPECT_NE(run.model->named_parameters()[0].second.to_vector(), before);
  int64_t calls = 0;
  bool products = false;
  for (const KernelTime& k : p.kernels) {
    calls += k.calls;
    products = products || k.name == "dnnl_matmul";
    EXPECT_GE(k.ms, 0) << k.name;
  }
  EXPECT_EQ(calls, 3 * kernels);
  EXPECT_TRUE(products);
  for (size_t i = 1; i < p.kernels.size(); ++i) EXPECT_GE(p.kernels[i - 1].ms, p.kernels[i].ms);
  EXPECT_GT(p.step_ms, 0);
  EXPECT_GT(p.contraction_ms, 0);
  double kernel_ms = 0, program_ms = 0;
  for (const KernelTime& k : p.kernels) kernel_ms += k.ms / 3;
  ASSERT_EQ(p.program_ms.size(), 1u);
  EXPECT_EQ(p.program_ms[0].first, "step");
  for (const auto& [name, ms] : p.program_ms) program_ms += ms;
  EXPECT_NEAR(program_ms, kernel_ms, 1e-9 + 1e-9 * kernel_ms);
}

// The layout conversions a step makes, counted by the profile: with its
// images stored NHWC, oneDNN's convolutions read and write them where they
// lie and reorder only their weights (in, and the weight gradients out),
// and the graph transposes nothing (the input image has one channel: NCHW
// and NHWC are one order); stored NCHW, every convolution also reorders its
// images to its blocks and back.
TEST(TrainStep, ProfileCountsTheLayoutConversionsAStepMakes) {
  const models::Spec spec = models::spec("cnn");
  for (ImageLayouts layouts : {ImageLayouts::channels_last, ImageLayouts::nchw}) {
    SCOPED_TRACE(layouts == ImageLayouts::nchw ? "nchw" : "channels_last");
    manual_seed(3);
    auto model = models::make(spec);
    optim::SGD opt(*model, {.lr = 0.01, .momentum = 0.9});
    TrainStep step(*model, opt, models::loss_fn(*model), {.layouts = layouts});
    const std::vector<Tensor> batch = models::random_batch(spec, 0);
    step.run(batch);
    const StepProfile p = step.profile(batch, 1);
    EXPECT_GE(p.weight_reorders, 3) << "the three convolutions' weights";
    EXPECT_EQ(p.transposes, 0);
    if (layouts == ImageLayouts::channels_last)
      EXPECT_EQ(p.other_reorders, 0);
    else
      EXPECT_GE(p.other_reorders, 3);
  }
}

// A floor or a profile pins the team it runs on; it leaves the OpenMP
// runtime's thread count as it found it, whatever team the chooser had left
// (torch reads that count as its own: a floor left one thread there after
// the chooser had chosen one, and a benchmark's eager side and every later
// step, following torch's count, ran on one thread).
TEST(TrainStep, FloorAndProfileLeaveTheOpenMpThreadCountAsTheyFoundIt) {
  const int pool = exec::num_threads();
  exec::set_num_threads(2);
  SmallMlp run(1);
  TrainStep step(*run.model, *run.opt, run.loss_fn());
  auto batch = testing::random_batches(1, 2)[0];
  step.run(batch);
  for (bool floor : {true, false}) {
    SCOPED_TRACE(floor ? "floor" : "profile");
    exec::set_team(1);       // as the chooser leaves it, having chosen one thread
    omp_set_num_threads(2);  // torch's count, as the step's caller restores it
    if (floor)
      step.floor(batch, 1);
    else
      step.profile(batch, 1);
    EXPECT_EQ(omp_get_max_threads(), 2);
  }
  exec::set_num_threads(pool);
}

TEST(TrainStep, ProfileSplitsKernelTimeByProgramInThreeGraphMode) {
  SmallMlp run(1);
  TrainStep step(*run.model, *run.opt, run.loss_fn(), {.mode = StepMode::three_graph});
  auto batch = testing::random_batches(1, 2)[0];
  step.run(batch);
  const StepProfile p = step.profile(batch, 2);
  std::vector<std::string> names;
  for (const auto& [name, ms] : p.program_ms) {
    names.push_back(name);
    EXPECT_GT(ms, 0) << name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"forward", "backward", "optimizer"}));
}

TEST(TrainStep, ChromeTraceHasOneSlicePerKernelInOrderOnEachProgramsTrack) {
  for (StepMode mode : {StepMode::single_graph, StepMode::three_graph}) {
    SmallMlp run(1);
    TrainStep step(*run.model, *run.opt, run.loss_fn(), {.mode = mode});
    auto batch = testing::random_batches(1, 2)[0];
    const StepResult r = step.run(batch);
    const StepProfile p = step.profile(batch, 2);
    ASSERT_EQ(int64_t(p.last_step.size()), r.counters.kernels);
    const nlohmann::json trace = nlohmann::json::parse(chrome_trace(p));
    std::map<int, std::string> tracks;
    double end = 0;
    int slices = 0;
    bool user_line = false;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.at("ph") == "M") {
        tracks[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
        continue;
      }
      ASSERT_EQ(e.at("ph"), "X");
      const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
      EXPECT_GE(ts, end - 1e-6) << "kernels of one step run one after another";
      EXPECT_GE(dur, 0);
      end = ts + dur;
      EXPECT_EQ(tracks.at(e.at("tid").get<int>()), e.at("args").at("program"));
      user_line = user_line ||
                  e.at("name").get<std::string>().find("mlp_fixture.hpp:") != std::string::npos;
      ++slices;
    }
    EXPECT_EQ(slices, r.counters.kernels);
    EXPECT_EQ(int64_t(tracks.size()), r.counters.graphs) << mode_name(mode);
    EXPECT_TRUE(user_line) << "no slice names the loss function's source line";
  }
}

TEST(TrainStep, ProfileRejectsTheInterpreterAndNoSteps) {
  SmallMlp run(1);
  auto batch = testing::random_batches(1, 2)[0];
  TrainStep interp(*run.model, *run.opt, run.loss_fn(), {.mode = StepMode::interpret});
  std::string msg = testing::error_of([&] { interp.profile(batch, 2); });
  EXPECT_NE(msg.find("interpret mode runs no kernels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train_step_test.cpp"), std::string::npos) << msg;
  TrainStep step(*run.model, *run.opt, run.loss_fn());
  msg = testing::error_of([&] { step.profile(batch, 0); });
  EXPECT_NE(msg.find("steps must be at least 1, got 0"), std::string::npos) << msg;
}

TEST(TrainStep, FloorTimesEachContractionOfTheStepAloneAndTrainsNothing) {
  for (StepMode mode : {StepMode::single_graph, StepMode::three_graph}) {
    SmallMlp run(1);
    TrainStep step(*run.model, *run.opt, run.loss_fn(), {.mode = mode});
    auto batch = testing::random_batches(1, 2)[0];
    const StepResult r = step.run(batch);
    const std::vector<double> before = run.model->named_parameters()[0].second.to_vector();
    const StepFloor f = step.floor(batch, 3);
    EXPECT_EQ(run.opt->step_count(), 1) << mode_name(mode);
    EXPECT_EQ(run.model->named_parameters()[0].second.to_vector(), before) << mode_name(mode);
    ASSERT_FALSE(f.parts.empty());
    int64_t flops = 0;
    double ms = 0;
    for (const FloorPart& p : f.parts) {
      flops += p.flops;
      ms += p.ms;
      EXPECT_GT(p.calls, 0) << p.what;
      EXPECT_GT(p.ms, 0) << p.what;
      EXPECT_EQ(p.what.rfind("matmul [", 0), 0u) << p.what;
      EXPECT_EQ(p.impl.find("reorders"), std::string::npos) << p.what << ": " << p.impl;
    }
    EXPECT_EQ(flops, r.counters.flops) << mode_name(mode) << ": the step's contractions, each once";
    EXPECT_NEAR(f.ms, ms, 1e-12 * ms);
    for (size_t i = 1; i < f.parts.size(); ++i) EXPECT_GE(f.parts[i - 1].ms, f.parts[i].ms);
  }
}

TEST(TrainStep, FloorRejectsTheInterpreterAndNoRounds) {
  SmallMlp run(1);
  auto batch = testing::random_batches(1, 2)[0];
  TrainStep interp(*run.model, *run.opt, run.loss_fn(), {.mode = StepMode::interpret});
  std::string msg = testing::error_of([&] { interp.floor(batch, 2); });
  EXPECT_NE(msg.find("interpret mode compiles no graphs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train_step_test.cpp"), std::string::npos) << msg;
  TrainStep step(*run.model, *run.opt, run.loss_fn());
  msg = testing::error_of([&] { step.floor(batch, 0); });
  EXPECT_NE(msg.find("rounds must be at least 1, got 0"), std::string::npos) << msg;
}

TEST(TrainStep, BackendInfoNamesCpuThreadsAndEachBackendsInstructionSet) {
  const std::string info = backend_info();
  for (const char* want : {"cpu: ", "threads: ", "oneDNN ", "ISA ", "loop kernels: "})
    EXPECT_NE(info.find(want), std::string::npos) << want << " in\n" << info;
  const int before = num_threads();
  set_num_threads(1);
  EXPECT_NE(backend_info().find("threads: 1 "), std::string::npos) << backend_info();
  set_num_threads(before);
}

}  // namespace
}  // namespace ws

namespace ws {
namespace {

// The compile cache keeps at most max_cached signatures, freeing the least
// recently used; a freed one compiles again when it comes back, and gives
// the same result as a step that never evicted. clear_cache frees them all.
TEST(TrainStepCache, KeepsTheMostRecentSignaturesAndFreesTheRest) {
  models::Spec spec = models::spec("tiny_mlp");
  auto batch_of = [&](int64_t rows) {
    models::Spec s = spec;
    s.batch = rows;
    return models::random_batch(s, uint64_t(rows));
  };
  manual_seed(0);
  auto model = models::make(spec);
  optim::SGD opt(*model, {.lr = 0.01});
  TrainStep step(*model, opt, models::loss_fn(*model), {.max_cached = 2});
  manual_seed(0);
  auto model2 = models::make(spec);
  optim::SGD opt2(*model2, {.lr = 0.01});
  TrainStep unbounded(*model2, opt2, models::loss_fn(*model2), {.max_cached = 0});
  for (int64_t rows : {4, 8, 4, 16, 8, 4}) {
    SCOPED_TRACE(rows);
    EXPECT_EQ(step.run(batch_of(rows)).loss, unbounded.run(batch_of(rows)).loss);
    EXPECT_LE(step.cached(), 2u);
  }
  // 4, 8 compiled; 4 hit; 16 evicts 8; 8 evicts 4; 4 evicts 16.
  EXPECT_EQ(step.traces(), 5);
  EXPECT_EQ(unbounded.traces(), 3);
  EXPECT_EQ(unbounded.cached(), 3u);
  step.clear_cache();
  EXPECT_EQ(step.cached(), 0u);
  EXPECT_EQ(step.graphs_text(), "");
  step.run(batch_of(4));
  EXPECT_EQ(step.traces(), 6);
  EXPECT_THROW(TrainStep(*model, opt, models::loss_fn(*model), {.max_cached = -1}), Error);
}

}  // namespace
}  // namespace ws
