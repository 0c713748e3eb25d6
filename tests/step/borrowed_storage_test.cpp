// Compiled steps on borrowed memory, as a frontend binds another library's
// tensors (detail::borrow): every parameter, buffer, optimizer state,
// random stream and data tensor of a reference model is moved to memory of
// exactly its size, then the model trains in every mode and must end in
// the bits the same steps give on our own storage (64-byte aligned and
// padded to 64 bytes, where a kernel reading a whole register past a
// tensor's end goes unnoticed). Three placements:
//
//   unaligned     4 bytes (8 for 8-byte elements: C++ wants element
//                 alignment, and borrow refuses less) into a new[] block of
//                 exactly that much more: not 16- or 64-byte aligned, and
//                 under AddressSanitizer (scripts/sanitize.sh) our code's
//                 accesses past the last byte are reported. Not all: ASan
//                 checks a wide access at its first and last byte, so a
//                 64-byte register read from a tensor's last element can
//                 end in a neighbouring block, unseen.
//   guard_after   ending where an inaccessible page begins: any access
//                 past the end faults, a whole register's too, and also in
//                 oneDNN's JIT kernels, which ASan cannot see into.
//   guard_before  starting where an inaccessible page ends: the same for
//                 accesses before the start.
//
// The sizes are small (three steps, small batches, a small gpt) so the
// sanitized build runs it in seconds; odd batches and a context of 20
// leave tails that fill no vector register.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "capture/random.hpp"
#include "tensor/tensor_impl.hpp"
#include "test_util.hpp"
#include "wholestep/models.hpp"

namespace ws {
namespace {

enum class Placement { own, unaligned, guard_after, guard_before };

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::own: return "own";
    case Placement::unaligned: return "unaligned";
    case Placement::guard_after: return "guard_after";
    case Placement::guard_before: return "guard_before";
  }
  return "?";
}

