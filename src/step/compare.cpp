#include "wholestep/compare.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace ws {

double max_rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> va = a.to_vector(), vb = b.to_vector();
  WS_CHECK(va.size() == vb.size()) << "comparing " << a.str() << " with " << b.str();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    diff = std::max(diff, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

namespace {

double median(std::vector<double> t) {
  if (t.empty()) return 0;
  std::nth_element(t.begin(), t.begin() + long(t.size() / 2), t.end());
  return t[t.size() / 2];
}

}  // namespace

std::vector<CompareRow> compare_modes(const std::function<TrainSetup()>& make_setup,
                                      const std::vector<CompareConfig>& configs,
                                      const std::vector<std::vector<Tensor>>& batches,
                                      int64_t warmup_steps) {
  return compare_modes(
      make_setup, configs, [&](int64_t i) { return batches[size_t(i)]; }, int64_t(batches.size()),
      warmup_steps);
}

std::vector<CompareRow> compare_modes(const std::function<TrainSetup()>& make_setup,
                                      const std::vector<CompareConfig>& configs,
                                      const BatchFn& batch_at, int64_t steps,
                                      int64_t warmup_steps) {
  std::vector<TrainSetup> setups;
  std::vector<TrainStep> train_steps;
  // Each configuration draws from its own copy of the random stream (dropout
  // masks), so all see the same numbers.
  std::vector<RandomStream> streams;
  for (const CompareConfig& c : configs) {
    setups.push_back(make_setup());
    streams.push_back(random_stream());
    TrainSetup& s = setups.back();
    train_steps.emplace_back(*s.model, *s.opt, s.loss_fn, c);
  }
  std::vector<CompareRow> rows(configs.size());
  std::vector<std::vector<double>> times(configs.size()), comm(configs.size()),
      wait(configs.size());
  for (int64_t b = 0; b < steps; ++b) {
    const std::vector<Tensor> batch = batch_at(b);
    for (size_t i = 0; i < configs.size(); ++i) {  // round robin
      set_random_stream(streams[i]);
      auto t0 = std::chrono::steady_clock::now();
      StepResult r = train_steps[i].run(batch);
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      streams[i] = random_stream();
      if (b >= warmup_steps) {
        times[i].push_back(ms);
        comm[i].push_back(r.comm_ms);
        wait[i].push_back(r.comm_wait_ms);
      }
      rows[i].counters = r.counters;
      rows[i].final_loss = r.loss;
    }
  }
  // Parameters and buffers (BatchNorm running statistics) alike.
  auto state = [](const nn::Module& m) {
    nn::NamedTensors all = m.named_parameters(), buffers = m.named_buffers();
    all.insert(all.end(), buffers.begin(), buffers.end());
    return all;
  };
  const nn::NamedTensors ref = state(*setups[0].model);
  for (size_t i = 0; i < configs.size(); ++i) {
    rows[i].config = configs[i];
    rows[i].ms_per_step = median(times[i]);
    rows[i].comm_ms = median(comm[i]);
    rows[i].comm_wait_ms = median(wait[i]);
    const nn::NamedTensors ps = state(*setups[i].model);
    for (size_t p = 0; p < ps.size(); ++p)
      if (const double d = max_rel_diff(ps[p].second, ref[p].second); d > rows[i].max_rel_diff) {
        rows[i].max_rel_diff = d;
        rows[i].max_diff_at = ps[p].first;
      }
  }
  return rows;
}

std::string config_name(const CompareConfig& c) {
  return std::string(mode_name(c.mode)) + (c.aliasing ? "" : " (no alias)") +
         (c.fuse || c.mode == StepMode::interpret ? "" : " (unfused)") +
         (c.recompute || c.mode == StepMode::interpret ? "" : " (save all)") +
         (c.zero ? " (zero)" : "");
}

std::string format_comparison(const std::vector<CompareRow>& rows) {
  auto mib = [](int64_t b) { return fmt::format("{:.1f} MiB", double(b) / (1 << 20)); };
  std::string s =
      fmt::format("{:<22} {:>9} {:>8} {:>7} {:>8} {:>12} {:>12} {:>10} {:>10}\n", "mode", "ms/step",
                  "speedup", "graphs", "kernels", "copied/step", "between", "peak", "max diff");
  for (const CompareRow& r : rows) {
    s += fmt::format("{:<22} {:>9.2f} {:>7.2f}x {:>7} {:>8} {:>12} {:>12} {:>10} {:>10.2e}\n",
                     config_name(r.config), r.ms_per_step, rows[0].ms_per_step / r.ms_per_step,
                     r.counters.graphs, r.counters.kernels, mib(r.counters.bytes_copied),
                     mib(r.counters.interface_bytes), mib(r.counters.peak_bytes), r.max_rel_diff);
  }
  return s;
}

}  // namespace ws
