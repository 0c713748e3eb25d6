// Checkpoints (wholestep/checkpoint.hpp): three files in a directory that is
// renamed into place only when complete, and loaded all or nothing.
#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/files.hpp"
#include "tensor/tensor_impl.hpp"
#include "wholestep/checkpoint.hpp"

namespace ws {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kFormat = "wholestep-checkpoint";
constexpr int kVersion = 1;

// The step of a "checkpoint-<digits>" name, else -1.
int64_t step_of(const std::string& name) {
  const size_t n = std::strlen(kPrefix);
  if (name.size() <= n || name.compare(0, n, kPrefix) != 0 || name.size() - n > 18) return -1;
  int64_t step = 0;
  for (size_t i = n; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// Checkpoints in dir, oldest first.
std::vector<std::pair<int64_t, fs::path>> checkpoints_in(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) out.emplace_back(step, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// What the graph bakes in: loading state into an optimizer of another kind
// or with other terms is refused.
json describe(const optim::UpdateSpec& s) {
  return {{"kind", s.kind},
          {"momentum", s.momentum},
          {"nesterov", s.nesterov},
          {"weight_decay", s.weight_decay},
          {"amsgrad", s.amsgrad},
          {"clip", s.clip},
          {"state_slots", s.state_slots},
          {"global_slots", s.global_slots}};
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) throw Error(fmt::format("cannot remove {}: {}", p.string(), ec.message()));
}

// The tensors of one file checked against the ones they will be copied
// into: every name present once, nothing extra, the same dtype and shape.
void match(const std::string& file, const nn::NamedTensors& into, const SafetensorsFile& f,
           const char* whose) {
  std::map<std::string, const Tensor*> found;
  for (const auto& [name, t] : f.tensors) found[name] = &t;
  for (const auto& [name, t] : into) {
    auto it = found.find(name);
    if (it == found.end())
      throw Error(fmt::format("load_checkpoint: {} has no tensor '{}' ({} {})", file, name, whose,
                              t.str()));
    const Tensor& saved = *it->second;
    if (saved.dtype() != t.dtype() || saved.shape() != t.shape())
      throw Error(fmt::format("load_checkpoint: {}: tensor '{}' is {} in the file, {} in the {}",
                              file, name, saved.str(), t.str(), whose));
    found.erase(it);
  }
  if (!found.empty())
    throw Error(fmt::format("load_checkpoint: {}: tensor '{}' is not in the {}", file,
                            found.begin()->first, whose));
}

void copy_into(const nn::NamedTensors& into, const SafetensorsFile& f) {
  std::map<std::string, const Tensor*> found;
  for (const auto& [name, t] : f.tensors) found[name] = &t;
  for (const auto& [name, t] : into) const_cast<Tensor&>(t).copy_(*found.at(name));
}

std::string metadata_of(const SafetensorsFile& f, const std::string& file, const char* key) {
  auto it = f.metadata.find(key);
  if (it == f.metadata.end())
    throw Error(fmt::format("load_checkpoint: {}: __metadata__ has no '{}'", file, key));
  return it->second;
}

// Writes the checkpoint's files into `tmp` and renames it to `final_path`.
// A checkpoint of the same step (saved again after a resume) is exchanged
// with the new one in one atomic step, then removed.
void write_into_place(const std::string& dir, const fs::path& tmp, const fs::path& final_path,
                      const nn::Module& model, const optim::Optimizer& opt, const json& user,
                      int64_t step) {
  std::error_code ec;
  nn::NamedTensors tensors = model.named_parameters(), buffers = model.named_buffers();
  tensors.insert(tensors.end(), buffers.begin(), buffers.end());
  write_safetensors((tmp / "model.safetensors").string(), tensors, {{"format", "pt"}});

  const optim::UpdateSpec spec = opt.spec();
  std::vector<double> hyper(spec.hyper_names.size());
  opt.hyper_values(hyper);
  json hypers = json::object();
  for (size_t i = 0; i < hyper.size(); ++i) hypers[spec.hyper_names[i]] = hyper[i];
  write_safetensors((tmp / "optimizer.safetensors").string(), opt.state(),
                    {{"optimizer", describe(spec).dump()},
                     {"step_count", std::to_string(step)},
                     {"lr", fmt::format("{}", opt.lr())},
                     {"hyperparameters", hypers.dump()}});

  const RandomStream rs = random_stream();
  const json state = {{"format", kFormat},
                      {"version", kVersion},
                      {"step", step},
                      {"random_stream", {{"seed", rs.seed}, {"offset", rs.offset}}},
                      {"user", user}};
  const std::string text = state.dump(2) + "\n";
  const std::span<const std::byte> part = std::as_bytes(std::span(text));
  io::write_new_file((tmp / "trainer_state.json").string(), {&part, 1});
  io::sync_directory(tmp.string());

  if (fs::exists(final_path, ec)) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) != 0)
      throw Error(fmt::format("save_checkpoint: cannot replace {}: {}", final_path.string(),
                              std::strerror(errno)));
    io::sync_directory(dir);
    remove_tree(tmp);
  } else {
    fs::rename(tmp, final_path, ec);
    if (ec)
      throw Error(fmt::format("save_checkpoint: cannot rename {} to {}: {}", tmp.string(),
                              final_path.string(), ec.message()));
    io::sync_directory(dir);
  }
}

}  // namespace

