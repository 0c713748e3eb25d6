// DnnlOp: operands bound once while their buffers stay put, reorders
// around the main primitive, execution through the C API.
#include "exec/dnnl_op.hpp"

#include <omp.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "exec/threads.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

std::atomic<int> g_executing{0};

// One stream a thread: the parts of a weight gradient run on several at
// once (BatchPartsOp).
dnnl::stream& stream() {
  thread_local dnnl::stream s(dnnl_engine());
  return s;
}

void check(dnnl_status_t st, const char* what) {
  WS_CHECK(st == dnnl_success) << "oneDNN " << what << " failed with status " << int(st);
}

std::string arg_name(int arg) {
  switch (arg) {
    case DNNL_ARG_SRC: return "src";
    case DNNL_ARG_WEIGHTS: return "weights";
    case DNNL_ARG_DST: return "dst";
    case DNNL_ARG_DIFF_SRC: return "diff_src";
    case DNNL_ARG_DIFF_WEIGHTS: return "diff_weights";
    case DNNL_ARG_DIFF_DST: return "diff_dst";
    default: return fmt::format("arg{}", arg);
  }
}

void set_handle(const dnnl::memory& m, const void* p) {
  check(dnnl_memory_set_data_handle_v2(m.get(), const_cast<void*>(p), stream().get()),
        "set_data_handle");
}

void execute(const dnnl::primitive& prim, const dnnl_exec_arg_t* args, int n) {
  check(dnnl_primitive_execute(prim.get(), stream().get(), n, args), "execute");
}

}  // namespace

dnnl::engine& dnnl_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

namespace {
std::mutex g_uncached;
}  // namespace

// The cache is the process's: PyTorch (Debian's links the same libdnnl)
// keeps its eager primitives there, and with the cache off for the whole
// process its eager convolutions remade a primitive at every call
// (mobilenet_v2's eager step 1.7-2.2x slower once a step had compiled). So
// it is off only while one of ours is made, then restored (the entries it
// held are dropped: PyTorch makes them again once).
UncachedPrimitives::UncachedPrimitives() : lock_(g_uncached) {
  saved_ = dnnl::get_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(0);
}

UncachedPrimitives::~UncachedPrimitives() { dnnl::set_primitive_cache_capacity(saved_); }

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

bool in_backend_execute() { return g_executing.load(std::memory_order_relaxed) > 0; }

void DnnlOp::run(const void* a, const void* b, void* out, void* scratch, const void* extra,
                 const void*) const {
  // oneDNN sizes its teams from the calling thread's OpenMP settings; a step
  // run from another thread than the one that set the count gets them too.
  // A one-thread op sets the calling thread's count to 1 while it runs (its
  // own setting: the parts of a product run on several threads at once).
  pin_team();
  const int threads = omp_get_max_threads();
  if (one_thread_ && threads != 1) omp_set_num_threads(1);
  struct Restore {
    int threads;
    ~Restore() {
      if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    }
  } restore{threads};
  const void* ptrs[4] = {a, b, out, extra};
  auto* base = static_cast<std::byte*>(scratch);
  if (base != scratch_bound_) bind_scratch(base);
  for (const Operand& o : operands_) {
    if (o.bound == ptrs[o.which]) continue;
    WS_CHECK(ptrs[o.which]) << "oneDNN operand " << arg_name(o.arg) << " run without its pointer";
    set_handle(o.user, ptrs[o.which]);
    o.bound = ptrs[o.which];
  }
  g_executing.fetch_add(1, std::memory_order_relaxed);
  for (const Operand& o : operands_)
    if (o.which != 2 && o.reorder) reorder(o, true);
  execute(main_.prim, main_args_.data(), int(main_args_.size()));
  for (const Operand& o : operands_)
    if (o.which == 2 && o.reorder) reorder(o, false);
  g_executing.fetch_sub(1, std::memory_order_relaxed);
}

