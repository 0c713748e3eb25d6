// A compiled step allocates nothing on the heap once it is compiled: every
// operator new in this test binary is counted. oneDNN 2.6 builds a small map
// of its arguments inside each primitive execute call and frees it before
// returning (its C API offers no other way to execute); those allocations are
// counted apart, and must all be freed again.
#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "exec/dnnl_backend.hpp"
#include "step/mlp_fixture.hpp"
#include "wholestep/models.hpp"

namespace {
std::atomic<int64_t> g_allocations{0};          // ours: anything outside oneDNN's execute
std::atomic<int64_t> g_backend_allocations{0};  // inside it
std::atomic<int64_t> g_backend_live{0};         // inside it, not yet freed
}  // namespace

void* operator new(size_t n) {
  const bool backend = ws::exec::in_backend_execute();
  (backend ? g_backend_allocations : g_allocations).fetch_add(1, std::memory_order_relaxed);
  if (backend) g_backend_live.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  if (p && ws::exec::in_backend_execute()) g_backend_live.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }
// Every other form that pairs with these, so no allocation made by one
// allocator is freed by another (AddressSanitizer checks that).
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete[](void* p, size_t) noexcept { operator delete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { operator delete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { operator delete(p); }

namespace ws {
namespace {

TEST(NoAllocation, CompiledStepsAllocateNothingPerStep) {
  for (StepMode mode : {StepMode::single_graph, StepMode::three_graph}) {
    for (bool aliasing : {true, false}) {
      testing::SmallMlp run(1);
      TrainStep step(*run.model, *run.opt, run.loss_fn(), {.mode = mode, .aliasing = aliasing});
      auto batches = testing::random_batches(4, 2);
      step.run(batches[0]);  // traces and compiles
      step.run(batches[1]);
      const int64_t before = g_allocations.load(), live = g_backend_live.load();
      step.run(batches[2]);
      step.run(batches[3]);
      EXPECT_EQ(g_allocations.load() - before, 0)
          << mode_name(mode) << (aliasing ? "" : " no alias");
      EXPECT_EQ(g_backend_live.load(), live) << "oneDNN kept memory it allocated while executing";
    }
  }
}

// Hyperparameters that change every step (a learning-rate schedule) change
// nothing that was compiled: plain SGD with weight decay accumulates its
// product into the weight with beta = 1 - lr * wd, and SGD with momentum
// into the momentum buffer with beta = momentum, both read at run time.
TEST(NoAllocation, HyperparametersChangingEveryStepAllocateNothing) {
  for (double momentum : {0.0, 0.9}) {
    testing::SmallMlp run(1, {.lr = 0.1, .momentum = momentum, .weight_decay = 0.01});
    TrainStep step(*run.model, *run.opt, run.loss_fn(), {.mode = StepMode::single_graph});
    auto batches = testing::random_batches(6, 2);
    step.run(batches[0]);  // traces and compiles
    step.run(batches[1]);
    const int64_t live = g_backend_live.load();
    int64_t in_steps = 0;
    for (int i = 2; i < 6; ++i) {
      run.opt->set_lr(0.1 / i);
      run.opt->set_momentum(momentum / i);
      const int64_t before = g_allocations.load();
      step.run(batches[size_t(i)]);
      in_steps += g_allocations.load() - before;
    }
    EXPECT_EQ(in_steps, 0) << "momentum " << momentum;
    EXPECT_EQ(g_backend_live.load(), live) << "oneDNN kept memory it allocated while executing";
  }
}

TEST(NoAllocation, CnnAndGptStepsAllocateNothingPerStep) {
  for (const char* name : {"cnn", "gpt"}) {
    models::Spec spec = models::spec(name);
    spec.batch = 2;
    auto model = models::make(spec);
    optim::Adam opt(*model, {.lr = 1e-3, .max_grad_norm = 1.0});
    TrainStep step(*model, opt, models::loss_fn(*model));
    std::vector<Tensor> batch = models::random_batch(spec, 0);
    step.run(batch);  // traces and compiles
    step.run(batch);
    const int64_t before = g_allocations.load(), live = g_backend_live.load();
    const int64_t backend_before = g_backend_allocations.load();
    step.run(batch);
    step.run(batch);
    EXPECT_EQ(g_allocations.load() - before, 0) << name;
    EXPECT_EQ(g_backend_live.load(), live) << name << ": oneDNN kept memory it allocated";
    // The split is real: the backend's executes do run and do allocate.
    EXPECT_GT(g_backend_allocations.load() - backend_before, 0) << name;
  }
}

TEST(NoAllocation, CounterSeesAllocations) {
  const int64_t before = g_allocations.load();
  auto* v = new std::vector<int>(100);
  delete v;
  EXPECT_GE(g_allocations.load() - before, 2);
}

}  // namespace
}  // namespace ws