namespace {

// A ZeRO step keeps the optimizer's state in parts on the ranks
// (StepOptions::zero); the optimizer's own tensors are empty until
// gathered.
void check_not_sharded(const optim::Optimizer& opt, const char* who) {
  for (const auto& [name, t] : opt.state())
    if (t.defined() && t.impl()->sharded)
      throw Error(fmt::format(
          "{}: the optimizer's state ('{}', ...) is sharded over the ranks by a ZeRO step "
          "(StepOptions::zero); call TrainStep::gather_optimizer_state() on every rank first",
          who, name));
}

}  // namespace

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  const auto all = checkpoints_in(dir);
  if (all.empty()) return std::nullopt;
  return all.back().second.string();
}

std::string save_checkpoint(const std::string& dir, const nn::Module& model,
                            const optim::Optimizer& opt, const std::string& user_json,
                            int keep_last) {
  json user;
  try {
    user = json::parse(user_json);
  } catch (const json::exception& e) {
    throw Error(fmt::format("save_checkpoint: user_json is not JSON: {}", e.what()));
  }
  if (!user.is_object()) throw Error("save_checkpoint: user_json must be a JSON object");
  if (keep_last < 0) throw Error(fmt::format("save_checkpoint: keep_last {} < 0", keep_last));
  check_not_sharded(opt, "save_checkpoint");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("save_checkpoint: cannot create {}: {}", dir, ec.message()));

  // The directory's writer: this process already (a training run holds the
  // lock for the whole run), or this save alone.
  std::optional<DirectoryLock> lock;
  if (DirectoryLock::held(dir) != DirectoryLock::Mode::exclusive)
    lock.emplace(dir, DirectoryLock::Mode::exclusive);

  const int64_t step = opt.step_count();
  const std::string name = fmt::format("{}{}", kPrefix, step);
  const fs::path final_path = fs::path(dir) / name,
                 tmp = fs::path(dir) / fmt::format(".{}.tmp", name);
  // What crashed saves left: ".checkpoint-<step>.tmp" (being written) and
  // ".checkpoint-<step>.old" (being removed). Only the lock's holder gets
  // here, so none of them is another writer's save in progress.
  std::vector<fs::path> leftovers;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f.size() > 5 && f[0] == '.' && (f.ends_with(".tmp") || f.ends_with(".old")) &&
        step_of(f.substr(1, f.size() - 5)) >= 0)
      leftovers.push_back(e.path());
  }
  for (const fs::path& p : leftovers) remove_tree(p);
  fs::create_directory(tmp, ec);
  if (ec)
    throw Error(fmt::format("save_checkpoint: cannot create {}: {}", tmp.string(), ec.message()));
  try {
    write_into_place(dir, tmp, final_path, model, opt, user, step);
  } catch (...) {
    // A failed save (a full disk) leaves no partial checkpoint behind.
    fs::remove_all(tmp, ec);
    throw;
  }

  if (keep_last > 0) {
    auto all = checkpoints_in(dir);
    for (size_t i = 0; i + size_t(keep_last) < all.size(); ++i) {
      // Renamed first, so a crash while removing never leaves a partial
      // checkpoint under a checkpoint name.
      const fs::path gone =
          fs::path(dir) / fmt::format(".{}.old", all[i].second.filename().string());
      remove_tree(gone);
      fs::rename(all[i].second, gone, ec);
      if (!ec) remove_tree(gone);
    }
    io::sync_directory(dir);
  }
  return final_path.string();
}

namespace {

// The checkpoint directory `path` names: itself, or the newest in it.
std::string resolve(const std::string& path) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / "trainer_state.json", ec)) return path;
  if (!fs::is_directory(path, ec))
    throw Error(fmt::format("load_checkpoint: {} is not a directory{}", path,
                            fs::exists(path, ec) ? "" : " (it does not exist)"));
  const std::optional<std::string> latest = latest_checkpoint(path);
  if (!latest)
    throw Error(fmt::format(
        "load_checkpoint: {} is neither a checkpoint (no trainer_state.json) nor a directory "
        "of checkpoint-<step> directories",
        path));
  return *latest;
}

