// The edges of what the command line takes: numbers past their flag's
// range, empty values, resumed runs whose end is before, at or after the
// checkpoint, hand-edited checkpoints, data that cannot be read, a metrics
// file that cannot be written and memory that runs out. Each is one line
// on stderr and the exit status docs/cli.md gives it, never a silent clamp
// or "a bug in wholestep".
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"

namespace {

using namespace ws::testing;
namespace fs = std::filesystem;
using nlohmann::json;

// Every file under `dir` (its path relative to `dir`) with its bytes.
std::map<std::string, std::string> files_under(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out[fs::relative(e.path(), dir).string()] = e.is_regular_file() ? slurp(e.path()) : "<dir>";
  return out;
}

// A tiny_mlp run of `steps` steps saved into `dir` (checkpoint-<steps>).
void save_tiny_run(const std::string& dir, int steps) {
  const Result r =
      run(fmt::format("train --model tiny_mlp --threads 1 --steps {} --save {}", steps, dir));
  ASSERT_EQ(r.status, 0) << r.err;
}

TEST(TrainCli, StopAfterPastTheEndOfAResumedRunTrainsToTheEnd) {
  const std::string dir = temp_dir("stop_after_max");
  save_tiny_run(dir, 2);
  // start + stop_after overflowed: "stopped after step -9223372036854775807 of 5".
  const Result r = run("train --threads 1 --resume " + dir + " --steps 5 --stop-after " +
                       "9223372036854775807 --save " + dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from " + dir + "/checkpoint-2 at step 2"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("trained 3 steps"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("stopped after"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir + "/checkpoint-5")) << r.out;
  fs::remove_all(dir);
}

// CLI11 alone clamps 2^63 to 2^63 - 1, wraps -1 into an unsigned flag and
// reads 010 as octal; every integer flag of every command refuses a value
// its type cannot hold, naming the flag, the value and the range.
TEST(Cli, IntegersOutsideTheirFlagsRangeAreUsageErrors) {
  const std::string i64 = "must be an integer from 1 to 9223372036854775807";
  expect_usage_error("train --steps 9223372036854775808",
                     "--steps 9223372036854775808: out of range; " + i64);
  expect_usage_error("train --steps -9223372036854775809",
                     "--steps -9223372036854775809: out of range; " + i64);
  expect_usage_error("train --seed 18446744073709551616",
                     "--seed 18446744073709551616: out of range; must be an integer from 0 to "
                     "18446744073709551615");
  expect_usage_error("train --seed -1",
                     "--seed -1: out of range; must be an integer from 0 to 18446744073709551615");
  expect_usage_error("train --threads 2147483648",
                     "--threads 2147483648: out of range; must be an integer from 0 to 2147483647");
  expect_usage_error("train --epochs 2147483648",
                     "--epochs 2147483648: out of range; must be an integer from 1 to 2147483647");
  expect_usage_error("train --keep 2147483648", "--keep 2147483648: out of range");
  for (const char* flag :
       {"--save-every", "--stop-after", "--log-every", "--eval-every", "--sample"})
    expect_usage_error(fmt::format("train --{} 99999999999999999999", flag + 2),
                       fmt::format("{} 99999999999999999999: out of range", flag));
  for (const char* command : {"compare", "profile", "check"})
    expect_usage_error(fmt::format("{} --steps 9223372036854775808", command),
                       "--steps 9223372036854775808: out of range; " + i64);
  expect_usage_error("compare --warmup 9223372036854775808",
                     "--warmup 9223372036854775808: out of range; must be an integer from 0 to");
  expect_usage_error("profile --top 2147483648", "--top 2147483648: out of range");
  expect_usage_error("check --batch 9223372036854775808",
                     "--batch 9223372036854775808: out of range");
  expect_usage_error("check --elements 9223372036854775808",
                     "--elements 9223372036854775808: out of range");
  expect_usage_error("dump --seed 18446744073709551616",
                     "--seed 18446744073709551616: out of range");
  expect_usage_error("graph --threads -2147483649", "--threads -2147483649: out of range");
  expect_usage_error("train --threads 2000000000", "--threads 2000000000: must be at most 1024");
  // What the commands make of a count must fit too.
  expect_usage_error("compare --steps 9223372036854775807 --warmup 3",
                     "--steps 9223372036854775807 with --warmup 3: more than");
  expect_usage_error("profile --steps 2147483648",
                     "--steps 2147483648: must be at most 2147483647");
  // Decimal only.
  expect_usage_error("train --steps 0x10", "--steps 0x10: is not an integer");
  expect_usage_error("train --steps 1.5", "--steps 1.5: is not an integer");
  const Result octal = run("train --model tiny_mlp --threads 1 --steps 010");
  ASSERT_EQ(octal.status, 0) << octal.err;
  EXPECT_NE(octal.out.find("trained 10 steps"), std::string::npos) << octal.out;
}

TEST(Cli, AnEmptyValueIsAUsageErrorNotNone) {
  expect_usage_error("train --model tiny_mlp --resume ''",
                     "--resume \"\": is empty; give a checkpoint, or a directory of them");
  expect_usage_error("train --model tiny_mlp --save ''", "--save \"\": is empty");
  expect_usage_error("train --model tiny_mlp --metrics ''", "--metrics \"\": is empty");
  expect_usage_error("train --data ''", "--data \"\": is empty");
  expect_usage_error("train --model gpt --text ''", "--text \"\": is empty");
  expect_usage_error("profile --trace ''", "--trace \"\": is empty");
  expect_usage_error("dump --dot ''", "--dot \"\": is empty");
  expect_usage_error("graph -o ''", "--output \"\": is empty");
  expect_usage_error("compare --model ''", "--model \"\": is empty");
}

// An end before the checkpoint trained "-2 steps"; at it, nothing is
// trained and the run is still evaluated.
TEST(TrainCli, AResumedRunMustEndAtOrAfterItsCheckpoint) {
  const std::string dir = temp_dir("resume_end");
  save_tiny_run(dir, 4);
  const auto before = files_under(dir);
  expect_usage_error("train --resume " + dir + " --steps 2",
                     "--steps 2: the checkpoint " + dir +
                         "/checkpoint-4 is at step 4; a resumed run goes on from there, so its "
                         "end must be step 4 or later");
  EXPECT_EQ(files_under(dir), before);
  const Result at = run("train --threads 1 --resume " + dir + " --steps 4");
  ASSERT_EQ(at.status, 0) << at.err;
  EXPECT_NE(at.out.find("nothing to train: the checkpoint is at step 4, the end of the run"),
            std::string::npos)
      << at.out;
  EXPECT_EQ(at.out.find("trained "), std::string::npos) << at.out;
  fs::remove_all(dir);
}

// --epochs was ignored by a resumed run: now it sets where the run ends
// (unless --steps does), and a model without epochs refuses it.
TEST(TrainCli, EpochsSetTheEndOfAResumedRun) {
  const std::string dir = temp_dir("resume_epochs");
  fs::create_directories(dir + "/data");
  write_fashion_mnist(dir + "/data", 256);  // mlp's batch 128: 2 steps an epoch
  const std::string data = " --threads 1 --data " + dir + "/data";
  ASSERT_EQ(run("train --model mlp --steps 3 --save " + dir + "/ck" + data).status, 0);
  const Result longer =
      run("train --resume " + dir + "/ck --epochs 3 --save " + dir + "/ck" + data);
  ASSERT_EQ(longer.status, 0) << longer.err;
  EXPECT_NE(longer.out.find(": 6 steps, batch 128"), std::string::npos) << longer.out;
  EXPECT_NE(longer.out.find("trained 3 steps"), std::string::npos) << longer.out;
  expect_usage_error(
      "train --resume " + dir + "/ck --epochs 1" + data,
      "--epochs 1 (2 steps): the checkpoint " + dir + "/ck/checkpoint-6 is at step 6");
  // --steps still overrides --epochs.
  const Result steps = run("train --resume " + dir + "/ck --epochs 1 --steps 7" + data);
  ASSERT_EQ(steps.status, 0) << steps.err;
  EXPECT_NE(steps.out.find(": 7 steps, batch 128"), std::string::npos) << steps.out;
  expect_usage_error("train --model gpt --epochs 2",
                     "--epochs 2: only the Fashion-MNIST models (mlp, cnn) have epochs");
  fs::remove_all(dir);
}

// A Fashion-MNIST file or a text that cannot be read is a data set that
// cannot work: status 2, naming the file and what is wrong.
TEST(Cli, DataThatCannotBeReadIsAUsageError) {
  const std::string dir = temp_dir("bad_data");
  fs::create_directories(dir + "/empty");
  expect_usage_error("train --model mlp --data " + dir + "/empty",
                     "--data " + dir + "/empty: read_idx: " + dir +
                         "/empty/train-images-idx3-ubyte.gz: no such file");
  expect_usage_error("compare --model mlp --data " + dir + "/empty",
                     "/empty/train-images-idx3-ubyte.gz: no such file");
  // A gzip file cut off in the middle.
  fs::create_directories(dir + "/cut");
  write_fashion_mnist(dir + "/cut", 256);
  const Result gz =
      run_command(fmt::format("gzip -c {}/cut/train-images-idx3-ubyte.gz | head -c 100 > "
                              "{}/cut/x.gz && mv {}/cut/x.gz {}/cut/train-images-idx3-ubyte.gz",
                              dir, dir, dir, dir));
  ASSERT_EQ(gz.status, 0) << gz.err;
  expect_usage_error("train --model mlp --data " + dir + "/cut",
                     "/cut/train-images-idx3-ubyte.gz: truncated body");
  // The test set, read before training starts.
  fs::create_directories(dir + "/test");
  write_fashion_mnist(dir + "/test", 256);
  std::ofstream(dir + "/test/t10k-labels-idx1-ubyte.gz", std::ios::binary) << std::string(3, '\0');
  expect_usage_error("train --model mlp --data " + dir + "/test",
                     "/test/t10k-labels-idx1-ubyte.gz: truncated header");
  // Texts.
  std::ofstream(dir + "/three.txt") << "abc";
  expect_usage_error("train --model gpt --text " + dir + "/three.txt",
                     "--text " + dir + "/three.txt: its train part (2 of 3 bytes)");
  expect_usage_error(
      "train --model gpt --text " + dir + "/empty",
      "--text " + dir + "/empty: ByteText: " + dir + "/empty: is a directory, not a text file");
  fs::remove_all(dir);
}

// A failed write of the metrics (a full disk: the flush fails, not the
// open) stops the run with status 1; the checkpoint it resumed is intact.
TEST(TrainCli, AMetricsFileThatCannotBeWrittenStopsTheRun) {
  if (!fs::exists("/dev/full") || ::access("/dev/full", W_OK) != 0)
    GTEST_SKIP() << "no writable /dev/full";
  const std::string dir = temp_dir("metrics_full");
  save_tiny_run(dir, 2);
  const auto before = files_under(dir);
  const Result r = run("train --threads 1 --resume " + dir + " --steps 4 --metrics /dev/full");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err,
            "error: --metrics /dev/full: cannot write (No space left on device); the run stops "
            "here\n");
  EXPECT_EQ(r.out.find("trained"), std::string::npos) << r.out;
  EXPECT_EQ(files_under(dir), before);
  fs::remove_all(dir);
}

// Memory running out is the size the user asked for, not a bug: status 1,
// the bytes, and the flag to lower. (Limited address space, so the test
// never takes the machine's memory.)
TEST(CliCheck, OutOfMemoryNamesTheBytesAndTheFlagToLower) {
  // 2 GB of memory at most: `ulimit -v`, or, in a build with
  // AddressSanitizer (which reserves terabytes of address space for its
  // shadow), its allocator's own limit.
#if defined(WS_CLI_HAS_ASAN)
  const std::string limit =
      "ASAN_OPTIONS=${ASAN_OPTIONS}:allocator_may_return_null=1:max_allocation_size_mb=2000 ";
#else
  const std::string limit = "ulimit -v 2000000; exec ";
#endif
  const Result r = run_command(
      fmt::format("{}{} check --model cnn --threads 1 --batch 10000000", limit, WS_CLI));
  std::string err;  // stderr without the sanitizer's own warning about the refused allocation
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("==", 0) != 0) err += line + "\n";
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(err.find("internal error"), std::string::npos) << r.err;
  EXPECT_EQ(err.rfind("error: out of memory: a tensor needs 31360000000 bytes (29.2 GiB); "
                      "lower --batch (now 10000000)",
                      0),
            0u)
      << r.err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << r.err;
}

