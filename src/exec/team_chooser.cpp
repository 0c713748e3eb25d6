#include "exec/team_chooser.hpp"

#include <algorithm>
#include <utility>

namespace ws::exec {

void TeamChooser::Times::add(double s) {
  t[size_t(next)] = s;
  next = (next + 1) % kWindow;
  n = std::min(n + 1, kWindow);
}

double TeamChooser::Times::median() const {
  std::array<double, kWindow> v = t;
  for (int i = 1; i < n; ++i)  // insertion sort: at most kWindow values
    for (int j = i; j > 0 && v[size_t(j)] < v[size_t(j - 1)]; --j)
      std::swap(v[size_t(j)], v[size_t(j - 1)]);
  return n == 0 ? 0 : n % 2 ? v[size_t(n / 2)] : (v[size_t(n / 2 - 1)] + v[size_t(n / 2)]) / 2;
}

TeamChooser::TeamChooser(int pool) : pool_(std::max(pool, 1)), chosen_(pool_) {}

int TeamChooser::team_for_step(double now) {
  if (pool_ == 1) return 1;
  if (next_probe_ < 0) next_probe_ = now + interval_;
  const bool slower =
      baseline_ > 0 && recent_.n == kWindow && recent_.median() > kSlower * baseline_;
  const bool due = now >= next_probe_ && since_probe_ >= (decided_ ? kMinSteps : kWindow);
  if (probing_ == 0 && recent_.n > 0 && (due || slower)) {
    probing_ = kProbeSteps;
    probe_.clear();
  }
  return probing_ > 0 ? other() : chosen_;
}

void TeamChooser::ran(int team, double seconds, double now) {
  if (pool_ == 1) return;
  if (probing_ > 0 && team == other()) {
    probe_.add(seconds);
    if (--probing_ == 0) decide(now);
    return;
  }
  if (team != chosen_) return;
  ++since_probe_;
  recent_.add(seconds);
  if (baseline_ == 0 && recent_.n == kWindow) baseline_ = recent_.median();
}

void TeamChooser::decide(double now) {
  double lost = 0;  // seconds the probe's steps took beyond the chosen team's
  if (probe_.median() < kGain * recent_.median()) {
    chosen_ = other();
    recent_ = probe_;
    interval_ = kFirstInterval;
    ++switches_;
  } else {
    interval_ = std::min(2 * interval_, kMaxInterval);
    lost = kProbeSteps * std::max(0.0, probe_.median() - recent_.median());
  }
  baseline_ = recent_.n == kWindow ? recent_.median() : 0;
  decided_ = true;
  next_probe_ = now + std::max(interval_, lost / kProbeBudget);
  since_probe_ = 0;
}

}  // namespace ws::exec
