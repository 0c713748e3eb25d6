// Collectives over the process group (wholestep/dist.hpp): the blocking ones
// a step uses when it compiles (parameters broadcast from rank 0, graph
// hashes compared) and the interpreter runs, and the non-blocking all-reduce
// the compiled step's kernels start and wait for. In a group of one each is
// what it would be over one process (a copy or nothing), so callers need no
// special case.
//
// Progress. MPI moves a non-blocking collective's data only while some MPI
// call runs on this process (Open MPI over TCP or shared memory has no
// progress thread of its own), so a step calls progress() between its
// kernels while a collective is in flight: each call tests the collectives
// in flight once, which advances all of them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "wholestep/dist.hpp"
#include "wholestep/dtype.hpp"

namespace ws::dist {

// Blocking, on every rank of the group, in the same order everywhere.
void broadcast(void* data, size_t bytes, int root);
// Sums `count` elements of f32 or f64 `data` over the ranks, in place.
void all_reduce_sum(void* data, int64_t count, DType dtype);
// Rank r's part of the sum over the ranks of `data` (world_size() parts of
// `count` elements each, f32 or f64), into its first `count` elements: the
// parts exchanged all-to-all, then added in rank order.
void reduce_scatter_sum(void* data, int64_t count, DType dtype);
// Every rank's part r of `data` (world_size() parts of `count` elements)
// from rank r, in place.
void all_gather_in_place(void* data, int64_t count, DType dtype);
// Every rank's value, by rank.
std::vector<uint64_t> all_gather(uint64_t value);
// Every rank's text, by rank (for messages: what differs between ranks).
std::vector<std::string> all_gather_text(const std::string& text);

// One non-blocking collective, started by one kernel of a step and
// completed by another. Not copyable: MPI holds its address while it runs.
class InFlight {
 public:
  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight();

  // Starts summing `count` elements of `data` over the ranks, in place.
  // `data` must not be touched until wait() returns.
  void start_all_reduce_sum(void* data, int64_t count, DType dtype);
  // Starts reduce_scatter_sum (`count`: one rank's part).
  void start_reduce_scatter_sum(void* data, int64_t count, DType dtype);
  // Starts all_gather_in_place (`count`: one rank's part).
  void start_all_gather(void* data, int64_t count, DType dtype);
  // Blocks until the collective is complete.
  void wait();
  bool in_flight() const { return slot_ >= 0; }

 private:
  friend struct Registry;
  // Registers the collective (its bytes: the whole buffer) and, in a group
  // of more than one, calls `call` with where MPI keeps its request (an
  // MPI_Request*) to start it; in a group of one it is complete at once.
  void start(int64_t bytes, int64_t count, const std::function<void(void*)>& call);
  void completed(std::chrono::steady_clock::time_point at);
  int slot_ = -1;  // its request in the process's table of collectives in flight
  int64_t bytes_ = 0;
  // A reduce-scatter receives every rank's part here and sums them into
  // sum_into_ at its wait.
  std::vector<std::byte> parts_;
  void* sum_into_ = nullptr;
  int64_t sum_count_ = 0;
  DType sum_dtype_ = DType::f32;
  std::chrono::steady_clock::time_point started_, done_;
  bool done_seen_ = false;
};

// Tests every collective in flight once (cheap when none is).
void progress();

// A completed non-blocking collective, for a timeline (TrainStep::profile).
struct CommEvent {
  std::chrono::steady_clock::time_point start, done;  // done: when its completion was seen
  int64_t bytes = 0;
};
// While `log` is set, each collective appends itself to it as it is waited
// for (nullptr: none is recorded).
void record_comm_events(std::vector<CommEvent>* log);

// What this process's collectives cost, summed since the last reset.
struct CommCounters {
  int64_t collectives = 0;  // completed non-blocking collectives
  int64_t bytes = 0;        // bytes each reduced (its buffer, once)
  double busy_ms = 0;       // while some collective was in flight (from its start until
                            // its completion was seen)
  double wait_ms = 0;       // blocked in wait(): the part not hidden behind compute
};
CommCounters& counters();

}  // namespace ws::dist
