// Checkpoints: the safetensors layout to the letter, exact resume, loading
// all or nothing, and a writer killed at random moments.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wholestep/wholestep.hpp"

#include "test_util.hpp"

namespace ws {
namespace {

using testing::temp_dir;

namespace fs = std::filesystem;

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(b.data(), std::streamsize(b.size()));
}

// Every value of the model, its optimizer and the random stream.
std::vector<double> everything(const nn::Module& m, const optim::Optimizer& opt) {
  std::vector<double> all;
  for (const auto& [n, t] : m.named_parameters()) {
    auto v = t.to_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  for (const auto& [n, t] : m.named_buffers()) {
    auto v = t.to_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  for (const auto& [n, t] : opt.state()) {
    auto v = t.to_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  all.push_back(double(opt.step_count()));
  all.push_back(opt.lr());
  all.push_back(double(random_stream().seed));
  all.push_back(double(random_stream().offset));
  return all;
}

// The file read byte by byte against the safetensors specification,
// independently of the reader: 8-byte little-endian header length, a JSON
// header with dtype, shape and data_offsets per tensor and string-valued
// __metadata__, padded with spaces to 8-byte alignment, then the tensors'
// bytes contiguous in offset order.
TEST(Safetensors, WrittenFileFollowsTheLayoutToTheLetter) {
  const std::string dir = temp_dir("layout");
  const Tensor a = Tensor::from_vector(std::vector<float>{1.5f, -2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_vector(std::vector<int64_t>{7, -8}, {2});
  const Tensor c = Tensor::scalar(0.25, DType::f64);
  Tensor d = Tensor::zeros({3}, DType::b8);
  d.data<uint8_t>()[1] = 1;
  const Tensor e = Tensor::zeros({0, 4});
  write_safetensors(dir + "/t.safetensors", {{"a", a}, {"b.x", b}, {"c", c}, {"d", d}, {"e", e}},
                    {{"format", "pt"}, {"note", "x"}});
  const std::vector<char> f = read_bytes(dir + "/t.safetensors");
  ASSERT_GE(f.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(f[size_t(i)]);  // little-endian
  EXPECT_EQ((8 + n) % 8, 0u) << "the data starts 8-byte aligned";
  ASSERT_LE(8 + n, f.size());
  const std::string header(f.begin() + 8, f.begin() + 8 + std::ptrdiff_t(n));
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_EQ(header.size() - last - 1, (8 - (8 + last + 1) % 8) % 8) << "padded with spaces only";
  const nlohmann::json h = nlohmann::json::parse(header);
  ASSERT_TRUE(h.contains("__metadata__"));
  EXPECT_EQ(h["__metadata__"], (nlohmann::json{{"format", "pt"}, {"note", "x"}}));
  struct Want {
    const char* name;
    const char* dtype;
    std::vector<int64_t> shape;
    const Tensor* t;
    size_t elem;
  };
  const std::vector<Want> want = {{"a", "F32", {2, 3}, &a, 4},
                                  {"b.x", "I64", {2}, &b, 8},
                                  {"c", "F64", {}, &c, 8},
                                  {"d", "BOOL", {3}, &d, 1},
                                  {"e", "F32", {0, 4}, &e, 4}};
  EXPECT_EQ(h.size(), want.size() + 1);
  uint64_t offset = 0;
  const char* data = f.data() + 8 + n;
  for (const Want& w : want) {
    SCOPED_TRACE(w.name);
    ASSERT_TRUE(h.contains(w.name));
    const nlohmann::json& t = h[w.name];
    EXPECT_EQ(t["dtype"], w.dtype);
    EXPECT_EQ(t["shape"].get<std::vector<int64_t>>(), w.shape);
    const auto off = t["data_offsets"].get<std::vector<uint64_t>>();
    ASSERT_EQ(off.size(), 2u);
    EXPECT_EQ(off[0], offset) << "contiguous, in order";
    const uint64_t bytes = uint64_t(w.t->numel()) * w.elem;
    EXPECT_EQ(off[1] - off[0], bytes);
    const std::vector<double> values = w.t->to_vector();
    for (size_t i = 0; i < values.size(); ++i) {
      double v = 0;
      const char* p = data + off[0] + i * w.elem;
      if (w.elem == 1) v = uint8_t(*p);
      if (std::string(w.dtype) == "F32") v = *reinterpret_cast<const float*>(p);
      if (std::string(w.dtype) == "F64") v = *reinterpret_cast<const double*>(p);
      if (std::string(w.dtype) == "I64") v = double(*reinterpret_cast<const int64_t*>(p));
      EXPECT_EQ(v, values[i]) << "element " << i;
    }
    offset = off[1];
  }
  EXPECT_EQ(8 + n + offset, f.size()) << "nothing after the last tensor";

  const SafetensorsFile back = read_safetensors(dir + "/t.safetensors");
  ASSERT_EQ(back.tensors.size(), 5u);
  EXPECT_EQ(back.metadata.at("note"), "x");
  EXPECT_EQ(back.tensors[1].first, "b.x");
  EXPECT_EQ(back.tensors[1].second.to_vector(), b.to_vector());
  EXPECT_EQ(back.tensors[3].second.to_vector(), d.to_vector());
  fs::remove_all(dir);
}

// Each way a safetensors file can be broken is a ws::Error that says what.
TEST(Safetensors, BrokenFilesAreClearErrors) {
  const std::string dir = temp_dir("broken"), path = dir + "/t.safetensors";
  write_safetensors(path, {{"w", Tensor::full({4}, 1.0)}, {"v", Tensor::full({2}, 2.0)}});
  const std::vector<char> good = read_bytes(path);
  auto expect_error = [&](const std::vector<char>& bytes, const std::string& text) {
    write_bytes(path, bytes);
    try {
      read_safetensors(path);
      ADD_FAILURE() << "no error; expected: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect_error({good.begin(), good.begin() + 5}, "shorter than the 8-byte header length");
  expect_error({good.begin(), good.begin() + 20}, "truncated");
  expect_error({good.begin(), good.end() - 1}, "truncated");
  std::vector<char> more = good;
  more.push_back(0);
  expect_error(more, "trailing bytes");
  std::vector<char> huge = good;
  huge[7] = char(0x7f);
  expect_error(huge, "above 100 MB");
  auto with_header = [&](const std::string& json, size_t data_bytes) {
    std::string h = json;
    h.append((8 - (8 + h.size()) % 8) % 8, ' ');
    const uint64_t n = h.size();
    std::vector<char> b(8 + h.size() + data_bytes);
    std::memcpy(b.data(), &n, 8);
    std::memcpy(b.data() + 8, h.data(), h.size());
    return b;
  };
  expect_error(with_header("{not json", 0), "the header is not JSON");
  expect_error(with_header("[1]", 0), "not a JSON object");
  expect_error(with_header(R"({"w":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", 2),
               "tensor 'w': dtype \"F16\" is not one of");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
               "tensor 'w': data_offsets [0, 4] hold 4 bytes; F32[2] needs 8");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
               "is not sizes");
  expect_error(
      with_header(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}})",
                  4),
      "overflows");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                           12),
               "tensor 'b': data_offsets begin at 8, where 4 was expected (gap)");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           8),
               "(overlap)");
  expect_error(with_header(R"({"__metadata__":{"k":1}})", 0), "is not a string");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[1]}})", 4),
               "needs dtype, shape and data_offsets");
  EXPECT_THROW(read_safetensors(dir + "/missing.safetensors"), Error);
  try {
    read_safetensors(dir);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_safetensors(path, {{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}}),
               Error);
  fs::remove_all(dir);
}

