// The command line's data parallelism: `train`, `compare`, `profile` and
// `dump` (every command that compiles a step) with --data-parallel in one process (a group of one,
// the same bits as without), and as 2 ranks under mpirun (skipped in a build without MPI): one
// rank's output, the ranks agreeing on the checks, one rank's error ending the job within seconds
// and naming the rank, checkpoints saved by rank 0 and resumed at the same or another world size,
// compare's JSON.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"

namespace {

using namespace ws::testing;
using nlohmann::json;

// `args` run as 2 ranks (or as rank 0 `args` and rank 1 `args1`: mpirun's
// MPMD form), bounded by `timeout` so that a hang fails the test.
Result mpirun(const std::string& args, const std::string& args1 = "") {
  const std::string run0 = fmt::format("{} {}", WS_CLI, args);
  const std::string ranks =
      args1.empty() ? "-np 2 " + run0 : fmt::format("-np 1 {} : -np 1 {} {}", run0, WS_CLI, args1);
  Result r = run_command(
      fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 {} "
                  "--oversubscribe --bind-to none {}",
                  WS_MPIRUN, ranks));
  EXPECT_NE(r.status, 124) << "timed out (a hang?): " << args;
  return r;
}

#define REQUIRE_MPI()                 \
  if (std::string(WS_MPIRUN).empty()) \
  GTEST_SKIP() << "this build has no MPI (install libopenmpi-dev and openmpi-bin)"

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- one process ------------------------------------------------------------

TEST(DistCli, DataParallelAloneIsAGroupOfOneWithTheSameBits) {
  const std::string dir = temp_dir("dp_alone");
  for (const char* model : {"mlp", "gpt"}) {
    SCOPED_TRACE(model);
    const std::string args =
        fmt::format("train --model {} --steps 3 --threads 1 --eval-every 0 --save {}/", model, dir);
    const Result plain = run(args + model + "_plain");
    ASSERT_EQ(plain.status, 0) << plain.err;
    const Result dp = run(args + model + "_dp --data-parallel");
    ASSERT_EQ(dp.status, 0) << dp.err;
    EXPECT_NE(dp.out.find("(1 rank x "), std::string::npos) << dp.out;
    expect_same_checkpoint(fmt::format("{}/{}_plain/checkpoint-3", dir, model),
                           fmt::format("{}/{}_dp/checkpoint-3", dir, model));
  }
  std::filesystem::remove_all(dir);
}

TEST(DistCli, DataParallelFlagsAreChecked) {
  expect_usage_error("train --bucket-bytes 2", "--bucket-bytes needs --data-parallel");
  expect_usage_error("compare --data-parallel --bucket-bytes 0",
                     "--bucket-bytes 0: must be an integer from 1 to");
  expect_usage_error("profile --data-parallel --bucket-bytes -1", "--bucket-bytes -1: must be");
  expect_usage_error("train --zero", "--zero needs --data-parallel");
  expect_usage_error("dump --sync-batch-norm", "--sync-batch-norm needs --data-parallel");
  expect_usage_error("check --comm-progress wait", "--comm-progress needs --data-parallel");
  expect_usage_error("compare --zero-rows", "--zero-rows needs --data-parallel");
  expect_usage_error("compare --modes three_graph,fast", "--modes three_graph,fast: unknown");
  expect_usage_error("compare --modes single_graph,single_graph", "single_graph is named twice");
  expect_usage_error("compare --modes ,", "--modes ,: unknown step mode ''");
  expect_usage_error("compare --json /no/such/dir/rows.json", "--json /no/such/dir/rows.json");
}

TEST(DistCli, CompareWritesItsRowsAsJson) {
  const std::string dir = temp_dir("compare_json");
  const Result r = run(fmt::format(
      "compare --model tiny_mlp --modes single_graph,interpret --unfused-rows --steps 2 "
      "--warmup 1 --threads 1 --json {}/rows.json",
      dir));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("vs single_graph after the last step"), std::string::npos) << r.out;
  const json j = json::parse(slurp(dir + "/rows.json"));
  EXPECT_EQ(j.at("world_size"), 1);
  EXPECT_EQ(j.at("data_parallel"), false);
  EXPECT_EQ(j.at("batch"), j.at("global_batch"));
  ASSERT_EQ(j.at("rows").size(), 3u);
  EXPECT_EQ(j["rows"][0].at("mode"), "single_graph");
  EXPECT_EQ(j["rows"][1].at("mode"), "interpret");
  EXPECT_EQ(j["rows"][2].at("mode"), "single_graph (unfused)");
  for (const json& row : j.at("rows")) {
    EXPECT_GT(row.at("ms_per_step").get<double>(), 0) << row;
    EXPECT_NEAR(row.at("examples_per_s").get<double>(),
                j.at("global_batch").get<double>() * 1000 / row.at("ms_per_step").get<double>(),
                1e-6 * row.at("examples_per_s").get<double>());
    EXPECT_EQ(row.at("comm_bytes"), 0) << row;
    EXPECT_TRUE(row.at("hidden_share").is_null()) << row;
    EXPECT_GT(row.at("counters").at("kernels").get<int64_t>(), 0) << row;
  }
  EXPECT_EQ(j["rows"][0].at("max_rel_diff"), 0.0);
  std::filesystem::remove_all(dir);
}

