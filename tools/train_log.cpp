#include "train_log.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "options.hpp"

namespace cli {

MetricsLog::MetricsLog(const std::string& path, bool append)
    : path_(path), file_(std::fopen(path.c_str(), append ? "a" : "w")) {
  if (!file_)
    throw UsageError(fmt::format("--metrics {}: cannot open it ({})", path, std::strerror(errno)));
}

void MetricsLog::write(const nlohmann::ordered_json& record) {
  if (!file_) return;
  // Text that is not UTF-8 (a sample of a byte-level model) is written
  // with replacement characters rather than refused.
  const std::string line =
      record.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size() ||
      std::fflush(file_.get()) != 0) {
    const int err = errno;
    file_.reset();  // closed once: a later write is dropped, not retried
    throw ws::Error(fmt::format("--metrics {}: cannot write ({}); the run stops here", path_,
                                err ? std::strerror(err) : "write failed"));
  }
}

double rounded(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}

std::string format_duration(double seconds) {
  const int64_t s = int64_t(std::llround(std::max(seconds, 0.0)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, s / 60 % 60);
}

bool Progress::due(bool logged) const {
  if (logged) return true;
  return terminal_ &&
         (!open_ || std::chrono::steady_clock::now() - drawn_ >= std::chrono::milliseconds(200));
}

void Progress::update(const std::string& line) {
  if (!terminal_) {
    fmt::print(out_, "{}\n", line);
  } else {
    // A line longer than the terminal would wrap, and \r would return to
    // the start of its last row only: cut it to the width.
    winsize ws{};
    const size_t width =
        ::ioctl(::fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col - 1 : 79;
    // \r: back to the line's start; \033[K: clear what a longer line left.
    fmt::print(out_, "\r{}\033[K", line.substr(0, width));
    open_ = true;
    drawn_ = std::chrono::steady_clock::now();
  }
  std::fflush(out_);
}

void Progress::break_line() {
  if (!open_) return;
  fmt::print(out_, "\n");
  std::fflush(out_);
  open_ = false;
}

void StepMeter::add(double loss, bool skipped, double seconds) {
  ++steps_;
  seconds_ += seconds;
  if (!skipped) loss_sum_ += loss, ++counted_;
}

double StepMeter::mean_loss() const {
  return counted_ ? loss_sum_ / double(counted_) : std::numeric_limits<double>::quiet_NaN();
}

void StepMeter::reset() { *this = StepMeter(); }

}  // namespace cli
