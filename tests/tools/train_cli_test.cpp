// What `train` leaves behind and shows: the metrics file (records, resumed
// runs appending, flushed as written), the progress line (plain lines with
// an ETA when piped, one rewritten line on a terminal), evaluations that
// change no bits, gpt's generated sample, and the flags' usage errors.
#include <gtest/gtest.h>

#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"

namespace {

using namespace ws::testing;
namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Every line of a metrics file, parsed.
std::vector<json> records(const std::string& path) {
  std::vector<json> out;
  for (const std::string& line : lines_of(slurp(path))) {
    EXPECT_NO_THROW(out.push_back(json::parse(line))) << line;
  }
  return out;
}

std::vector<json> of_kind(const std::vector<json>& all, const std::string& kind) {
  std::vector<json> out;
  for (const json& r : all)
    if (r.at("kind") == kind) out.push_back(r);
  return out;
}

std::vector<int64_t> steps_of(const std::vector<json>& rs) {
  std::vector<int64_t> out;
  for (const json& r : rs) out.push_back(r.at("step").get<int64_t>());
  return out;
}

TEST(TrainCli, MetricsHoldTheRunEachLoggedStepAndEachEvaluation) {
  const std::string dir = temp_dir("metrics");
  const std::string file = dir + "/m.jsonl";
  const Result r = run(
      "train --model mlp --threads 1 --steps 60 --log-every 20 --eval-every 30 --metrics " + file);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("metrics: " + file + " (written anew)"), std::string::npos) << r.out;
  const std::vector<json> all = records(file);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all[0].at("kind"), "run");
  EXPECT_EQ(all[0].at("step"), 0);
  EXPECT_EQ(all[0].at("config").at("model"), "mlp");
  const std::vector<json> train = of_kind(all, "train"), evals = of_kind(all, "eval");
  EXPECT_EQ(steps_of(train), (std::vector<int64_t>{1, 20, 40, 60}));
  for (const json& t : train) {
    EXPECT_GT(t.at("loss").get<double>(), 0) << t;
    EXPECT_GT(t.at("ms_per_step").get<double>(), 0) << t;
    EXPECT_GT(t.at("examples_per_s").get<double>(), 0) << t;
    EXPECT_NEAR(t.at("epoch").get<double>(), t.at("step").get<double>() / 468, 1e-4) << t;
    EXPECT_TRUE(t.contains("lr")) << t;
  }
  EXPECT_GT(train.front().at("loss").get<double>(), train.back().at("loss").get<double>());
  // The cosine schedule: lr falls from 0.05 towards 0.
  EXPECT_EQ(train.front().at("lr").get<double>(), 0.05);
  EXPECT_LT(train.back().at("lr").get<double>(), 0.001);
  EXPECT_EQ(steps_of(evals), (std::vector<int64_t>{30, 60}));
  for (const json& e : evals) {
    EXPECT_EQ(e.at("split"), "test");
    EXPECT_GT(e.at("accuracy").get<double>(), 0.1) << e;
    EXPECT_LE(e.at("accuracy").get<double>(), 1) << e;
    EXPECT_GT(e.at("loss").get<double>(), 0) << e;
  }
  // The last evaluation is the one printed.
  EXPECT_NE(r.out.find(fmt::format("test accuracy: {:.4f} (loss {:.4f})",
                                   evals.back().at("accuracy").get<double>(),
                                   evals.back().at("loss").get<double>())),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step 30: test loss "), std::string::npos) << r.out;
  fs::remove_all(dir);
}