// ---- 2 ranks under mpirun ---------------------------------------------------

TEST(DistCli, TwoRanksTrainWithOneRanksOutput) {
  REQUIRE_MPI();
  const Result r = mpirun("train --model mlp --steps 5 --threads 1 --data-parallel");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "training mlp on Fashion-MNIST: 5 steps, batch 256 (2 ranks x 128)"), 1u)
      << r.out;
  EXPECT_EQ(count(r.out, "cpu:"), 1u) << r.out;
  EXPECT_EQ(count(r.out, "trained 5 steps"), 1u) << r.out;
  EXPECT_EQ(count(r.out, "test accuracy"), 1u) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST(DistCli, TwoRanksWithoutDataParallelAreAUsageError) {
  REQUIRE_MPI();
  const Result r = mpirun("train --model mlp --steps 5 --threads 1");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("this process is one of 2 that mpirun started, but --data-parallel is not "
                       "given: each would train alone on the same data; add --data-parallel (or "
                       "run one process)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << r.out;
  // A command without data parallelism refuses to run as several.
  const Result info = mpirun("info");
  EXPECT_EQ(info.status, 2) << info.err;
  EXPECT_NE(info.err.find("`wholestep info` runs in one process"), std::string::npos) << info.err;
}

TEST(DistCli, ACheckThatFailsOnOneRankStopsEveryRankWithTheRankNamed) {
  REQUIRE_MPI();
  const std::string args = "train --model mlp --steps 5 --threads 1 --data-parallel";
  const Result r = mpirun(args, args + " --data /no/such/dir");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("error: rank 1 of 2: --data /no/such/dir: no such directory"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << r.out;
}

TEST(DistCli, ARankThatFailsEndsTheJobWithinSecondsNamingIt) {
  REQUIRE_MPI();
  // Rank 1 reads a corrupt data set (it exists: the checks pass) while rank
  // 0 goes on into the first step's collectives.
  const std::string dir = temp_dir("dp_corrupt");
  for (const char* file : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    std::ofstream(dir + "/" + file) << "not an IDX file";
  const std::string args = "train --model mlp --steps 50 --threads 1 --data-parallel";
  auto t0 = std::chrono::steady_clock::now();
  Result r = mpirun(args, args + " --data " + dir);
  EXPECT_LT(seconds_since(t0), 10);
  EXPECT_NE(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("rank 1 of 2: error: --data " + dir), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("trained"), std::string::npos) << r.out;

  // Rank 0 alone writes --metrics, and here cannot.
  t0 = std::chrono::steady_clock::now();
  r = mpirun(args + " --metrics /dev/full");
  EXPECT_LT(seconds_since(t0), 10);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("rank 0 of 2: error: --metrics /dev/full: cannot write"), std::string::npos)
      << r.err;
  std::filesystem::remove_all(dir);
}

TEST(DistCli, RankZeroSavesAndEveryWorldSizeResumes) {
  REQUIRE_MPI();
  const std::string dir = temp_dir("dp_resume");
  const std::string args =
      fmt::format("train --model mlp --steps 6 --threads 1 --eval-every 0 --data-parallel");
  Result r =
      mpirun(fmt::format("{} --stop-after 3 --save {}/a --metrics {}/m.jsonl", args, dir, dir));
  ASSERT_EQ(r.status, 0) << r.err;
  const json state = json::parse(slurp(dir + "/a/checkpoint-3/trainer_state.json"));
  EXPECT_EQ(state.at("user").at("data").at("world_size"), 2);
  EXPECT_EQ(json::parse(slurp(dir + "/m.jsonl").substr(0, slurp(dir + "/m.jsonl").find('\n')))
                .at("world_size"),
            2);
  // The same world size, from its own --save directory: the bits of a run
  // never stopped.
  r = mpirun(fmt::format("train --resume {0}/a --save {0}/a --threads 1 --data-parallel", dir));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("the checkpoint was saved by"), std::string::npos) << r.out;
  r = mpirun(fmt::format("{} --save {}/b", args, dir));
  ASSERT_EQ(r.status, 0) << r.err;
  expect_same_checkpoint(dir + "/a/checkpoint-6", dir + "/b/checkpoint-6");
  // Another world size: allowed, saying what changes.
  r = run(fmt::format("train --resume {}/a/checkpoint-3 --threads 1 --stop-after 1", dir));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("the checkpoint was saved by 2 processes, this run has 1: the global batch "
                       "is now 128 examples (was 256)"),
            std::string::npos)
      << r.out;
  std::filesystem::remove_all(dir);
}

