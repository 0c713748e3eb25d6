// Whatever a job environment tells OpenMP, every command gives the bits a
// plain run gives and never hangs: OpenMP's dynamic adjustment, a thread
// limit below --threads, or OMP_NUM_THREADS=1 under --threads 2..4. And
// the bits do not depend on the thread count at all: 1, 2, 3 or 4 threads
// train every model to the same parameters, in every mode.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"

namespace {

using namespace ws::testing;
using nlohmann::json;

// The environments a cluster's job script may set.
const char* const kEnvs[] = {"OMP_DYNAMIC=true", "OMP_THREAD_LIMIT=1", "OMP_NUM_THREADS=1",
                             "OMP_MAX_ACTIVE_LEVELS=0"};

// Runs the program under `timeout`: a hang fails the test instead of the
// suite's time limit.
Result run_bounded(const std::string& args, const std::string& env) {
  Result r = run_command(fmt::format("{} timeout 300 {} {}", env, WS_CLI, args));
  EXPECT_NE(r.status, 124) << "timed out (a hang?): " << env << " " << args;
  return r;
}

// What a run says that is the same whatever its threads and timing: its
// output without the threads line and without compare's two columns of
// times (ms/step, speedup).
std::string numbers_of(const std::string& out) {
  std::istringstream in(out);
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("threads:", 0) == 0) continue;
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    const bool timed_row = w.size() > 3 && !w[2].empty() && w[2].back() == 'x' &&
                           w[1].find_first_not_of("0123456789.") == std::string::npos;
    if (timed_row) w.erase(w.begin() + 1, w.begin() + 3);
    for (const std::string& word : w) kept += word + " ";
    kept += "\n";
  }
  return kept;
}

// Each logged training step's loss from a metrics file, every bit.
std::vector<double> losses(const std::string& path) {
  std::vector<double> out;
  std::istringstream in(slurp(path));
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j.at("kind") == "train") out.push_back(j.at("loss").get<double>());
  }
  return out;
}

std::vector<double> train_losses(const std::string& model, const std::string& extra,
                                 const std::string& env, const std::string& dir) {
  const std::string metrics = dir + "/m.jsonl";
  const Result r = run_bounded(fmt::format("train --model {} --log-every 1 --eval-every 0 "
                                           "--metrics {} {}",
                                           model, metrics, extra),
                               env);
  EXPECT_EQ(r.status, 0) << env << " " << extra << ": " << r.err;
  return losses(metrics);
}

TEST(OmpEnv, TrainGivesThePlainRunsLossesUnderEveryEnvironmentAndThreadCount) {
  const std::string dir = temp_dir("omp_train");
  for (const char* mode : {"interpret", "three_graph", "single_graph"}) {
    const std::string flags = fmt::format("--steps 4 --mode {}", mode);
    const std::vector<double> plain = train_losses("tiny_mlp", flags + " --threads 2", "", dir);
    ASSERT_EQ(plain.size(), 4u);
    for (const char* env : kEnvs)
      for (int threads : {2, 3, 4}) {
        SCOPED_TRACE(fmt::format("{} --threads {} --mode {}", env, threads, mode));
        EXPECT_EQ(
            train_losses("tiny_mlp", fmt::format("{} --threads {}", flags, threads), env, dir),
            plain);
      }
  }
}

// The cnn's convolutions are oneDNN's: given fewer threads than their
// primitives were made for they hung or skipped work.
TEST(OmpEnv, CnnTrainsToThePlainRunsLossesWithoutHangingUnderEveryEnvironment) {
  const std::string dir = temp_dir("omp_cnn");
  const std::vector<double> plain = train_losses("cnn", "--steps 3 --threads 2", "", dir);
  ASSERT_EQ(plain.size(), 3u);
  for (const char* env : kEnvs) {
    SCOPED_TRACE(env);
    EXPECT_EQ(train_losses("cnn", "--steps 3 --threads 2", env, dir), plain);
  }
}

