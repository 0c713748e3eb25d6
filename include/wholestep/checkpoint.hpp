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
// which the next save removes.
#pragma once

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

}  // namespace ws
