// The process group on MPI (WS_HAVE_MPI), or a group of one without it.
// Every MPI call of wholestep is in this file: the rest of the library sees
// only wholestep/dist.hpp and dist/collectives.hpp.
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "dist/collectives.hpp"
#include "wholestep/error.hpp"

#ifdef WS_HAVE_MPI
#include <mpi.h>
#endif

namespace ws::dist {

namespace {

struct Group {
  bool initialized = false;
  int rank = 0, size = 1;
  Progress progress = Progress::kernels;
  bool threads = false;  // MPI takes calls from several threads
};
Group& group() {
  static Group g;
  return g;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 && n < (1 << 20) ? int(n) : 0;
}

#ifdef WS_HAVE_MPI
void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(fmt::format("{}: {} failed: {}", rank_label(), what, std::string(msg, size_t(len))));
}

MPI_Datatype mpi_type(DType dt) {
  switch (dt) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    case DType::b8: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

// MPI counts are ints: larger buffers go in pieces.
constexpr int64_t kMaxCount = int64_t(1) << 30;
#endif

}  // namespace

bool built_with_mpi() {
#ifdef WS_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int launched_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
    if (int n = env_int(name)) return n;
  return 1;
}

void init() {
  Group& g = group();
  if (g.initialized) return;
#ifdef WS_HAVE_MPI
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    // Only the thread that runs the step calls MPI, unless a thread of its
    // own moves the collectives.
    const int wanted = g.progress == Progress::thread ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
    check_mpi(MPI_Init_thread(nullptr, nullptr, wanted, &provided), "MPI_Init_thread");
    if (provided < wanted)
      throw Error(
          fmt::format("data parallelism: this MPI does not support calls from several "
                      "threads (MPI_THREAD_MULTIPLE), which progress by a thread needs"));
    g.threads = provided >= MPI_THREAD_MULTIPLE;
    // Errors come back as codes and become ws::Errors (abort_job ends the
    // job where one rank cannot go on).
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.size);
#else
  if (launched_world_size() > 1)
    throw Error(fmt::format(
        "data parallelism: this process is one of {} started by an MPI launcher, but this build of "
        "wholestep has no MPI: install Open MPI (apt-get install libopenmpi-dev openmpi-bin) and "
        "build again",
        launched_world_size()));
#endif
  g.initialized = true;
}

void set_progress(Progress p) {
  Group& g = group();
  if (p == Progress::thread && g.initialized && !g.threads && g.size > 1)
    throw Error(
        "data parallelism: progress by a thread must be chosen before the process group "
        "starts (dist::init)");
  g.progress = p;
}

Progress progress_mode() { return group().progress; }

const char* progress_name(Progress p) {
  switch (p) {
    case Progress::kernels: return "kernels";
    case Progress::wait: return "wait";
    case Progress::thread: return "thread";
  }
  return "?";
}

bool initialized() { return group().initialized; }
int rank() { return group().rank; }
int world_size() { return group().size; }

std::string rank_label() {
  const Group& g = group();
  return g.size > 1 ? fmt::format("rank {} of {}", g.rank, g.size) : std::string();
}

void abort_job(const std::string& message, int code) {
  const std::string who = rank_label();
  std::fprintf(stderr, "%s%s%s\n", who.c_str(), who.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
#ifdef WS_HAVE_MPI
  if (group().initialized && group().size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

void broadcast(void* data, size_t bytes, int root) {
  if (world_size() == 1) return;
#ifdef WS_HAVE_MPI
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, size_t(kMaxCount));
    check_mpi(MPI_Bcast(static_cast<char*>(data) + done, int(n), MPI_BYTE, root, MPI_COMM_WORLD),
              "MPI_Bcast");
    done += n;
  }
#endif
}

void all_reduce_sum(void* data, int64_t count, DType dtype) {
  if (world_size() == 1) return;
#ifdef WS_HAVE_MPI
  const size_t es = dtype_size(dtype);
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(count - done, kMaxCount);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + size_t(done) * es, int(n),
                            mpi_type(dtype), MPI_SUM, MPI_COMM_WORLD),
              "MPI_Allreduce");
    done += n;
  }
#endif
}