// A hand-edited trainer_state.json: each field read from it is checked, and
// a bad one is a usage error naming it, before any file is touched.
TEST(TrainCli, AHandEditedTrainerStateIsAUsageErrorNamingTheField) {
  const std::string dir = temp_dir("edited_state");
  save_tiny_run(dir + "/good", 4);
  const std::string ck = dir + "/ck/checkpoint-4";
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::string where = "--resume " + ck + ": trainer_state.json: ";
  const std::vector<Case> cases = {
      {[](json& s) { s["user"]["data"]["step"] = -7; },
       where + "data.step is -7; must be an integer from 4 (the optimizer's step) to 4 "
               "(config.steps)"},
      {[](json& s) { s["user"]["data"]["step"] = 99; }, where + "data.step is 99; must be"},
      {[](json& s) { s["user"]["data"]["step"] = 4.5; }, where + "data.step is 4.5; must be"},
      {[](json& s) { s["user"]["data"].erase("step"); }, where + "data.step is missing; must be"},
      {[](json& s) { s["user"]["data"] = "x"; }, where + "data is \"x\"; must be an object"},
      {[](json& s) { s["user"]["config"].erase("seed"); },
       where + "config.seed is missing; must be an integer from 0 to 18446744073709551615"},
      {[](json& s) { s["user"]["config"]["seed"] = "x"; }, where + "config.seed is \"x\""},
      {[](json& s) { s["user"]["config"]["lr"] = "fast"; },
       where + "config.lr is \"fast\"; must be a finite number >= 0"},
      {[](json& s) { s["user"]["config"]["steps"] = 0; }, where + "config.steps is 0; must be"},
      {[](json& s) { s["user"]["config"]["model"] = "resnet"; },
       where + "config.model is \"resnet\"; must be a model name"},
      {[](json& s) { s["user"]["config"] = 1; }, where + "config is 1; must be an object"},
      {[](json& s) { s["step"] = "x"; },
       "trainer_state.json: step is \"x\"; must be an integer from 0 to"},
      {[](json& s) { s["random_stream"]["seed"] = -1; },
       "trainer_state.json: random_stream.seed is -1; must be an integer from 0 to"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    fs::remove_all(dir + "/ck");
    fs::create_directories(dir + "/ck");
    fs::copy(dir + "/good/checkpoint-4", ck);
    json state = json::parse(slurp(ck + "/trainer_state.json"));
    c.edit(state);
    std::ofstream(ck + "/trainer_state.json") << state.dump(2);
    const auto before = files_under(dir + "/ck");
    expect_usage_error(
        fmt::format("train --threads 1 --resume {}/ck --save {}/ck --metrics {}/ck/m.jsonl", dir,
                    dir, dir),
        c.message);
    EXPECT_EQ(files_under(dir + "/ck"), before) << "a file was touched";
  }
  fs::remove_all(dir);
}

}  // namespace
