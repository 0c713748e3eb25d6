// SIGINT and SIGTERM stop every phase of `train` promptly (generating a
// sample, evaluating, the first step that traces and compiles, the step
// loop), with exit status 130 or 143, one line saying which signal, in which
// phase and what was saved, and with --save a checkpoint that resumes; a
// phase that reaches no point to stop at is ended by the watchdog without
// writing anything; a second signal stops at once; the other commands stop
// at the first.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "child.hpp"
#include "cli_run.hpp"

namespace {

using namespace ws::testing;
namespace fs = std::filesystem;

// Generous: the stop itself takes a step or a second, the bound is for a
// slow, shared machine.
constexpr double kPrompt = 10;

// `dir` holds checkpoints and no temporary ones; the newest resumes (one
// more step, in a new process).
void expect_resumable(const std::string& dir, int64_t step) {
  bool found = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    EXPECT_FALSE(name.ends_with(".tmp")) << name;
    found = found || name == fmt::format("checkpoint-{}", step);
  }
  EXPECT_TRUE(found) << "no checkpoint-" << step << " in " << dir;
  const Result r = run(fmt::format("train --resume {} --steps {} --threads 1", dir, step + 1));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(fmt::format("resumed from {}/checkpoint-{} at step {}", dir, step, step)),
            std::string::npos)
      << r.out;
}

TEST(TrainSignals, DuringSamplingStopBetweenBytesAndKeepTheSavedCheckpoint) {
  const std::string dir = temp_dir("sig_sample");
  Child child("train --model gpt --steps 1 --threads 1 --sample 200000 --save " + dir + "/ck", dir);
  ASSERT_TRUE(child.wait_for("prompt (")) << child.out() << child.err();
  const Child::Ended end = child.signal_and_wait(SIGTERM);
  EXPECT_EQ(end.status, 143) << child.err();
  EXPECT_LT(end.seconds, kPrompt);
  const std::string err = child.err();
  EXPECT_EQ(err.rfind("stopped by SIGTERM while sampling", 0), 0u) << err;
  EXPECT_NE(err.find(" of 200000 bytes; saved " + dir + "/ck/checkpoint-1\n"), std::string::npos)
      << err;
  EXPECT_EQ(child.out().find("sample ("), std::string::npos) << "the sample was finished";
  expect_resumable(dir + "/ck", 1);
  fs::remove_all(dir);
}

TEST(TrainSignals, DuringEvaluationStopBetweenBatchesAndSaveTheStepDone) {
  const std::string dir = temp_dir("sig_eval");
  // cnn's evaluation of the 10000 test images takes about a second on one
  // thread: the signal comes while it runs, right after step 1's line.
  Child child(
      "train --model cnn --steps 3 --eval-every 1 --log-every 1 --threads 1 --save " + dir + "/ck",
      dir);
  ASSERT_TRUE(child.wait_for("step     1/3")) << child.out() << child.err();
  const Child::Ended end = child.signal_and_wait(SIGINT);
  EXPECT_EQ(end.status, 130) << child.err();
  EXPECT_LT(end.seconds, kPrompt);
  EXPECT_EQ(child.err(),
            "stopped by SIGINT while evaluating after step 1; saved " + dir + "/ck/checkpoint-1\n");
  EXPECT_EQ(child.out().find("test loss"), std::string::npos) << child.out();
  expect_resumable(dir + "/ck", 1);
  fs::remove_all(dir);
}

// The first step of a run traces and compiles it. A signal as soon as
// training starts stops it within a step, saving that step.
TEST(TrainSignals, AsTrainingStartsStopWithinAStep) {
  const std::string dir = temp_dir("sig_start");
  Child child("train --model gpt --steps 100000 --threads 1 --save " + dir + "/ck", dir);
  ASSERT_TRUE(child.wait_for("training gpt on")) << child.out() << child.err();
  const Child::Ended end = child.signal_and_wait(SIGTERM);
  EXPECT_EQ(end.status, 143) << child.err();
  EXPECT_LT(end.seconds, kPrompt);
  const std::string err = child.err();
  EXPECT_EQ(err.rfind("stopped by SIGTERM while running step ", 0), 0u) << err;
  const size_t at = err.find("; saved " + dir + "/ck/checkpoint-");
  ASSERT_NE(at, std::string::npos) << err;
  expect_resumable(dir + "/ck", std::stoll(err.substr(err.rfind('-') + 1)));
  fs::remove_all(dir);
}

