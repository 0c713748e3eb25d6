// Gradient accumulation (StepOptions::accumulate = k): the optimizer
// updates once every k calls, from the sum of their gradients, as torch's
//
//   for x, y in micro_batches: loss_fn(model(x), y).backward()
//   opt.step(); opt.zero_grad()
//
// Each signature compiles two step graphs from one trace (append_step):
//
//   summing  forward and backward, and `sum += gradient` for every
//            parameter, in place (outputs aliased to the sums' inputs);
//            buffers (BatchNorm's running statistics) and the random stream
//            advance as in any step; parameters, optimizer state and the
//            step count are not touched (nor read).
//   update   the usual step, its update reading `gradient + sum` (clipping,
//            the non-finite guard and a data-parallel reduction all see the
//            total), then every sum set back to zero.
//
// Calls 1 .. k-1 of a cycle run the summing graph, call k the update graph.
// The sums are inputs of role buffer named "accumulated_grad.<parameter>",
// bound to tensors the StepSource keeps (Accumulation), so that every
// compiled signature (a short last batch, a frontend's step per key) sums
// into the same ones; they are rank-local (never broadcast): a
// data-parallel step reduces the total only in the update graph, once per
// cycle, as DDP's no_sync() does.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.hpp"
#include "wholestep/tensor.hpp"

namespace ws::step {

struct CapturedStep;

// The sums and where the cycle is.
struct Accumulation {
  // Calls of the current cycle whose gradients the sums hold (0 .. k-1).
  int64_t calls = 0;
  // Per param input name, its gradient sum (created by accumulator_inputs).
  std::map<std::string, Tensor> grads;
  // The sums a compiled graph is bound to: their storage stays.
  std::set<std::string> bound;
};

// The prefix of a sum's input name.
inline constexpr const char* kAccumulatedPrefix = "accumulated_grad.";

// Adds one input per param input of `cap`'s graph (in their order): role
// buffer, named kAccumulatedPrefix + the parameter's name, bound to its sum
// in `acc` (made zero when missing; a ws::Error when the parameter's type
// changed). Returns them.
std::vector<ir::ValueId> accumulator_inputs(CapturedStep& cap, Accumulation& acc);

// Copies of the sums, by parameter name.
std::vector<std::pair<std::string, Tensor>> saved_sums(const Accumulation& acc);

// Sets the cycle back to `calls` calls summed into `grads` (by parameter
// name; a sum not named is set to zero), for a cycle saved mid-way. A
// ws::Error, before anything is written, when `calls` is outside [0, k),
// when a name is given twice, or when a tensor's type differs from its
// bound sum's (one no graph is bound to yet is checked against its
// parameter when a graph is compiled). `who` starts the message.
void load_sums(Accumulation& acc, int64_t k, int64_t calls,
               const std::vector<std::pair<std::string, Tensor>>& grads, const char* who);

}  // namespace ws::step
