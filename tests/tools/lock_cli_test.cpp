// One writer per run directory: while `train --save DIR` runs, a second
// `train --save DIR` and a `train --resume DIR` are refused before any work
// (exit status 2) naming the running writer's process, and the writer
// finishes unharmed with checkpoints that load; a writer that was killed
// leaves the directory free.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "child.hpp"
#include "cli_run.hpp"

namespace {

using namespace ws::testing;
namespace fs = std::filesystem;

TEST(TrainLock, ASecondWriterAndAResumeAreRefusedWhileARunWritesTheDirectory) {
  const std::string dir = temp_dir("lock_two");
  const std::string conc = dir + "/conc";
  // A slow writer: a checkpoint every 20 steps, 3 kept.
  Child first(
      "train --model tiny_mlp --steps 2000 --save-every 20 --log-every 100 --threads 1 "
      "--save " +
          conc,
      dir, "first");
  ASSERT_TRUE(first.wait_for("step     1/2000")) << first.out() << first.err();
  const std::string holder = fmt::format("process {} (wholestep train, since ", first.pid());

  const Result second = run("train --model tiny_mlp --steps 50 --threads 1 --save " + conc);
  EXPECT_EQ(second.status, 2) << second.err;
  EXPECT_EQ(second.err.rfind("error: --save " + conc + ": the directory is in use by " + holder, 0),
            0u)
      << second.err;
  EXPECT_EQ(std::count(second.err.begin(), second.err.end(), '\n'), 1) << second.err;
  EXPECT_EQ(second.out.find("step "), std::string::npos) << "work started: " << second.out;

  // Reading it while it is written would race with its pruning of old
  // checkpoints: refused too, whatever the run writes into.
  for (const std::string& also : {std::string(), " --save " + dir + "/elsewhere"}) {
    const Result resume = run("train --threads 1 --resume " + conc + also);
    EXPECT_EQ(resume.status, 2) << resume.err;
    EXPECT_EQ(resume.err.rfind("error: --resume " + conc + ": the directory " + conc +
                                   " is being written by " + holder,
                               0),
              0u)
        << resume.err;
  }

  const Child::Ended end = first.wait();
  EXPECT_EQ(end.status, 0) << first.err();
  EXPECT_NE(first.out().find("saved " + conc + "/checkpoint-2000"), std::string::npos)
      << first.out();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(conc)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".wholestep.lock", "checkpoint-1960",
                                             "checkpoint-1980", "checkpoint-2000"}));
  // Now free: the run resumes and goes on writing there.
  const Result resumed = run("train --threads 1 --steps 2010 --resume " + conc + " --save " + conc);
  EXPECT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from " + conc + "/checkpoint-2000 at step 2000"),
            std::string::npos)
      << resumed.out;
  EXPECT_TRUE(fs::exists(conc + "/checkpoint-2010"));
  fs::remove_all(dir);
}

// The kernel drops the lock of a process however it ends; the line naming
// it, left in the lock file, is not taken for a holder.
TEST(TrainLock, AKilledWriterLeavesTheDirectoryFree) {
  const std::string dir = temp_dir("lock_killed");
  Child first("train --model tiny_mlp --steps 100000000 --threads 1 --save " + dir + "/ck", dir);
  ASSERT_TRUE(first.wait_for("step     1/")) << first.out() << first.err();
  ::kill(first.pid(), SIGKILL);
  first.wait();
  EXPECT_NE(slurp(dir + "/ck/.wholestep.lock").find(fmt::format("\"pid\":{}", first.pid())),
            std::string::npos);
  const Result next = run("train --model tiny_mlp --steps 3 --threads 1 --save " + dir + "/ck");
  EXPECT_EQ(next.status, 0) << next.err;
  EXPECT_TRUE(fs::exists(dir + "/ck/checkpoint-3"));
  fs::remove_all(dir);
}

}  // namespace
