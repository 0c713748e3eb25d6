// Checkpoints: a training run's whole state on disk, written so that a crash
// at any moment leaves the previous checkpoint intact, and read all or
// nothing.
//
// A checkpoint is a directory `checkpoint-<step>` (step: the optimizer's
// step count) holding three files, as Hugging Face's Trainer lays them out:
//
//   model.safetensors      parameters and buffers under their module paths
//                          ("fc1.weight"), in PyTorch's layouts, so
//                          `safetensors.torch.load_file` reads them and a
//                          PyTorch model of the same architecture loads them;
//                          __metadata__ {"format": "pt"}.
//   optimizer.safetensors  the optimizer's state tensors under their names
//                          ("fc1.weight.exp_avg", "step"); __metadata__
//                          {"optimizer": kind, "step_count": N, "lr": ...,
//                          "state_slots": ..., "global_slots": ...}.
//   trainer_state.json     {"format": "wholestep-checkpoint", "version": 1,
//                          "step": N, "random_stream": {"seed", "offset"},
//                          "user": the caller's JSON object (the command line
//                          stores the data position and the configuration)}.
//
// The three files are written into a temporary directory beside the
// checkpoint (".checkpoint-<step>.tmp"), each flushed and fsynced, the
// directory fsynced, then renamed to its name (an atomic step on POSIX) and
// the parent directory fsynced. A directory named checkpoint-<step> is
// therefore always complete; a crash leaves at most a temporary directory,
// which the next save removes. A save that fails (a full disk) removes its
// own temporary directory before it throws.
//
// One writer per directory: a save holds the directory's lock (DirectoryLock
// below, exclusive) while it writes, and a load holds it shared while it
// reads, so two processes never remove each other's temporary directories
// and a checkpoint is never pruned (keep_last) under a reader. A program
// that writes a run's checkpoints for a while (a training run) takes the
// exclusive lock once, for the whole run; saves and loads inside the process
// that holds it take nothing more.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "wholestep/nn.hpp"
#include "wholestep/optim.hpp"
#include "wholestep/tensor.hpp"

namespace ws {

// ---- safetensors -----------------------------------------------------------

// A safetensors file: 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype", "shape", "data_offsets"}, ..., "__metadata__": {string:
// string}}, padded with spaces to 8-byte alignment), then the tensors'
// bytes, contiguous in offset order. dtypes: F32, F64, I64, BOOL.
struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  nn::NamedTensors tensors;  // in offset order
};

// Writes `tensors` (in their order) and `metadata` to `path` atomically:
// a temporary file in the same directory, flushed, fsynced, renamed over
// `path`, then the directory fsynced. Names must be distinct and not
// "__metadata__"; tensors must be concrete.
void write_safetensors(const std::string& path, const nn::NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads and checks a whole file: a truncated file, a bad header, offsets
// that overlap, leave gaps or run past the end, an unknown dtype, or a shape
// that does not match its bytes is a ws::Error naming the file (and the
// tensor).
SafetensorsFile read_safetensors(const std::string& path);

// ---- checkpoints -----------------------------------------------------------

// What a checkpoint holds besides the tensors.
struct CheckpointState {
  int64_t step = 0;              // the optimizer's step count
  RandomStream random_stream;    // the dropout stream's position
  std::string user_json = "{}";  // the caller's JSON object, as saved
  std::string path;              // the checkpoint directory it was read from
};

// Saves the model's parameters and buffers, the optimizer's state and step
// count, the random stream's position and `user_json` (a JSON object: the
// data position, the configuration) as `dir`/checkpoint-<step>, creating
// `dir` if needed, then keeps only the newest `keep_last` checkpoints in
// `dir` (0: all). Returns the checkpoint's path. The model and optimizer
// must be concrete (not inside a trace).
std::string save_checkpoint(const std::string& dir, const nn::Module& model,
                            const optim::Optimizer& opt, const std::string& user_json = "{}",
                            int keep_last = 0);

// The newest checkpoint in `dir` (the highest step), if any.
std::optional<std::string> latest_checkpoint(const std::string& dir);

// What the checkpoint `path` (as load_checkpoint takes it) holds besides
// tensors, read without loading anything: to rebuild the model and the
// optimizer from the saved configuration before loading into them.
CheckpointState read_checkpoint_state(const std::string& path);

// Loads a checkpoint (a checkpoint-<step> directory, or a directory of them:
// the newest) into `model` and `opt` and sets the random stream. All or
// nothing: every file is read and every tensor checked against the model
// and the optimizer (names, dtypes, shapes, the optimizer's kind and state
// slots) before anything is written; a ws::Error names the file and the
// tensor and leaves the model, the optimizer and the random stream as they
// were.
CheckpointState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt);

