// The connectionist temporal classification loss (ctc_loss, ctc_loss_grad):
// per sample, the forward (alpha) and backward (beta) recursions over its
// frames and its targets with blanks between and around them, in log space
// and in double whatever the operands' type. Samples are independent and
// each is computed whole on one thread: the same bits on any team.
#pragma once

#include <cstdint>

#include "wholestep/error.hpp"

namespace ws::exec {

struct CtcShape {
  int64_t frames = 0, batch = 0, classes = 0;  // log_probs [T, N, C]
  // Targets per row of a [N, S] targets operand; -1 when they are 1-d, the
  // samples' targets one after another.
  int64_t row = -1;
  int64_t targets = 0;  // elements of the targets operand
  int64_t blank = 0;
  bool zero_infinity = false;
};

// loss[n] = -log p(targets of n | its first input_lengths[n] frames); inf
// where no alignment exists (0 with zero_infinity). A length or a target
// out of range throws ws::Error naming it, its sample and `loc`, before any
// output is written.
template <class T>
void ctc_loss(const CtcShape& s, const T* log_probs, const int64_t* targets,
              const int64_t* input_lengths, const int64_t* target_lengths, T* loss,
              const SourceLoc& loc);

// The gradient torch's ctc_loss gives log_probs, dloss [N] the loss's:
// (exp(lp) - exp(log(sum over the target positions of class c of
// alpha beta) + loss - lp)) dloss for the frames of a sample, 0 past them.
// The first term is not the loss's derivative; log_softmax's backward
// cancels it, so through log-probabilities the two agree.
template <class T>
void ctc_loss_grad(const CtcShape& s, const T* log_probs, const int64_t* targets,
                   const int64_t* input_lengths, const int64_t* target_lengths, const T* dloss,
                   T* dlog_probs, const SourceLoc& loc);

}  // namespace ws::exec
