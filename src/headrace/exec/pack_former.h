// The two packing policies' common part (exec/batch_formers.h: pack, pack planned): the
// consumer's loop over a PackingQueue (exec/packer.h). Input batches are pulled in order
// and pushed (the policy's Push), packed batches popped in order; the samples the packer
// lost are counted against the run's error budget as their input batch is packed, and a
// packed batch left with no samples is not delivered (unless the run follows positions):
// its errors go with the next one.
#pragma once

#include <optional>
#include <vector>

#include "headrace/exec/batch_formers.h"
#include "headrace/exec/packer.h"
#include "headrace/exec/thread_annotations.h"

namespace headrace {

class PackFormer : public BatchFormer {
 public:
  // `deliver_empty`: deliver packed batches with no samples (the run follows positions).
  PackFormer(PackingQueue queue, bool deliver_empty)
      : queue_(std::move(queue)), deliver_empty_(deliver_empty) {}

  std::string_view name() const override { return "pack"; }
  bool keeps_sample_rows() const override { return true; }
  bool counts_losses() const override { return true; }
  Result<std::optional<Batch>> Next(BatchInput& input) final;
  // Whether Next returns without waiting for input: an empty packed batch does not count
  // unless it is delivered (Next skips it and pulls the next input batch).
  bool ready() const final {
    return deliver_empty_ ? queue_.size() > 0 : queue_.HoldsSamples();
  }
  int64_t inputs_held() const final { return queue_.size() > 0 ? 1 : 0; }
  std::optional<PackState> state() const final;
  std::optional<PackStats> stats() const final;

  // batch.pack as a run packs it: in the consumer's batch memory (`allocator`; null: the
  // heap), keeping freed packed batches up to the batch budget (a packed batch of large
  // patches is hundreds of MB; one the pool cannot hold faults in fresh pages: with
  // half, 100-430 MB of the VLM bench's packed batches were fresh each pass, none now).
  static PackOptions OptionsFor(const FormingRun& run);

 protected:
  // Adds input batch `in`, at `position` among its epoch's (rank-local), to the queue.
  virtual Status Push(const Batch& in, int64_t position, bool last_in_epoch,
                      BatchInput& input);

  PackingQueue queue_;

 private:
  const bool deliver_empty_;
  int64_t epoch_batches_ = -1;  // the input's, from the first Next()
  // The errors of packed batches left undelivered as empty: they go with the next one.
  std::vector<SampleError> held_errors_;
  int64_t window_charged_ = 0;  // the packer's window, charged to the batch budget
  mutable Mutex mu_;  // the copies below are read from any thread
  std::optional<PackStats> stats_ HR_GUARDED_BY(mu_);
  std::optional<PackState> state_ HR_GUARDED_BY(mu_);
};

}  // namespace headrace