// A step that never ends (WHOLESTEP_TEST_HANG_AT_STEP; in life: a compile or
// a kernel that hangs) cannot be saved half-updated: the watchdog ends the
// run after the grace period, writing nothing, and the checkpoint it resumed
// from is as it was.
TEST(TrainSignals, InAStepThatNeverEndsTheWatchdogStopsWithoutSaving) {
  const std::string dir = temp_dir("sig_hang");
  ASSERT_EQ(
      run("train --model gpt --steps 4 --stop-after 1 --threads 1 --save " + dir + "/ck").status,
      0);
  Child child("train --resume " + dir + "/ck --threads 1 --save " + dir + "/ck", dir, "child",
              "WHOLESTEP_TEST_HANG_AT_STEP=2");
  ASSERT_TRUE(child.wait_for("step 2 hangs")) << child.out() << child.err();
  const Child::Ended end = child.signal_and_wait(SIGTERM);
  EXPECT_EQ(end.status, 143) << child.err();
  EXPECT_GT(end.seconds, 1.5);  // the grace period, 2 s
  EXPECT_LT(end.seconds, kPrompt);
  EXPECT_EQ(child.err(),
            "stopped by SIGTERM while running step 2, the run's first: tracing and compiling it "
            "(no point to stop at within 2 s); nothing saved (" +
                dir + "/ck/checkpoint-1 is as it was)\n");
  expect_resumable(dir + "/ck", 1);
  fs::remove_all(dir);
}

// A second signal does not wait for the first to be honoured.
TEST(TrainSignals, ASecondSignalStopsAtOnce) {
  const std::string dir = temp_dir("sig_twice");
  Child child("train --model tiny_mlp --steps 10 --threads 1", dir, "child",
              "WHOLESTEP_TEST_HANG_AT_STEP=1 WHOLESTEP_STOP_GRACE=600");
  ASSERT_TRUE(child.wait_for("step 1 hangs")) << child.out() << child.err();
  ::kill(child.pid(), SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const Child::Ended end = child.signal_and_wait(SIGINT);
  EXPECT_EQ(end.status, 130) << child.err();
  EXPECT_LT(end.seconds, kPrompt);
  EXPECT_EQ(child.err(), "stopped by SIGINT again: exiting at once\n");
  fs::remove_all(dir);
}

// The step loop: the step in flight finishes, its checkpoint is saved, and
// the exit status is 128 + the signal.
TEST(TrainSignals, DuringTheStepLoopSaveTheStepDoneAndExitWith130Or143) {
  for (int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(sig);
    const std::string dir = temp_dir("sig_loop");
    Child child("train --model tiny_mlp --steps 100000000 --threads 1 --save " + dir + "/ck", dir);
    ASSERT_TRUE(child.wait_for("step     1")) << child.out() << child.err();
    const Child::Ended end = child.signal_and_wait(sig);
    EXPECT_EQ(end.status, 128 + sig) << child.err();
    EXPECT_LT(end.seconds, kPrompt);
    const std::string err = child.err();
    const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    EXPECT_EQ(err.rfind("stopped by " + name + " while running step ", 0), 0u) << err;
    const size_t at = err.find("; saved " + dir + "/ck/checkpoint-");
    ASSERT_NE(at, std::string::npos) << err;
    const int64_t step = std::stoll(err.substr(err.rfind('-') + 1));
    EXPECT_EQ(err.substr(0, at), fmt::format("stopped by {} while running step {}", name, step))
        << "the checkpoint is of the step the signal came in";
    expect_resumable(dir + "/ck", step);
    fs::remove_all(dir);
  }
}

// Commands with nothing to save stop at the first signal.
TEST(TrainSignals, OtherCommandsStopAtTheFirstSignal) {
  const std::string dir = temp_dir("sig_other");
  for (const char* args :
       {"compare --model tiny_mlp --steps 1000000 --threads 1", "check --threads 1"}) {
    SCOPED_TRACE(args);
    Child child(args, dir);
    // Piped, their output is not flushed before they end: nothing to wait
    // for but time (checking the flags or running, either stops; the check
    // of the four models takes 2.3 s on the fastest machine, gpt's alone
    // 0.8 s, which once ended before the signal came).
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    const Child::Ended end = child.signal_and_wait(SIGTERM);
    EXPECT_EQ(end.status, 143) << child.err();
    EXPECT_LT(end.seconds, kPrompt);
    const std::string err = child.err();
    EXPECT_EQ(err.rfind("stopped by SIGTERM while ", 0), 0u) << err;
    EXPECT_TRUE(err.ends_with("; nothing to save\n")) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  fs::remove_all(dir);
}

}  // namespace