namespace {

// The second half of a reduce-scatter: `parts` holds every rank's part r of
// its buffer (world_size() parts of `count` elements, by rank); their sum,
// added in rank order, goes to the first `count` elements of `data`.
template <typename T>
void sum_parts(const void* parts, void* data, int64_t count) {
  const T* in = static_cast<const T*>(parts);
  T* out = static_cast<T*>(data);
  std::copy(in, in + count, out);
  for (int r = 1; r < world_size(); ++r) {
    const T* part = in + int64_t(r) * count;
    for (int64_t i = 0; i < count; ++i) out[i] += part[i];
  }
}

void sum_parts(const void* parts, void* data, int64_t count, DType dtype) {
  WS_CHECK(dtype == DType::f32 || dtype == DType::f64)
      << "a reduce-scatter of " << dtype_name(dtype);
  if (dtype == DType::f32) return sum_parts<float>(parts, data, count);
  sum_parts<double>(parts, data, count);
}

}  // namespace

// Open MPI's reduce-scatter reduces the whole buffer onto rank 0 and then
// scatters it: over a network, the whole buffer crosses one way and then
// half of it the other, one after the other. Here every rank sends part r
// of its buffer to rank r and receives its own part from every rank (an
// all-to-all: each link carries a part each way at once), then adds them.
void reduce_scatter_sum(void* data, int64_t count, DType dtype) {
  if (world_size() == 1) return;
#ifdef WS_HAVE_MPI
  WS_CHECK(count <= kMaxCount) << "a shard of " << count << " elements";
  std::vector<std::byte> parts(size_t(count * world_size()) * dtype_size(dtype));
  check_mpi(MPI_Alltoall(data, int(count), mpi_type(dtype), parts.data(), int(count),
                         mpi_type(dtype), MPI_COMM_WORLD),
            "MPI_Alltoall");
  sum_parts(parts.data(), data, count, dtype);
#endif
}

void all_gather_in_place(void* data, int64_t count, DType dtype) {
  if (world_size() == 1) return;
#ifdef WS_HAVE_MPI
  WS_CHECK(count <= kMaxCount) << "a shard of " << count << " elements";
  check_mpi(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, int(count), mpi_type(dtype),
                          MPI_COMM_WORLD),
            "MPI_Allgather");
#endif
}

std::vector<uint64_t> all_gather(uint64_t value) {
  std::vector<uint64_t> all(size_t(world_size()), value);
#ifdef WS_HAVE_MPI
  if (world_size() > 1)
    check_mpi(MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD),
              "MPI_Allgather");
#endif
  return all;
}

std::vector<std::string> all_gather_text(const std::string& text) {
  const std::vector<uint64_t> sizes = all_gather(text.size());
  std::vector<std::string> all(sizes.size());
  for (size_t r = 0; r < sizes.size(); ++r) {
    all[r] = int(r) == rank() ? text : std::string(sizes[r], '\0');
    broadcast(all[r].data(), all[r].size(), int(r));
  }
  return all;
}

// ---------------------------------------------------------------------------
// Collectives in flight

struct Registry {
  // Held around the table and MPI's calls on it when a progress thread
  // runs (Progress::thread); uncontended otherwise.
  std::mutex mutex;
#ifdef WS_HAVE_MPI
  std::vector<MPI_Request> requests;
#endif
  std::vector<InFlight*> owners;
  int active = 0;

  int add(InFlight* f) {
    for (size_t i = 0; i < owners.size(); ++i)
      if (!owners[i]) return owners[i] = f, int(i);
    owners.push_back(f);
#ifdef WS_HAVE_MPI
    requests.push_back(MPI_REQUEST_NULL);
#endif
    return int(owners.size() - 1);
  }
  void remove(int slot) {
    owners[size_t(slot)] = nullptr;
    --active;
  }
  // Tests every collective in flight once (the mutex held when a progress
  // thread runs).
  void test_all() {
#ifdef WS_HAVE_MPI
    for (size_t i = 0; i < owners.size(); ++i) {
      InFlight* f = owners[i];
      if (!f || f->done_seen_) continue;
      int flag = 0;
      check_mpi(MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (flag) f->completed(std::chrono::steady_clock::now());
    }
#endif
  }
};

namespace {

Registry& registry() {
  static Registry r;
  return r;
}

// Progress::thread: tests the collectives in flight every 50 us while any
// is, and sleeps on a condition otherwise. Made after MPI_Init, so it is
// stopped (destroyed) before the MPI_Finalize registered there runs.
class ProgressThread {
 public:
  ProgressThread() : thread_([this] { loop(); }) {}
  ~ProgressThread() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void wake() {
    { std::lock_guard lock(m_); }
    cv_.notify_one();
  }

