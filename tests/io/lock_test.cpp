// One writer per directory of checkpoints (DirectoryLock): a writer in
// another process refuses saves and loads naming itself, and its temporary
// directories are not removed under it; readers are waited for; locks nest
// within one process; a save that fails removes what it wrote.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "wholestep/wholestep.hpp"

#include "test_util.hpp"

namespace ws {
namespace {

using testing::temp_dir;

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct TinyTraining {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<optim::Optimizer> opt;
};
TinyTraining tiny() {
  manual_seed(1);
  TinyTraining r;
  r.model = models::make(models::spec("tiny_mlp"));
  r.opt = std::make_unique<optim::SGD>(*r.model, optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  return r;
}

// A child process holding the lock of `dir` in `mode` until told to let go
// (a byte on its pipe); started once the lock is held.
class Holder {
 public:
  Holder(const std::string& dir, DirectoryLock::Mode mode) {
    int ready[2], go[2];
    EXPECT_EQ(::pipe(ready), 0);
    EXPECT_EQ(::pipe(go), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(go[1]);
      try {
        DirectoryLock lock(dir, mode, "the test's holder");
        char b = 1;
        if (::write(ready[1], &b, 1) != 1) ::_exit(2);
        if (::read(go[0], &b, 1) < 0) ::_exit(2);
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(go[0]);
    go_ = go[1];
    char b = 0;
    EXPECT_EQ(::read(ready[0], &b, 1), 1) << "the holder did not take the lock";
    ::close(ready[0]);
  }
  ~Holder() { release(); }
  pid_t pid() const { return pid_; }
  void release() {
    if (go_ < 0) return;
    ::close(go_);  // end of file: let go
    go_ = -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
};

TEST(DirectoryLock, AWriterInAnotherProcessRefusesSavesAndLoadsNamingItself) {
  const std::string dir = temp_dir("refuse");
  TinyTraining t = tiny();
  save_checkpoint(dir, *t.model, *t.opt);
  // What another writer is writing: not removed under it.
  fs::create_directories(dir + "/.checkpoint-7.tmp");
  std::ofstream(dir + "/.checkpoint-7.tmp/model.safetensors") << "half";
  {
    Holder writer(dir, DirectoryLock::Mode::exclusive);
    try {
      save_checkpoint(dir, *t.model, *t.opt);
      ADD_FAILURE() << "saved beside another writer";
    } catch (const DirectoryInUse& e) {
      EXPECT_EQ(e.pid(), writer.pid());
      EXPECT_EQ(e.holder(), "the test's holder");
      EXPECT_EQ(std::string(e.what()).rfind(fmt::format("the directory {} is in use by process {} "
                                                        "(the test's holder, since ",
                                                        dir, writer.pid()),
                                            0),
                0u)
          << e.what();
    }
    EXPECT_TRUE(fs::exists(dir + "/.checkpoint-7.tmp/model.safetensors"));
    for (const std::string& path : {dir, dir + "/checkpoint-0"}) {
      try {
        load_checkpoint(path, *t.model, *t.opt);
        ADD_FAILURE() << "loaded while another process writes";
      } catch (const DirectoryInUse& e) {
        EXPECT_EQ(e.pid(), writer.pid());
        EXPECT_NE(std::string(e.what()).find(" is being written by process "), std::string::npos)
            << e.what();
      }
    }
    EXPECT_THROW(read_checkpoint_state(dir), DirectoryInUse);
  }
  // The writer gone, the next save is the writer: what a crashed save left
  // is removed.
  save_checkpoint(dir, *t.model, *t.opt);
  EXPECT_FALSE(fs::exists(dir + "/.checkpoint-7.tmp"));
  load_checkpoint(dir, *t.model, *t.opt);
  fs::remove_all(dir);
}

TEST(DirectoryLock, AWriterWaitsForReadersAndIsRefusedWhenTheyStay) {
  const std::string dir = temp_dir("readers");
  TinyTraining t = tiny();
  save_checkpoint(dir, *t.model, *t.opt);
  Holder reader(dir, DirectoryLock::Mode::shared);
  // Readers share.
  EXPECT_NO_THROW(load_checkpoint(dir, *t.model, *t.opt));
  try {
    DirectoryLock lock(dir, DirectoryLock::Mode::exclusive, "", std::chrono::milliseconds(100));
    ADD_FAILURE() << "locked beside a reader";
  } catch (const DirectoryInUse& e) {
    EXPECT_EQ(e.pid(), 0);
    EXPECT_EQ(e.what(), "the directory " + dir + " is in use by processes reading it");
  }
  // A reader that lets go within the wait: the writer gets the lock.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    reader.release();
  });
  const auto t0 = std::chrono::steady_clock::now();
  DirectoryLock lock(dir, DirectoryLock::Mode::exclusive);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  later.join();
  EXPECT_TRUE(lock.owns());
  fs::remove_all(dir);
}

TEST(DirectoryLock, LocksNestWithinTheProcessThatWrites) {
  const std::string dir = temp_dir("nest");
  TinyTraining t = tiny();
  DirectoryLock lock(dir, DirectoryLock::Mode::exclusive, "a test");
  EXPECT_EQ(DirectoryLock::held(dir), DirectoryLock::Mode::exclusive);
  EXPECT_NE(read_text(DirectoryLock::file(dir)).find(fmt::format("\"pid\":{}", ::getpid())),
            std::string::npos);
  // Saves and loads of the process that holds it take nothing more.
  const std::string saved = save_checkpoint(dir, *t.model, *t.opt);
  load_checkpoint(saved, *t.model, *t.opt);
  EXPECT_EQ(checkpoint_run_dir(saved), dir);
  const DirectoryLock nested(dir, DirectoryLock::Mode::shared);
  EXPECT_FALSE(nested.owns());
  EXPECT_THROW(DirectoryLock(dir, DirectoryLock::Mode::exclusive), Error);
  lock.release();
  EXPECT_EQ(DirectoryLock::held(dir), std::nullopt);
  EXPECT_EQ(read_text(DirectoryLock::file(dir)), "");  // who held it is gone with it
  // A directory no writer ever locked is read without creating anything.
  const std::string bare = temp_dir("bare");
  const DirectoryLock reader(bare, DirectoryLock::Mode::shared);
  EXPECT_FALSE(reader.owns());
  EXPECT_FALSE(fs::exists(DirectoryLock::file(bare)));
  fs::remove_all(dir);
  fs::remove_all(bare);
}

// A save that fails part way (here the file size limit, as a full disk
// would) removes its temporary directory before it throws, and leaves the
// checkpoints there were.
TEST(DirectoryLock, AFailedSaveRemovesItsTemporaryDirectory) {
  const std::string dir = temp_dir("failed");
  TinyTraining t = tiny();
  save_checkpoint(dir, *t.model, *t.opt);
  t.opt->set_step_count(5);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG
    const rlimit limit{.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      save_checkpoint(dir, *t.model, *t.opt);
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find("File too large") != std::string::npos ? 0 : 4);
    }
    ::_exit(5);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the save did not fail as a full disk would";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".wholestep.lock", "checkpoint-0"}));
  load_checkpoint(dir, *t.model, *t.opt);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ws
