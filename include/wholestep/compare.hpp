// The comparison: the same model, data, seed and optimizer trained in each
// mode, step by step in round robin (so machine noise falls on every mode
// alike), with time, counters and agreement after the last step.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wholestep/step.hpp"

namespace ws {

// Everything one run needs; made fresh (same seed) for every mode.
struct TrainSetup {
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  LossFn loss_fn;
};

// One row of a comparison: the options its step is compiled with.
using CompareConfig = StepOptions;

struct CompareRow {
  CompareConfig config;
  double ms_per_step = 0;  // median over the timed steps
  StepCounters counters;
  // Data parallel, medians over the timed steps: collectives in flight, and
  // blocked waiting for them (StepResult).
  double comm_ms = 0, comm_wait_ms = 0;
  double final_loss = 0;
  // Largest over parameters of max|p - p_ref| / max|p_ref|, against the first
  // configuration after the last step.
  double max_rel_diff = 0;
  std::string max_diff_at;  // the parameter or buffer that has it ("" when all agree exactly)
};

// `batch_at(i)` is the data of step i (0 <= i < steps), asked for once per
// step and trained on by every configuration, so a long comparison holds
// one batch at a time. The first `warmup_steps` steps are not timed.
using BatchFn = std::function<std::vector<Tensor>(int64_t step)>;
std::vector<CompareRow> compare_modes(const std::function<TrainSetup()>& make_setup,
                                      const std::vector<CompareConfig>& configs,
                                      const BatchFn& batch_at, int64_t steps, int64_t warmup_steps);
// The same over batches made beforehand, one per step.
std::vector<CompareRow> compare_modes(const std::function<TrainSetup()>& make_setup,
                                      const std::vector<CompareConfig>& configs,
                                      const std::vector<std::vector<Tensor>>& batches,
                                      int64_t warmup_steps);

// A configuration's name in the table: the mode, then "(no alias)",
// "(unfused)", "(save all)" for what it turns off, "(zero)" for ZeRO.
std::string config_name(const CompareConfig& c);

// A table: mode, ms/step, speedup over the first row, graphs/step,
// kernels/step, bytes copied/step, materialized between graphs, peak memory,
// max relative difference.
std::string format_comparison(const std::vector<CompareRow>& rows);

// Largest |a - b| over the largest |b|, as the test of agreement uses.
double max_rel_diff(const Tensor& a, const Tensor& b);

}  // namespace ws