void DnnlOp::add_operand(int arg, int which, const dnnl::memory::desc& user,
                         const dnnl::memory::desc& want) {
  Operand o;
  o.arg = arg;
  o.which = which;
  o.user = dnnl::memory(user, dnnl_engine(), DNNL_MEMORY_NONE);
  if (want == user) {
    o.inner = o.user;
  } else {
    o.inner = dnnl::memory(want, dnnl_engine(), DNNL_MEMORY_NONE);
    o.offset = reserve(int64_t(want.get_size()));
    const dnnl::primitive_attr attr = user_scratchpad();
    auto pd = which == 2 ? dnnl::reorder::primitive_desc(o.inner, o.user, attr)
                         : dnnl::reorder::primitive_desc(o.user, o.inner, attr);
    o.reorder = uncached<dnnl::reorder>(pd);
    o.step = int(reorders_.size());
    Step st{o.reorder, scratchpad(pd.scratchpad_desc())};
    if (st.scratchpad) st.scratchpad_offset = reserve(int64_t(pd.scratchpad_desc().get_size()));
    reorders_.push_back(std::move(st));
    reordered_ += (reordered_.empty() ? "" : ", ") + arg_name(arg);
    (arg == DNNL_ARG_WEIGHTS || arg == DNNL_ARG_DIFF_WEIGHTS ? reorders_made_.weights
                                                             : reorders_made_.other) += 1;
  }
  operands_.push_back(std::move(o));
}

// What a one-thread op's impl() says of it.
constexpr std::string_view kOnOneThread = " on one thread";

void DnnlOp::finish(const std::string& what) {
  for (const Operand& o : operands_) main_args_.push_back({o.arg, o.inner.get()});
  if (main_.scratchpad) main_args_.push_back({DNNL_ARG_SCRATCHPAD, main_.scratchpad.get()});
  // gemm:jit splits its sums by the team it finds when it runs (any shape:
  // a [64x9] x [9x3] product rounds differently on 1 and 2 threads).
  one_thread_ = impl_.find("gemm:jit") != std::string::npos;
  if (one_thread_) impl_ += kOnOneThread;
  if (!reordered_.empty()) impl_ += " (reorders: " + reordered_ + ")";
  if (impl_.rfind("ref", 0) == 0) warn_reference(what);
}

void DnnlOp::sum_by_team() {
  if (!one_thread_) return;
  one_thread_ = false;
  impl_.erase(impl_.find(kOnOneThread), kOnOneThread.size());
}

int64_t DnnlOp::operand_bytes(int which) const {
  for (const Operand& o : operands_)
    if (o.which == which) return int64_t(o.user.get_desc().get_size());
  return 0;
}

void DnnlOp::warn_reference(const std::string& what) const {
  static std::mutex m;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(m);
  if (said.insert(what).second)
    std::fprintf(stderr, "wholestep: warning: oneDNN has only its reference kernel (%s) for %s\n",
                 impl_.c_str(), what.c_str());
}

int64_t DnnlOp::reserve(int64_t bytes) {
  const int64_t off = scratch_bytes_;
  scratch_bytes_ += align64(bytes);
  return off;
}

dnnl::memory DnnlOp::scratchpad(const dnnl::memory::desc& d) {
  if (d.get_size() == 0) return {};
  return dnnl::memory(d, dnnl_engine(), DNNL_MEMORY_NONE);
}

void DnnlOp::bind_scratch(std::byte* base) const {
  if (main_.scratchpad) set_handle(main_.scratchpad, base + main_.scratchpad_offset);
  for (const Operand& o : operands_) {
    if (!o.reorder) continue;
    set_handle(o.inner, base + o.offset);
    const Step& s = reorders_[size_t(o.step)];
    if (s.scratchpad) set_handle(s.scratchpad, base + s.scratchpad_offset);
  }
  scratch_bound_ = base;
}

void DnnlOp::reorder(const Operand& o, bool in) const {
  const Step* s = &reorders_[size_t(o.step)];
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, (in ? o.user : o.inner).get()},
                             {DNNL_ARG_TO, (in ? o.inner : o.user).get()},
                             {DNNL_ARG_SCRATCHPAD, s->scratchpad ? s->scratchpad.get() : nullptr}};
  execute(s->prim, args, s->scratchpad ? 3 : 2);
}

}  // namespace ws::exec
