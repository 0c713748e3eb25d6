// The command line as a user meets it: every bad flag or file is one line
// on stderr and exit status 2 before any work, a resumed run continues with
// the same bits (signals: signal_cli_test.cpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli_run.hpp"

namespace {

using namespace ws::testing;
namespace fs = std::filesystem;

TEST(Cli, CountsThatMakeNoSenseAreUsageErrors) {
  expect_usage_error("train --steps 0", "--steps 0: must be at least 1");
  expect_usage_error("train --steps -1", "--steps -1: must be at least 1");
  expect_usage_error("train --epochs 0", "--epochs 0: must be at least 1");
  expect_usage_error("train --epochs -2", "--epochs -2: must be at least 1");
  expect_usage_error("train --threads -3", "--threads -3: must be >= 0 (0: all cores)");
  expect_usage_error("train --stop-after 0", "--stop-after 0: must be at least 1");
  expect_usage_error("compare --steps 0", "--steps 0: must be at least 1");
  expect_usage_error("compare --warmup -1", "--warmup -1: must be at least 0");
  expect_usage_error("profile --steps 0", "--steps 0: must be at least 1");
  expect_usage_error("profile --top 0", "--top 0: must be at least 1");
  expect_usage_error("train --save-every 5", "--save-every and --keep need --save DIR");
  expect_usage_error("train --steps abc", "--steps");
}

TEST(Cli, NonFiniteAndUnknownValuesAreUsageErrors) {
  expect_usage_error("train --lr inf", "--lr inf: must be a finite number >= 0");
  expect_usage_error("train --lr nan", "--lr nan: must be a finite number >= 0");
  expect_usage_error("train --lr -1", "--lr -1: must be a finite number >= 0");
  expect_usage_error("train --momentum inf", "--momentum inf: must be a finite number >= 0");
  expect_usage_error("train --weight-decay -0.5", "--weight-decay -0.5");
  expect_usage_error("train --max-grad-norm nan", "--max-grad-norm nan");
  expect_usage_error("train --memory-budget -1",
                     "--memory-budget -1: must be a finite number >= 0");
  expect_usage_error("train --mode fast",
                     "--mode fast: must be interpret, three_graph or single_graph");
  expect_usage_error("dump --on-nonfinite warn",
                     "--on-nonfinite warn: must be error, skip or ignore");
  expect_usage_error("check --max-cached -1", "--max-cached -1: must be an integer from 0 to");
  expect_usage_error("graph -o x.svg --bucket-bytes 0",
                     "--bucket-bytes 0: must be an integer from 1");
  expect_usage_error("train --detect-anomaly",
                     "detect_anomaly checks every value of the "
                     "interpreted step graph; it needs mode interpret");
  expect_usage_error("profile --mode interpret", "--mode interpret: profile times compiled modes");
  expect_usage_error("train --model resnet", "--model resnet: unknown model 'resnet'");
  expect_usage_error("train --optimizer rmsprop",
                     "--optimizer rmsprop: expected sgd, adam or adamw");
  expect_usage_error("train --schedule linear", "--schedule linear: expected cosine or constant");
}

TEST(Cli, FilesAndDataSetsAreCheckedBeforeWork) {
  const std::string dir = temp_dir("files");
  // A directory the user named that does not exist is not a missing package.
  const Result missing = run("train --data " + dir + "/nowhere");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("--data " + dir + "/nowhere: no such directory"), std::string::npos)
      << missing.err;
  EXPECT_EQ(missing.err.find("install"), std::string::npos) << missing.err;
  // Valid files with fewer examples than one batch (mlp's is 128).
  fs::create_directories(dir + "/small");
  write_fashion_mnist(dir + "/small", 5);
  expect_usage_error("train --data " + dir + "/small",
                     "the training set holds 5 examples, fewer than one batch of 128");
  expect_usage_error("compare --data " + dir + "/small",
                     "the training set holds 5 examples, fewer than one batch of 128");
  // A text too short for a window of training and of validation.
  std::ofstream(dir + "/short.txt") << std::string(100, 'a');
  expect_usage_error("train --model gpt --text " + dir + "/short.txt",
                     "is shorter than one window of 65 bytes");
  expect_usage_error("train --model gpt --text " + dir + "/none.txt", "no such file");
  // Outputs that cannot be written.
  expect_usage_error("profile --trace " + dir + "/no/such/dir/t.json", "cannot write in");
  expect_usage_error("dump --dot " + dir, "is a directory");
  std::ofstream(dir + "/a_file") << "x";
  expect_usage_error("train --save " + dir + "/a_file/sub", "--save " + dir + "/a_file/sub");
  expect_usage_error("train --resume " + dir + "/no_checkpoint", "--resume " + dir);
  fs::remove_all(dir);
}

// N steps, save, a new process, load, N more: the same bytes as 2N steps
// in one run, for mlp with SGD-momentum and gpt with AdamW and dropout, in
// single_graph and three_graph. A flag that would change the run is
// refused.
TEST(Cli, ResumingInANewProcessGivesTheSameBits) {
  for (const char* model : {"mlp", "gpt"}) {
    for (const char* mode : {"single_graph", "three_graph"}) {
      SCOPED_TRACE(fmt::format("{} {}", model, mode));
      const std::string dir = temp_dir("resume");
      const std::string common = fmt::format("train --model {} --mode {} --steps 6", model, mode);
      ASSERT_EQ(run(common + " --save " + dir + "/whole").status, 0);
      const Result first = run(common + " --stop-after 3 --save " + dir + "/parts");
      ASSERT_EQ(first.status, 0) << first.err;
      EXPECT_NE(first.out.find("stopped after step 3 of 6"), std::string::npos) << first.out;
      const Result second = run("train --resume " + dir + "/parts --save " + dir + "/parts");
      ASSERT_EQ(second.status, 0) << second.err;
      EXPECT_NE(second.out.find("at step 3"), std::string::npos) << second.out;
      expect_same_checkpoint(dir + "/whole/checkpoint-6", dir + "/parts/checkpoint-6");
      expect_usage_error("train --resume " + dir + "/parts --lr 0.123",
                         "--lr 0.123 differs from the checkpoint's");
      fs::remove_all(dir);
    }
  }
}

// A learning rate that drives the loss to NaN stops training at that step
// with a message naming it (exit 1); --on-nonfinite skip skips such steps.
TEST(Cli, ANonFiniteLossStopsTrainingUnlessSkipped) {
  const Result r = run("train --model mlp --lr 10000 --steps 20");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("error: step ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(": the loss is NaN; training stops here"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--on-nonfinite skip"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("test accuracy"), std::string::npos) << r.out;
  const Result skipped = run("train --model mlp --lr 10000 --steps 20 --on-nonfinite skip");
  EXPECT_EQ(skipped.status, 0) << skipped.err;
  EXPECT_NE(skipped.err.find("is not finite (loss NaN); skipped"), std::string::npos)
      << skipped.err;
  EXPECT_NE(skipped.out.find("skipped (not finite)"), std::string::npos) << skipped.out;
}

}  // namespace