// `bytes` of memory placed as `p` says (not own) for elements of `esize`
// bytes, and what frees it.
std::pair<void*, std::shared_ptr<void>> borrowed_block(size_t bytes, size_t esize, Placement p) {
  if (p == Placement::unaligned) {
    const size_t offset = esize == 8 ? 8 : 4;
    char* block = new char[bytes + offset];
    return {block + offset,
            std::shared_ptr<void>(block, [](void* b) { delete[] static_cast<char*>(b); })};
  }
  // [guard page][span][guard page], the block at either end of the span.
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t span = (bytes + page - 1) / page * page, total = span + 2 * page;
  auto* m = static_cast<char*>(
      mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  EXPECT_NE(m, MAP_FAILED);
  EXPECT_EQ(mprotect(m, page, PROT_NONE), 0);
  EXPECT_EQ(mprotect(m + page + span, page, PROT_NONE), 0);
  return {p == Placement::guard_after ? m + page + span - bytes : m + page,
          std::shared_ptr<void>(m, [total](void* b) { munmap(b, total); })};
}

// Moves `t`'s values to borrowed memory placed as `p`: the TensorImpl is
// shared, so the model, the optimizer and the step see the new storage.
// Returns where the values now are.
void* rebind(const Tensor& t, Placement p) {
  detail::TensorImpl& impl = *t.impl();
  if (p == Placement::own) return impl.storage->data;
  const size_t bytes = t.nbytes();
  auto [data, owner] = borrowed_block(bytes, dtype_size(t.dtype()), p);
  std::memcpy(data, impl.storage->data, bytes);
  impl.storage = detail::borrow(data, impl.type, std::move(owner)).impl()->storage;
  return data;
}

// The process's random stream, borrowed for a scope and given back (with
// the values it reached) after it.
class BorrowedRng {
 public:
  explicit BorrowedRng(Placement p) {
    if (p == Placement::own) return;
    detail::RngState& st = detail::rng_state();
    for (Tensor* t : {&st.seed, &st.offset}) {
      saved_.push_back(t->impl()->storage);
      rebind(*t, p);
    }
  }
  ~BorrowedRng() {
    if (saved_.empty()) return;
    detail::RngState& st = detail::rng_state();
    Tensor* ts[] = {&st.seed, &st.offset};
    for (size_t i = 0; i < 2; ++i) {
      std::memcpy(saved_[i]->data, ts[i]->impl()->storage->data, saved_[i]->bytes);
      ts[i]->impl()->storage = saved_[i];
    }
  }
  BorrowedRng(const BorrowedRng&) = delete;
  BorrowedRng& operator=(const BorrowedRng&) = delete;

 private:
  std::vector<std::shared_ptr<detail::Storage>> saved_;
};

struct Config {
  StepMode mode;
  bool fuse = true;
};

std::string config_name(const Config& c) {
  return std::string(mode_name(c.mode)) + (c.fuse ? "" : " unfused");
}

// What a run leaves: every persistent tensor's bytes by name, the losses,
// and the step's arena and copies.
struct Outcome {
  std::vector<std::pair<std::string, std::vector<char>>> tensors;
  std::vector<double> losses;
  int64_t arena_bytes = 0, bytes_copied = 0;
};

constexpr int kSteps = 3;

Outcome train(const models::Spec& spec, const models::OptimizerChoice& choice, const Config& c,
              Placement p) {
  BorrowedRng rng(p);
  manual_seed(5);
  TrainSetup setup = models::make_setup(spec, choice);
  nn::NamedTensors persistent = setup.model->named_parameters();
  for (auto& b : setup.model->named_buffers()) persistent.push_back(b);
  for (auto& s : setup.opt->state()) persistent.push_back(s);
  std::vector<void*> where;
  for (auto& [name, t] : persistent) where.push_back(rebind(t, p));

  TrainStep step(*setup.model, *setup.opt, setup.loss_fn, {.mode = c.mode, .fuse = c.fuse});
  Outcome out;
  for (int i = 0; i < kSteps; ++i) {
    std::vector<Tensor> batch = models::random_batch(spec, uint64_t(i));
    for (const Tensor& t : batch) rebind(t, p);
    const StepResult r = step.run(batch);
    out.losses.push_back(r.loss);
    out.arena_bytes = r.counters.arena_bytes;
    out.bytes_copied = r.counters.bytes_copied;
  }
  for (size_t i = 0; i < persistent.size(); ++i) {
    const auto& [name, t] = persistent[i];
    // Updated where it lies: the step neither replaced nor shadowed it.
    EXPECT_EQ(t.impl()->storage->data, where[i]) << name;
    const char* d = static_cast<const char*>(t.impl()->storage->data);
    out.tensors.emplace_back(name, std::vector<char>(d, d + t.nbytes()));
  }
  const detail::RngState& st = detail::rng_state();
  out.tensors.emplace_back("rng offset", std::vector<char>(8));
  std::memcpy(out.tensors.back().second.data(), st.offset.impl()->storage->data, 8);
  return out;
}

struct Case {
  std::string model, optimizer;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " " << c.optimizer; }

// The model `name` at small odd batches; gpt also small.
models::Spec small_spec(const std::string& name) {
  models::Spec spec = models::spec(name);
  spec.batch = name == "tiny_mlp" ? 5 : name == "gpt" ? 1 : 3;
  if (name == "gpt") spec.gpt = {.context = 20, .d_model = 32, .heads = 2, .layers = 1};
  return spec;
}

class BorrowedStorage : public ::testing::TestWithParam<Case> {};

TEST_P(BorrowedStorage, EveryModeGivesTheBitsOfOwnStorage) {
  const Case& k = GetParam();
  const models::Spec spec = small_spec(k.model);
  const models::OptimizerChoice choice =
      k.optimizer == "sgd" ? models::OptimizerChoice{.name = "sgd", .momentum = 0.9}
                           : models::OptimizerChoice{.name = "adamw"};
  for (const Config& c : {Config{StepMode::interpret}, Config{StepMode::three_graph},
                          Config{StepMode::single_graph}, Config{StepMode::single_graph, false}}) {
    const Outcome own = train(spec, choice, c, Placement::own);
    for (Placement p : {Placement::unaligned, Placement::guard_after, Placement::guard_before}) {
      SCOPED_TRACE(config_name(c) + ", " + placement_name(p));
      const Outcome b = train(spec, choice, c, p);
      EXPECT_EQ(b.losses, own.losses);
      // Borrowed memory changes neither the plan nor the copies.
      EXPECT_EQ(b.arena_bytes, own.arena_bytes);
      EXPECT_EQ(b.bytes_copied, own.bytes_copied);
      ASSERT_EQ(b.tensors.size(), own.tensors.size());
      for (size_t i = 0; i < own.tensors.size(); ++i)
        EXPECT_TRUE(b.tensors[i].second == own.tensors[i].second)
            << own.tensors[i].first << " differs after " << kSteps << " steps";
    }
  }
}

// The placements themselves: unaligned memory is taken where its elements
// allow it and refused where they do not; guarded memory lies between
// pages that fault.
TEST(BorrowedStorageSetup, BorrowTakesElementAlignedMemoryAndRefusesLess) {
  auto [data, owner] = borrowed_block(24, 8, Placement::unaligned);
  char* p = static_cast<char*>(data);
  EXPECT_EQ(detail::borrow(p - 4, ir::Type{DType::f32, {6}}, owner).nbytes(), 24u);
  const std::string error = testing::error_of([&] {
    detail::borrow(p - 4, ir::Type{DType::i64, {3}}, owner);
  });
  EXPECT_NE(error.find("is not aligned to its 8-byte elements"), std::string::npos) << error;
}

TEST(BorrowedStorageSetup, GuardedMemoryFaultsOnTheBytesBeforeAndAfterIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto [after, owner_a] = borrowed_block(40, 4, Placement::guard_after);
  auto [before, owner_b] = borrowed_block(40, 4, Placement::guard_before);
  const volatile char* a = static_cast<const char*>(after);
  const volatile char* b = static_cast<const char*>(before);
  EXPECT_EQ(a[0] + a[39] + b[0] + b[39], 0);  // the blocks are there (zeroed)
  EXPECT_DEATH(a[40], "");
  EXPECT_DEATH(b[-1], "");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* m : {"mlp", "tiny_mlp", "cnn", "gpt"})
    for (const char* o : {"sgd", "adamw"}) out.push_back({m, o});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, BorrowedStorage, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.model + "_" + info.param.optimizer;
                         });

}  // namespace
}  // namespace ws