CheckpointState read_state(const std::string& dir) {
  const std::string state_file = (fs::path(dir) / "trainer_state.json").string();
  const std::vector<std::byte> state_bytes = io::read_file(state_file, "load_checkpoint");
  json state;
  try {
    state = json::parse(reinterpret_cast<const char*>(state_bytes.data()),
                        reinterpret_cast<const char*>(state_bytes.data() + state_bytes.size()));
  } catch (const json::exception& e) {
    throw Error(fmt::format("load_checkpoint: {} is not JSON: {}", state_file, e.what()));
  }
  // Each field checked for its type and range (a hand-edited file): a
  // negative number is never wrapped into an unsigned one, nor a fraction
  // cut to an integer.
  const json missing;
  auto field = [&](const json& object, const char* key) -> const json& {
    if (!object.is_object()) return missing;
    const auto it = object.find(key);
    return it == object.end() ? missing : *it;
  };
  auto fail = [&](const std::string& name, const json& value, const std::string& must) {
    throw Error(fmt::format("load_checkpoint: {}: {} is {}; must be {}", state_file, name,
                            value.is_null() ? std::string("missing") : value.dump(), must));
  };
  // An unsigned integer at most `most`.
  auto count = [&](const std::string& name, const json& value, uint64_t most) {
    if (!value.is_number_unsigned() || value.get<uint64_t>() > most)
      fail(name, value, fmt::format("an integer from 0 to {}", most));
    return value.get<uint64_t>();
  };
  if (field(state, "format") != kFormat || field(state, "version") != kVersion)
    throw Error(fmt::format("load_checkpoint: {}: format {} version {}, expected {} version {}",
                            state_file, field(state, "format").dump(),
                            field(state, "version").dump(), kFormat, kVersion));
  CheckpointState out;
  out.step =
      int64_t(count("step", field(state, "step"), uint64_t(std::numeric_limits<int64_t>::max())));
  const json& rs = field(state, "random_stream");
  const uint64_t most = std::numeric_limits<uint64_t>::max();
  out.random_stream = {count("random_stream.seed", field(rs, "seed"), most),
                       count("random_stream.offset", field(rs, "offset"), most)};
  if (!field(state, "user").is_object())
    fail("user", field(state, "user"), "an object (what the saver added)");
  out.user_json = field(state, "user").dump();
  out.path = dir;
  return out;
}

}  // namespace

CheckpointState read_checkpoint_state(const std::string& path) {
  const DirectoryLock lock(checkpoint_run_dir(path), DirectoryLock::Mode::shared);
  return read_state(resolve(path));
}

CheckpointState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt) {
  // No writer prunes or replaces the checkpoint while it is read.
  const DirectoryLock lock(checkpoint_run_dir(path), DirectoryLock::Mode::shared);
  // Everything is read and checked before anything is written.
  check_not_sharded(opt, "load_checkpoint");
  const std::string dir = resolve(path);
  CheckpointState out = read_state(dir);
  const std::string state_file = (fs::path(dir) / "trainer_state.json").string(),
                    model_file = (fs::path(dir) / "model.safetensors").string(),
                    opt_file = (fs::path(dir) / "optimizer.safetensors").string();
  const SafetensorsFile m = read_safetensors(model_file);
  nn::NamedTensors tensors = model.named_parameters(), buffers = model.named_buffers();
  tensors.insert(tensors.end(), buffers.begin(), buffers.end());
  match(model_file, tensors, m, "model");

  const SafetensorsFile o = read_safetensors(opt_file);
  const std::string described = metadata_of(o, opt_file, "optimizer");
  if (json::parse(described, nullptr, false) != describe(opt.spec()))
    throw Error(fmt::format("load_checkpoint: {}: the checkpoint's optimizer is {}, this one is {}",
                            opt_file, described, describe(opt.spec()).dump()));
  const std::string steps = metadata_of(o, opt_file, "step_count"),
                    lr = metadata_of(o, opt_file, "lr");
  if (steps != std::to_string(out.step))
    throw Error(fmt::format("load_checkpoint: {}: step_count {} but {} says step {}", opt_file,
                            steps, state_file, out.step));
  char* end = nullptr;
  const double lr_value = std::strtod(lr.c_str(), &end);
  if (lr.empty() || *end != '\0' || !(lr_value >= 0))
    throw Error(fmt::format("load_checkpoint: {}: lr '{}' is not a learning rate", opt_file, lr));
  match(opt_file, opt.state(), o, "optimizer");

  // Nothing below can fail.
  copy_into(tensors, m);
  copy_into(opt.state(), o);
  opt.set_step_count(out.step);
  opt.set_lr(lr_value);
  set_random_stream(out.random_stream);
  return out;
}

}  // namespace ws