TEST(DistCli, ZeroSavesTheWholeOptimizerStateAndResumesToTheBitsOfPlainDataParallel) {
  REQUIRE_MPI();
  const std::string dir = temp_dir("zero_resume");
  const std::string args =
      "train --model mlp --optimizer adamw --steps 6 --threads 1 "
      "--eval-every 0 --data-parallel";
  Result r = mpirun(fmt::format("{} --zero --stop-after 3 --save {}/a", args, dir));
  ASSERT_EQ(r.status, 0) << r.err;
  r = mpirun(
      fmt::format("train --resume {0}/a --save {0}/a --threads 1 --data-parallel --zero", dir));
  ASSERT_EQ(r.status, 0) << r.err;
  r = mpirun(fmt::format("{} --save {}/b", args, dir));
  ASSERT_EQ(r.status, 0) << r.err;
  expect_same_checkpoint(dir + "/a/checkpoint-6", dir + "/b/checkpoint-6");
  std::filesystem::remove_all(dir);
}

// Every command that compiles a step takes the step options: dump prints
// the step of one rank, with the collectives that reduce its gradients
// (ZeRO: reduce-scatters and all-gathers).
TEST(DistCli, TwoRanksDumpPrintsTheStepsCollectives) {
  REQUIRE_MPI();
  const std::string args = "dump --model tiny_mlp --threads 1 --data-parallel";
  Result r = mpirun(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_GE(count(r.out, "all_reduce_start"), 2u) << r.out;
  EXPECT_EQ(count(r.out, "reduce_scatter_start"), 0u) << r.out;
  EXPECT_EQ(count(r.out, "graph step"), 1u) << "rank 0 alone prints";
  r = mpirun(args + " --zero --mode three_graph");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_GE(count(r.out, "reduce_scatter_start"), 1u) << r.out;
  EXPECT_GE(count(r.out, "all_gather_start"), 1u) << r.out;
}

TEST(DistCli, TwoRanksCompareWritesTheCommunicationOfEachRow) {
  REQUIRE_MPI();
  const std::string dir = temp_dir("dp_compare");
  const Result r = mpirun(fmt::format(
      "compare --model mlp --modes three_graph,single_graph --steps 2 --warmup 1 --threads 1 "
      "--data-parallel --json {}/rows.json",
      dir));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "comm MB/step"), 1u) << r.out;
  const json j = json::parse(slurp(dir + "/rows.json"));
  EXPECT_EQ(j.at("world_size"), 2);
  EXPECT_EQ(j.at("global_batch"), 2 * j.at("batch").get<int64_t>());
  ASSERT_EQ(j.at("rows").size(), 2u);
  EXPECT_EQ(j["rows"][0].at("mode"), "three_graph");
  EXPECT_EQ(j["rows"][1].at("mode"), "single_graph");
  for (const json& row : j.at("rows")) {
    EXPECT_GT(row.at("comm_bytes").get<int64_t>(), 0) << row;
    EXPECT_GT(row.at("counters").at("collectives").get<int64_t>(), 0) << row;
    EXPECT_GE(row.at("comm_wait_ms").get<double>(), 0) << row;
    EXPECT_TRUE(row.at("hidden_share").is_number()) << row;
    EXPECT_EQ(row.at("max_rel_diff"), 0.0) << row;
  }
  std::filesystem::remove_all(dir);
}

TEST(DistCli, TwoRanksProfileTracesEachCollective) {
  REQUIRE_MPI();
  const std::string dir = temp_dir("dp_profile");
  const Result r = mpirun(fmt::format(
      "profile --model mlp --steps 2 --threads 1 --data-parallel --trace {}/t.json", dir));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "communication, global batch 256 (2 ranks x 128):"), 1u) << r.out;
  const json events = json::parse(slurp(dir + "/t.json")).at("traceEvents");
  int collectives = 0;
  for (const json& e : events)
    if (e.at("ph") == "X" && e.at("args").at("program").get<std::string>().starts_with("comm")) {
      ++collectives;
      EXPECT_GE(e.at("dur").get<double>(), 0) << e;
    }
  EXPECT_GT(collectives, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