TEST(TrainCli, AResumedRunAppendsToTheMetricsFile) {
  const std::string dir = temp_dir("metrics_resume");
  const std::string file = dir + "/m.jsonl", common = " --log-every 1 --metrics " + file;
  ASSERT_EQ(
      run("train --model tiny_mlp --steps 6 --stop-after 3 --save " + dir + "/ck" + common).status,
      0);
  const Result second = run("train --resume " + dir + "/ck" + common);
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_NE(second.out.find("metrics: " + file + " (appended)"), std::string::npos);
  const std::vector<json> all = records(file);
  const std::vector<json> runs = of_kind(all, "run");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].at("step"), 3);
  EXPECT_EQ(runs[1].at("resumed_from"), dir + "/ck/checkpoint-3");
  EXPECT_EQ(steps_of(of_kind(all, "train")), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  fs::remove_all(dir);
}

// Each record is flushed when written: a run killed (SIGKILL: no chance to
// clean up) keeps every whole line it wrote.
TEST(TrainCli, AKilledRunKeepsTheMetricsItLogged) {
  const std::string dir = temp_dir("metrics_kill");
  const std::string file = dir + "/m.jsonl";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string cmd = fmt::format(
        "exec {} train --model tiny_mlp --steps 100000000 --metrics {} > /dev/null", WS_CLI, file);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // The first step's record is a few dozen bytes: without the flush it
  // would sit in a buffer.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(file).find("\"kind\":\"train\",\"step\":1,") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::vector<json> all = records(file);
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[0].at("kind"), "run");
  EXPECT_EQ(all[1].at("step"), 1);
  fs::remove_all(dir);
}

// Piped (as here), each logged step is a line of its own with the time
// left; no carriage returns or terminal codes reach the log.
TEST(TrainCli, PipedProgressIsPlainLinesWithTheTimeLeft) {
  // One thread: two programs with a pool of two each on two cores wait for
  // each other at every parallel region.
  const Result r = run("train --model tiny_mlp --threads 1 --steps 200 --log-every 50");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find('\r'), std::string::npos);
  EXPECT_EQ(r.out.find('\033'), std::string::npos);
  std::vector<std::string> progress;
  for (const std::string& line : lines_of(r.out))
    if (line.starts_with("step ")) progress.push_back(line);
  ASSERT_EQ(progress.size(), 5u) << r.out;  // steps 1, 50, 100, 150, 200
  EXPECT_TRUE(progress[0].starts_with("step     1/200  loss ")) << progress[0];
  EXPECT_TRUE(progress[1].starts_with("step    50/200  loss ")) << progress[1];
  for (size_t i = 0; i < progress.size(); ++i) {
    EXPECT_NE(progress[i].find(" ms/step  "), std::string::npos) << progress[i];
    EXPECT_NE(progress[i].find(" ex/s"), std::string::npos) << progress[i];
    // The time left is known after the first step and not shown after the last.
    EXPECT_EQ(progress[i].find("  eta ") != std::string::npos, i > 0 && i < 4) << progress[i];
  }
}

// On a terminal the progress line rewrites itself in place (\r, then clear
// to the end of the line), cut to the terminal's width so that it never
// wraps, and is ended before what follows.
TEST(TrainCli, OnATerminalTheProgressLineRewritesItself) {
  int master = -1;
  winsize size{.ws_row = 24, .ws_col = 50, .ws_xpixel = 0, .ws_ypixel = 0};
  const pid_t child = ::forkpty(&master, nullptr, nullptr, &size);
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execl(WS_CLI, WS_CLI, "train", "--model", "tiny_mlp", "--threads", "1", "--steps", "120",
            "--log-every", "40", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  ::close(master);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("\rstep     1/120  loss "), std::string::npos) << out;
  EXPECT_NE(out.find("\rstep   120/120  loss "), std::string::npos) << out;
  EXPECT_NE(out.find("\033[K"), std::string::npos) << out;
  // Steps are drawn over one another, not one per line.
  EXPECT_EQ(out.find("\nstep    40/120"), std::string::npos) << out;
  const size_t last = out.rfind("\rstep ");
  ASSERT_NE(last, std::string::npos);
  EXPECT_NE(out.find("\ntrained 120 steps", last), std::string::npos) << out;
  for (size_t at = out.find('\r'); at != std::string::npos; at = out.find('\r', at + 1)) {
    const size_t clear = out.find("\033[K", at);
    if (out.compare(at, 6, "\rstep ") == 0 && clear != std::string::npos)
      EXPECT_LE(clear - at - 1, 49u) << out.substr(at, clear - at);
  }
}

