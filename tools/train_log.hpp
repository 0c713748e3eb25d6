// What a training run reports as it goes: the progress line on stdout and
// the metrics file (--metrics), one JSON object per line.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace cli {

// The metrics file: each record is one line of JSON, flushed as it is
// written, so a run that is killed keeps every record it wrote. A resumed
// run appends to it.
class MetricsLog {
 public:
  // No path: records are dropped. Opens (truncating, or appending) `path`;
  // a file that cannot be opened is a ws::Error naming it.
  MetricsLog() = default;
  MetricsLog(const std::string& path, bool append);
  // A write that fails (a full disk: the flush is checked, not only the
  // open) is a ws::Error naming the file and the system's reason, which
  // stops the run (exit status 1); checkpoints saved before stay as they are.
  void write(const nlohmann::ordered_json& record);

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
};

// `x` to `digits` decimals, for figures a record need not carry to the last
// bit (times, rates, epochs).
double rounded(double x, int digits);

// "42s", "3m05s", "1h02m".
std::string format_duration(double seconds);

// The progress line. On a terminal it is one line rewritten in place (\r)
// at most every 0.2 s, cut to the terminal's width; otherwise (piped to a
// file or a log) each logged step is a plain line of its own.
class Progress {
 public:
  Progress(std::FILE* out, bool terminal) : out_(out), terminal_(terminal) {}
  // Whether the status after a step is drawn: a logged step's always; on a
  // terminal another's when 0.2 s have passed since the last. The caller
  // makes the line only then, not every step.
  bool due(bool logged) const;
  // Draws the status after a step that is due.
  void update(const std::string& line);
  // Ends a line being rewritten, so that what is printed next starts on a
  // line of its own (nothing to do when piped).
  void break_line();

 private:
  std::FILE* out_;
  bool terminal_;
  bool open_ = false;  // a rewritten line is on the screen, without its newline
  std::chrono::steady_clock::time_point drawn_{};
};

// The steps between two logged steps: mean loss, wall time per step and
// the number of steps, for the progress line and the metrics.
class StepMeter {
 public:
  // A step ran in `seconds`; its loss counts unless it was skipped.
  void add(double loss, bool skipped, double seconds);
  int64_t steps() const { return steps_; }
  // The mean loss of the steps not skipped (NaN when all were).
  double mean_loss() const;
  double ms_per_step() const { return steps_ ? 1000 * seconds_ / double(steps_) : 0; }
  // Examples per second at `batch` examples a step (0 before any time).
  double per_second(int64_t batch) const {
    return seconds_ > 0 ? double(batch) * double(steps_) / seconds_ : 0;
  }
  // Starts the next interval.
  void reset();

 private:
  double loss_sum_ = 0, seconds_ = 0;
  int64_t steps_ = 0, counted_ = 0;
};

}  // namespace cli