 private:
  void loop() {
    Registry& r = registry();
    for (;;) {
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stop_ || r.active > 0; });
        if (stop_) return;
      }
      {
        std::lock_guard lock(r.mutex);
        try {
          r.test_all();
        } catch (...) {  // the wait on the step's thread reports MPI's error
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

void wake_progress_thread() {
  static ProgressThread t;
  t.wake();
}

}  // namespace

CommCounters& counters() {
  static CommCounters c;
  return c;
}

namespace {
std::vector<CommEvent>* g_events = nullptr;
}  // namespace

void record_comm_events(std::vector<CommEvent>* log) { g_events = log; }

InFlight::~InFlight() {
  // A step that threw between a start and its wait: complete the collective,
  // so MPI does not write into freed memory. (The other ranks take part in
  // it: they ran the same kernels.)
  if (slot_ >= 0) {
    try {
      wait();
    } catch (...) {
    }
  }
}

void InFlight::start(int64_t bytes, int64_t count, const std::function<void(void*)>& call) {
  WS_CHECK(slot_ < 0) << "a collective started twice";
  bytes_ = bytes;
  started_ = std::chrono::steady_clock::now();
  done_seen_ = false;
  Registry& r = registry();
  std::unique_lock lock(r.mutex);
  slot_ = r.add(this);
  ++r.active;
  if (world_size() == 1) return completed(started_);
#ifdef WS_HAVE_MPI
  WS_CHECK(count <= kMaxCount) << "a collective of " << count << " elements per rank";
  call(&r.requests[size_t(slot_)]);
  lock.unlock();
  if (group().progress == Progress::thread) wake_progress_thread();
#else
  (void)count, (void)call;
#endif
}

void InFlight::start_all_reduce_sum(void* data, int64_t count, DType dtype) {
  start(count * int64_t(dtype_size(dtype)), count, [&]([[maybe_unused]] void* request) {
#ifdef WS_HAVE_MPI
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, int(count), mpi_type(dtype), MPI_SUM,
                             MPI_COMM_WORLD, static_cast<MPI_Request*>(request)),
              "MPI_Iallreduce");
#endif
  });
}

void InFlight::start_reduce_scatter_sum(void* data, int64_t count, DType dtype) {
  const int64_t bytes = count * world_size() * int64_t(dtype_size(dtype));
  if (world_size() > 1) {
    // The same size every step: allocated at the first.
    if (parts_.size() < size_t(bytes)) parts_.resize(size_t(bytes));
    sum_into_ = data;
    sum_count_ = count;
    sum_dtype_ = dtype;
  }
  start(bytes, count, [&]([[maybe_unused]] void* request) {
#ifdef WS_HAVE_MPI
    check_mpi(MPI_Ialltoall(data, int(count), mpi_type(dtype), parts_.data(), int(count),
                            mpi_type(dtype), MPI_COMM_WORLD, static_cast<MPI_Request*>(request)),
              "MPI_Ialltoall");
#endif
  });
}

void InFlight::start_all_gather(void* data, int64_t count, DType dtype) {
  start(count * world_size() * int64_t(dtype_size(dtype)), count,
        [&]([[maybe_unused]] void* request) {
#ifdef WS_HAVE_MPI
          check_mpi(
              MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, int(count), mpi_type(dtype),
                             MPI_COMM_WORLD, static_cast<MPI_Request*>(request)),
              "MPI_Iallgather");
#endif
        });
}

void InFlight::completed(std::chrono::steady_clock::time_point at) {
  done_ = at;
  done_seen_ = true;
}

void InFlight::wait() {
  if (slot_ < 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
#ifdef WS_HAVE_MPI
  if (!done_seen_) {
    check_mpi(MPI_Wait(&r.requests[size_t(slot_)], MPI_STATUS_IGNORE), "MPI_Wait");
    completed(std::chrono::steady_clock::now());
  }
#endif
  const auto t1 = std::chrono::steady_clock::now();
  r.remove(slot_);
  slot_ = -1;
  using ms = std::chrono::duration<double, std::milli>;
  CommCounters& c = counters();
  ++c.collectives;
  c.bytes += bytes_;
  // The time some collective was in flight: collectives are waited for in
  // the order they started, so the union of their spans grows at the end.
  static std::chrono::steady_clock::time_point covered{};
  const auto from = std::max(started_, covered);
  if (done_ > from) c.busy_ms += ms(done_ - from).count();
  covered = std::max(covered, done_);
  c.wait_ms += ms(t1 - t0).count();
  if (g_events) g_events->push_back({started_, done_, bytes_});
  if (sum_into_) {  // a reduce-scatter's parts arrived: their sum (computing, not waiting)
    sum_parts(parts_.data(), sum_into_, sum_count_, sum_dtype_);
    sum_into_ = nullptr;
  }
}

void progress() {
  Registry& r = registry();
  if (r.active == 0 || group().progress != Progress::kernels) return;
  r.test_all();
}

}  // namespace ws::dist