// ---- one writer per directory ------------------------------------------------

// Another process holds the lock of a directory: a writer (its process id,
// what it is, since when), or readers (pid 0). what(): "the directory D is
// in use by process 12345 (...)", or "is being written by" when a reader
// was refused.
class DirectoryInUse : public Error {
 public:
  DirectoryInUse(std::string dir, int64_t pid, std::string holder, std::string since,
                 bool to_read = false);
  const std::string& dir() const { return dir_; }
  int64_t pid() const { return pid_; }  // 0: processes reading it
  const std::string& holder() const { return holder_; }
  const std::string& since() const { return since_; }
  // "process 12345 (wholestep train, since 2025-01-02 10:11:12)", or
  // "processes reading it".
  std::string who() const;

 private:
  std::string dir_;
  int64_t pid_;
  std::string holder_, since_;
};

// The lock of a directory of checkpoints: flock(2) on `dir`/.wholestep.lock,
// exclusive for a writer, shared for readers, released when the object is
// destroyed or the process ends (however it ends: the kernel drops it). The
// exclusive holder writes one line of JSON into the file (pid, holder, host,
// since) so that the process it refuses can say who holds it; the file stays
// when the lock is released.
//
// Locks are advisory: they order the processes that take them (every save
// and load of this library does), nothing else.
class DirectoryLock {
 public:
  enum class Mode { exclusive, shared };

  // Takes the lock without blocking on a writer. exclusive: creates `dir` and
  // its lock file if needed; held by another writer, it throws
  // DirectoryInUse naming it at once; held by readers, it waits up to
  // `wait_for_readers` for them (a load is short), then throws. shared: a
  // writer holding it throws DirectoryInUse naming the writer; a directory
  // without a lock file (where no writer of this library ever wrote) is
  // read unlocked, and nothing is created in it. `holder` says what holds the
  // lock in a refusal ("wholestep train"; default: the program's name).
  //
  // Within one process: a shared lock on a directory this process already
  // locks is nested in that lock and takes nothing; an exclusive one is a
  // ws::Error (one writer per directory, in one process too).
  DirectoryLock(const std::string& dir, Mode mode, const std::string& holder = "",
                std::chrono::milliseconds wait_for_readers = std::chrono::seconds(10));
  ~DirectoryLock();
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  const std::string& dir() const { return dir_; }
  Mode mode() const { return mode_; }
  // Whether this object holds a lock of its own (false when nested in one
  // this process held already, or when a shared lock found no lock file).
  bool owns() const { return fd_ >= 0; }
  // Releases the lock now (the destructor then does nothing).
  void release();

  // The lock this process holds on `dir`, if any (not a nested one).
  static std::optional<Mode> held(const std::string& dir);
  // The lock file of `dir`: `dir`/.wholestep.lock.
  static std::string file(const std::string& dir);

 private:
  std::string dir_;
  Mode mode_ = Mode::shared;
  int fd_ = -1;
};

// The directory whose lock guards the checkpoint `path` (as load_checkpoint
// takes it): the parent of a checkpoint-<step> directory, else `path`.
std::string checkpoint_run_dir(const std::string& path);

}  // namespace ws