struct Training {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<optim::Optimizer> opt;
};
Training make_training(const models::Spec& spec, bool adam) {
  Training r;
  r.model = models::make(spec);
  if (adam)
    r.opt = std::make_unique<optim::AdamW>(*r.model);
  else
    r.opt = std::make_unique<optim::SGD>(*r.model, optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  return r;
}

// N steps, a checkpoint, N more: the same bits as loading the checkpoint
// into a freshly made model and optimizer (with the random stream moved
// elsewhere) and running the same N steps, in every mode, dropout on.
TEST(Checkpoint, ResumingGivesTheSameBitsInEveryMode) {
  for (const char* name : {"mlp", "gpt"}) {
    const models::Spec spec = models::spec(name);
    for (StepMode mode : {StepMode::interpret, StepMode::three_graph, StepMode::single_graph}) {
      SCOPED_TRACE(std::string(name) + " " + std::string(mode_name(mode)));
      const std::string dir = temp_dir("resume");
      const bool adam = spec.optimizer != "sgd";
      manual_seed(5);
      Training a = make_training(spec, adam);
      TrainStep step_a(*a.model, *a.opt, models::loss_fn(*a.model), {.mode = mode});
      for (uint64_t i = 0; i < 2; ++i) step_a.run(models::random_batch(spec, i));
      const std::string saved = save_checkpoint(dir, *a.model, *a.opt, R"({"index": 2})");
      EXPECT_EQ(fs::path(saved).filename(), "checkpoint-2");
      for (uint64_t i = 2; i < 4; ++i) step_a.run(models::random_batch(spec, i));

      manual_seed(99);  // other parameters and another random stream
      Training b = make_training(spec, adam);
      const CheckpointState st = load_checkpoint(dir, *b.model, *b.opt);
      EXPECT_EQ(st.step, 2);
      EXPECT_EQ(nlohmann::json::parse(st.user_json)["index"], 2);
      TrainStep step_b(*b.model, *b.opt, models::loss_fn(*b.model), {.mode = mode});
      for (uint64_t i = 2; i < 4; ++i) step_b.run(models::random_batch(spec, i));
      EXPECT_EQ(everything(*a.model, *a.opt), everything(*b.model, *b.opt));
      fs::remove_all(dir);
    }
  }
}

// Saving keeps the newest `keep_last`; saving the same step again replaces
// it; latest_checkpoint finds the highest step.
TEST(Checkpoint, KeepsTheNewestAndFindsTheLatest) {
  const std::string dir = temp_dir("keep");
  manual_seed(0);
  Training r = make_training(models::spec("tiny_mlp"), false);
  EXPECT_FALSE(latest_checkpoint(dir).has_value());
  for (int64_t s : {1, 2, 3, 10, 10}) {
    r.opt->set_step_count(s);
    save_checkpoint(dir, *r.model, *r.opt, "{}", 2);
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  // and the lock file, which stays (DirectoryLock)
  EXPECT_EQ(names, (std::vector<std::string>{".wholestep.lock", "checkpoint-10", "checkpoint-3"}));
  EXPECT_EQ(fs::path(*latest_checkpoint(dir)).filename(), "checkpoint-10");
  fs::remove_all(dir);
}

// Every corrupt or mismatched checkpoint is a ws::Error naming the file and
// the tensor, and the model, the optimizer and the random stream are left
// exactly as they were.
TEST(Checkpoint, BadCheckpointsChangeNothing) {
  const std::string dir = temp_dir("bad");
  const models::Spec spec = models::spec("mlp");
  manual_seed(1);
  Training saved = make_training(spec, true);
  const std::string ckpt = save_checkpoint(dir, *saved.model, *saved.opt);
  const std::string model_file = ckpt + "/model.safetensors",
                    opt_file = ckpt + "/optimizer.safetensors",
                    state_file = ckpt + "/trainer_state.json";

  manual_seed(2);
  Training target = make_training(spec, true);
  set_random_stream({77, 1234});
  const std::vector<double> before = everything(*target.model, *target.opt);
  auto expect_refused = [&](const std::string& text, const std::string& path = "") {
    try {
      load_checkpoint(ckpt, *target.model, *target.opt);
      ADD_FAILURE() << "loaded; expected: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      if (!path.empty()) EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    EXPECT_EQ(everything(*target.model, *target.opt), before) << "changed by a failed load";
  };
  // Corrupt files.
  const std::vector<char> model_bytes = read_bytes(model_file), opt_bytes = read_bytes(opt_file),
                          state_bytes = read_bytes(state_file);
  write_bytes(model_file, {model_bytes.begin(), model_bytes.end() - 100});
  expect_refused("truncated", model_file);
  write_bytes(model_file, model_bytes);
  std::vector<char> bad_header = opt_bytes;
  bad_header[8] = 'x';
  write_bytes(opt_file, bad_header);
  expect_refused("the header is not JSON", opt_file);
  write_bytes(opt_file, opt_bytes);
  write_bytes(state_file, {state_bytes.begin(), state_bytes.begin() + 10});
  expect_refused("is not JSON", state_file);
  write_bytes(state_file, state_bytes);
  fs::remove(opt_file);
  expect_refused("(it does not exist)", opt_file);
  write_bytes(opt_file, opt_bytes);

  // trainer_state.json's fields of another type or out of range, never
  // converted (a negative seed wrapped, a fraction cut to an integer).
  for (const auto& [field, value, text] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"step", "x", "step is \"x\"; must be an integer from 0 to 9223372036854775807"},
           {"step", -3, "step is -3; must be an integer from 0"},
           {"step", 2.5, "step is 2.5; must be an integer from 0"},
           {"seed", -1,
            "random_stream.seed is -1; must be an integer from 0 to "
            "18446744073709551615"},
           {"user", nlohmann::json::array(), "user is []; must be an object"},
       }) {
    nlohmann::json state = nlohmann::json::parse(state_bytes);
    (field == "seed" ? state["random_stream"]["seed"] : state[field]) = value;
    const std::string edited = state.dump();
    write_bytes(state_file, {edited.begin(), edited.end()});
    expect_refused(text, state_file);
    EXPECT_THROW(read_checkpoint_state(ckpt), Error);
  }
  write_bytes(state_file, state_bytes);

  // Missing, extra, mis-shaped and mis-typed tensors.
  auto rewrite_model = [&](const std::function<void(nn::NamedTensors&)>& edit) {
    nn::NamedTensors t = saved.model->named_parameters();
    edit(t);
    write_safetensors(model_file, t, {{"format", "pt"}});
  };
  rewrite_model([](nn::NamedTensors& t) { t.erase(t.begin() + 1); });
  expect_refused("has no tensor 'fc1.bias' (model f32[512])", model_file);
  rewrite_model([](nn::NamedTensors& t) { t.emplace_back("fc9.weight", Tensor::zeros({2})); });
  expect_refused("tensor 'fc9.weight' is not in the model", model_file);
  rewrite_model([](nn::NamedTensors& t) { t[0].second = Tensor::zeros({512, 783}); });
  expect_refused("tensor 'fc1.weight' is f32[512,783] in the file, f32[512,784] in the model",
                 model_file);
  rewrite_model([](nn::NamedTensors& t) { t[1].second = Tensor::zeros({512}, DType::f64); });
  expect_refused("tensor 'fc1.bias' is f64[512] in the file, f32[512] in the model", model_file);
  write_bytes(model_file, model_bytes);

  // Another optimizer.
  manual_seed(2);
  Training sgd = make_training(spec, false);
  const std::vector<double> sgd_before = everything(*sgd.model, *sgd.opt);
  EXPECT_THROW(
      {
        try {
          load_checkpoint(ckpt, *sgd.model, *sgd.opt);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("the checkpoint's optimizer is"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_EQ(everything(*sgd.model, *sgd.opt), sgd_before);

  // Not a checkpoint at all.
  try {
    load_checkpoint(temp_dir("empty"), *target.model, *target.opt);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is neither a checkpoint"), std::string::npos) << e.what();
  }
  // The intact checkpoint loads.
  load_checkpoint(ckpt, *target.model, *target.opt);
  EXPECT_EQ(everything(*target.model, *target.opt), everything(*saved.model, *saved.opt));
  fs::remove_all(dir);
}

// A child process saves checkpoints in a loop and is killed (SIGKILL) at a
// random moment, 100 times: the newest checkpoint always loads, and its
// values are one of the states the child saved.
TEST(Checkpoint, AWriterKilledAtAnyMomentLeavesALoadableCheckpoint) {
  const std::string dir = temp_dir("kill");
  const models::Spec spec = models::spec("tiny_mlp");
  manual_seed(3);
  Training r = make_training(spec, true);
  save_checkpoint(dir, *r.model, *r.opt, "{}", 2);
  std::mt19937 rng(42);
  int killed_while_writing = 0;
  int64_t next = 1;
  for (int round = 0; round < 100; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Each save writes state whose every value equals the step count,
      // going on from the newest checkpoint.
      for (int64_t s = next;; ++s) {
        for (const auto& [n, t] : r.model->named_parameters())
          const_cast<Tensor&>(t).copy_(Tensor::full(t.shape(), double(s), t.dtype()));
        r.opt->set_step_count(s);
        save_checkpoint(dir, *r.model, *r.opt, "{}", 2);
      }
    }
    ::usleep(useconds_t(std::uniform_int_distribution<int>(0, 20000)(rng)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    bool leftover = false;
    for (const auto& e : fs::directory_iterator(dir))
      leftover = leftover || e.path().filename().string()[0] == '.';
    killed_while_writing += leftover;
    manual_seed(4);
    Training fresh = make_training(spec, true);
    const CheckpointState st = load_checkpoint(dir, *fresh.model, *fresh.opt);
    next = st.step + 1;
    for (const auto& [n, t] : fresh.model->named_parameters())
      for (double v : t.to_vector())
        ASSERT_TRUE(v == double(st.step) || st.step == 0) << n << " " << v << " step " << st.step;
  }
  std::printf("killed while a temporary checkpoint existed: %d of 100\n", killed_while_writing);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ws