// Evaluating during training reads the model in eval mode and changes
// nothing a checkpoint holds.
TEST(TrainCli, EvaluatingDuringTrainingChangesNoBits) {
  for (const char* model : {"mlp", "gpt"}) {
    SCOPED_TRACE(model);
    const std::string dir = temp_dir("eval_bits");
    const std::string common = fmt::format("train --model {} --threads 1 --steps 4", model);
    ASSERT_EQ(run(common + " --eval-every 0 --save " + dir + "/a").status, 0);
    const Result b = run(common + " --eval-every 2 --save " + dir + "/b");
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_NE(b.out.find("step 2: "), std::string::npos) << b.out;
    expect_same_checkpoint(dir + "/a/checkpoint-4", dir + "/b/checkpoint-4");
    fs::remove_all(dir);
  }
}

TEST(TrainCli, GptPrintsASeededSampleAndRecordsIt) {
  const std::string dir = temp_dir("sample");
  const std::string args = "train --model gpt --steps 2 --sample 24 --temperature 0.8 --seed 4";
  const Result a = run(args + " --metrics " + dir + "/m.jsonl");
  ASSERT_EQ(a.status, 0) << a.err;
  const size_t at = a.out.find("sample (24 bytes, temperature 0.8, seed 4):\n");
  ASSERT_NE(at, std::string::npos) << a.out;
  EXPECT_NE(a.out.find("prompt (64 bytes of the validation text):\n"), std::string::npos);
  const Result b = run(args);
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(a.out.substr(at), b.out.substr(b.out.find("sample (24 bytes"))) << "not seeded";
  const std::vector<json> samples = of_kind(records(dir + "/m.jsonl"), "sample");
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].at("step"), 2);
  EXPECT_EQ(samples[0].at("prompt").get<std::string>().size(), 64u);
  EXPECT_FALSE(samples[0].at("text").get<std::string>().empty());
  const Result greedy = run("train --model gpt --steps 1 --sample 5 --prompt 'To be'");
  ASSERT_EQ(greedy.status, 0) << greedy.err;
  EXPECT_NE(greedy.out.find("prompt (5 bytes):\nTo be\nsample (5 bytes, greedy):\n"),
            std::string::npos)
      << greedy.out;
  fs::remove_all(dir);
}

TEST(TrainCli, BadMetricsSampleAndLoggingFlagsAreUsageErrors) {
  const std::string dir = temp_dir("train_flags");
  expect_usage_error("train --metrics " + dir + "/no/such/dir/m.jsonl",
                     "--metrics " + dir + "/no/such/dir/m.jsonl: cannot write in");
  expect_usage_error("train --metrics " + dir, "--metrics " + dir + ": is a directory");
  expect_usage_error("train --log-every 0", "--log-every 0: must be at least 1");
  expect_usage_error("train --eval-every -1", "--eval-every -1: must be at least 0");
  expect_usage_error("train --model gpt --sample -1", "--sample -1: must be at least 0");
  expect_usage_error("train --model cnn --sample 10",
                     "--sample 10: only a language model generates text (gpt); --model cnn "
                     "classifies");
  expect_usage_error("train --model gpt --sample 10 --temperature -1",
                     "--temperature -1: must be a finite number >= 0");
  expect_usage_error("train --model gpt --temperature 0.5",
                     "--temperature and --prompt need --sample N");
  expect_usage_error("train --model gpt --sample 10 --prompt ''", "--prompt \"\": is empty");
  fs::remove_all(dir);
}

}  // namespace