// One test a model: CTest runs them side by side (the four in one test
// were the sanitized suite's longest, 200 s, ending the run alone).
class OmpEnvThreads : public ::testing::TestWithParam<const char*> {};

TEST_P(OmpEnvThreads, ModelTrainsToTheSameBitsOnOneToFourThreadsInEveryMode) {
  const char* model = GetParam();
  const std::string dir = temp_dir(fmt::format("omp_threads_{}", model));
  for (const char* mode : {"three_graph", "single_graph"}) {
    const std::string flags = fmt::format("--steps 3 --mode {}", mode);
    const std::vector<double> one = train_losses(model, flags + " --threads 1", "", dir);
    ASSERT_EQ(one.size(), 3u) << model;
    for (int threads : {2, 3, 4}) {
      SCOPED_TRACE(fmt::format("{} --mode {} --threads {}", model, mode, threads));
      EXPECT_EQ(train_losses(model, fmt::format("{} --threads {}", flags, threads), "", dir), one);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryModel, OmpEnvThreads,
                         ::testing::Values("mlp", "tiny_mlp", "cnn", "gpt"),
                         [](const auto& info) { return std::string(info.param); });

// check, compare and dump print numbers that are the same run to run:
// gradients, final losses, max diffs, kernel counts, graphs, and the arena
// (whose oneDNN scratchpads are sized for the team, so the plain run is the
// one with the threads the capped run really has).
TEST(OmpEnv, CheckCompareAndDumpPrintThePlainRunsNumbersUnderEveryEnvironment) {
  for (const std::string cmd : {"check --model tiny_mlp", "compare --model tiny_mlp --steps 2",
                                "dump --model tiny_mlp --mode single_graph"}) {
    std::map<int, std::string> plain;  // by thread count
    auto plain_run = [&](int threads) -> const std::string& {
      if (!plain.count(threads)) {
        const Result r = run_bounded(fmt::format("{} --threads {}", cmd, threads), "");
        EXPECT_EQ(r.status, 0) << cmd << ": " << r.err;
        plain[threads] = numbers_of(r.out);
      }
      return plain[threads];
    };
    for (const std::string env : kEnvs)
      for (int threads : {2, 4}) {
        SCOPED_TRACE(fmt::format("{} {} --threads {}", env, cmd, threads));
        const Result r = run_bounded(fmt::format("{} --threads {}", cmd, threads), env);
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(numbers_of(r.out), plain_run(env == "OMP_THREAD_LIMIT=1" ? 1 : threads));
      }
  }
}

TEST(OmpEnv, ProfileAndGraphFinishUnderEveryEnvironment) {
  const std::string dir = temp_dir("omp_graph");
  const Result plain =
      run_bounded(fmt::format("graph --model tiny_mlp --threads 2 -o {}/plain.dot", dir), "");
  ASSERT_EQ(plain.status, 0) << plain.err;
  for (const char* env : kEnvs) {
    SCOPED_TRACE(env);
    const Result p = run_bounded("profile --model tiny_mlp --steps 2 --threads 3", env);
    EXPECT_EQ(p.status, 0) << p.err;
    const Result g =
        run_bounded(fmt::format("graph --model tiny_mlp --threads 3 -o {}/g.dot", dir), env);
    EXPECT_EQ(g.status, 0) << g.err;
    EXPECT_EQ(slurp(dir + "/g.dot"), slurp(dir + "/plain.dot"));
  }
}

TEST(OmpEnv, TheInfoLinesSayWhenTheThreadLimitCapsTheThreadsAsked) {
  const Result r =
      run_bounded("compare --model tiny_mlp --steps 1 --threads 4", "OMP_THREAD_LIMIT=1");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("threads: 1 (one OpenMP pool for oneDNN and our loops; OMP_THREAD_LIMIT "
                       "caps the 4 asked)"),
            std::string::npos)
      << r.out;
}

}  // namespace
