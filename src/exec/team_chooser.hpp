// Whether a step runs on the whole pool or on one thread, chosen from how
// long steps take.
//
// Every parallel region waits for its slowest thread. When another process
// holds a core, the thread that shares it runs in the scheduler's slices of
// milliseconds, and a step of hundreds of regions waits for it again and
// again: on 2 cores with one busy neighbour, the cnn's step took 3.4 times
// its quiet time on two threads, while one thread kept its quiet speed (the
// neighbour has the other core). The cause can be a neighbour, a cgroup
// quota or a host that slows one virtual CPU; what matters is which team
// runs the step faster now, and that is measured rather than guessed.
//
// The chooser keeps running the team it has chosen, and now and then runs
// a few steps on the other (a probe): it switches when their median is
// clearly faster than the median of its recent steps. Probes come one
// second apart at first and back off to half a minute while the choice
// holds, never fewer than kMinSteps steps of the chosen team apart (a step
// of a large model can take longer than the interval: probing by the clock
// alone would run most of its steps on the slower team), and never so often
// that the time a probe lost (its steps' time beyond the chosen team's)
// exceeds kProbeBudget of the time since the last (twenty steps apart, a
// model whose step takes 10 s on two threads and 19 s on one lost a tenth
// of its time to probes); except the first, which comes once kWindow steps
// are timed (a machine loaded from the start, a large model's step ten
// times slower on two threads than on one, would otherwise wait twenty slow
// steps). When recent steps turn much slower than at the last decision (a
// neighbour arrives), a probe comes at once. Both teams give the same bits,
// so the choice changes only the time.
#pragma once

#include <array>
#include <cstdint>

namespace ws::exec {

class TeamChooser {
 public:
  static constexpr int kWindow = 5;       // recent steps of the chosen team
  static constexpr int kProbeSteps = 3;   // steps of the other team a probe runs
  static constexpr double kGain = 0.85;   // the other team must take less than this
  static constexpr double kSlower = 1.5;  // recent steps this much slower: probe now
  static constexpr double kFirstInterval = 1, kMaxInterval = 30;  // seconds between probes
  static constexpr int kMinSteps = 20;          // chosen-team steps between timed probes, at least
  static constexpr double kProbeBudget = 0.01;  // of the time, a probe may lose at most

  // `pool`: the threads of the whole pool (1: nothing to choose).
  explicit TeamChooser(int pool);

  // The team for the step starting at `now` (seconds on a steady clock).
  int team_for_step(double now);
  // The step run on `team` threads took `seconds` (steps that compiled or
  // ran other work are not reported).
  void ran(int team, double seconds, double now);

  int chosen() const { return chosen_; }
  int64_t switches() const { return switches_; }

 private:
  struct Times {
    std::array<double, kWindow> t{};
    int n = 0, next = 0;
    void add(double s);
    double median() const;
    void clear() { n = next = 0; }
  };
  int other() const { return chosen_ == pool_ ? 1 : pool_; }
  void decide(double now);

  int pool_, chosen_;
  Times recent_, probe_;
  int probing_ = 0;          // steps left in the current probe
  int64_t since_probe_ = 0;  // chosen-team steps since the last probe (or the start)
  double baseline_ = 0;      // recent median at the last decision
  double next_probe_ = -1;   // when the next probe starts (-1: one interval after the first step)
  double interval_ = kFirstInterval;
  bool decided_ = false;  // a probe has been decided
  int64_t switches_ = 0;
};

}  // namespace ws::exec
