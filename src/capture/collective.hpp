// Reductions over the process group in a traced function (the layers'
// synchronized statistics): a collective in the graph when tracing, a
// blocking one when computing eagerly.
#pragma once

#include "wholestep/tensor.hpp"

namespace ws::capture {

// The mean of x over the ranks (x itself in a group of one), in x's shape.
Tensor all_reduce_mean(const Tensor& x, Loc loc = Loc::current());

// Whether layers with batch statistics (BatchNorm) average them over the
// ranks while this thread traces: set by a SyncBatchStatistics in scope.
bool sync_batch_statistics();

class SyncBatchStatistics {
 public:
  explicit SyncBatchStatistics(bool on);
  ~SyncBatchStatistics();
  SyncBatchStatistics(const SyncBatchStatistics&) = delete;
  SyncBatchStatistics& operator=(const SyncBatchStatistics&) = delete;

 private:
  bool prev_;
};

}  // namespace ws::capture
