#include "headrace/exec/read_stage.h"

#include <algorithm>

namespace headrace {

// The media reads of one sample, one item after another; `bytes` written by the
// completion of each item, in turn.
struct ReadStage::SampleReads {
  std::vector<Buffer> bytes;
  int64_t charged = 0;  // this sample's share of the I/O budget's charge (guarded by mu_)
};

// The I/O budget's charge of one read, shared by its gate and its completion (guarded by
// mu_, except `item` and `issued`, set before the read starts).
struct ReadStage::ReadCharge {
  std::shared_ptr<SampleReads> sample;
  int item = 0;           // which of the record's media items
  int64_t bytes = 0;      // charged now: the reservation, then the object's size
  int64_t refused = -1;   // >= 0: the gate refused this size; the read is parked
  // >= 0: the sample's bytes with this read (so far, for a body of unknown length) exceed
  // the whole I/O budget, so it could never be admitted: the read fails with it.
  int64_t too_large = -1;
  bool sized = false;     // the gate ran (a storage may ignore it)
  Clock::time_point issued{};
};

ReadStage::ReadStage(std::shared_ptr<Storage> storage, ReadStageOptions options,
                     BudgetGauge& gauge, std::stop_token stop, Done done)
    : storage_(std::move(storage)),
      options_(options),
      gauge_(gauge),
      stop_(std::move(stop)),
      done_(std::move(done)) {}

int64_t ReadStage::TraceId(const BatchJob& job, int slot) const {
  return job.position.local_index * options_.batch_size + slot;
}

bool ReadStage::FitsLocked(int64_t bytes) const {
  return reads_inflight_ < options_.io_inflight &&
         (undecoded_bytes_ + bytes <= options_.io_budget_bytes ||
          (undecoded_bytes_ == 0 && reads_inflight_ == 0));
}

bool ReadStage::CanIssueLocked(bool& waited_on_budget) const {
  if (reads_inflight_ >= options_.io_inflight) return false;
  // Parked reads go first; a first read of unknown size goes alone.
  if (!parked_.empty() || (read_estimate_ < 0 && reads_inflight_ > 0) ||
      !FitsLocked(std::max<int64_t>(read_estimate_, 0))) {
    waited_on_budget = true;
    return false;
  }
  return true;
}

void ReadStage::AddUndecodedLocked(int64_t delta) {
  undecoded_bytes_ += delta;
  gauge_.AddUndecoded(delta);
}

void ReadStage::ChargeLocked(ReadCharge& charge, int64_t bytes) {
  charge.bytes = bytes;
  charge.refused = -1;
  charge.sized = false;
  AddUndecodedLocked(bytes);
  charge.sample->charged += bytes;
  if (reads_inflight_++ == 0) busy_since_ = Clock::now();
}

void ReadStage::NoteSizeLocked(int64_t size) {
  read_estimate_ = std::max(size, read_estimate_ - read_estimate_ / 16);
}

void ReadStage::Issue(const std::shared_ptr<BatchJob>& job, int slot) {
  auto charge = std::make_shared<ReadCharge>();
  charge->sample = std::make_shared<SampleReads>();
  charge->sample->bytes.resize(job->records[slot]->media.size());
  {
    MutexLock lock(mu_);
    const auto wait_start = Clock::now();
    bool waited_on_budget = false;
    const bool go = capacity_cv_.wait(lock, stop_, [&]() HR_LOCKED_LAMBDA {
      return CanIssueLocked(waited_on_budget);
    });
    if (waited_on_budget) blocked_ns_ += NanosSince(wait_start);
    if (!go || stop_.stop_requested()) {
      lock.unlock();
      done_(job, slot, Status::Cancelled("the run was cancelled"), 0);
      return;
    }
    ChargeLocked(*charge, std::max<int64_t>(read_estimate_, 0));
  }
  Start(job, slot, std::move(charge));
}

void ReadStage::Start(const std::shared_ptr<BatchJob>& job, int slot,
                      std::shared_ptr<ReadCharge> charge) {
  if (options_.trace != nullptr) options_.trace->AsyncBegin("read", TraceId(*job, slot), Clock::now());
  const MediaRef& ref = job->records[slot]->media[charge->item];
  charge->issued = Clock::now();
  ReadGate gate = [this, charge](int64_t size) { return OnReadSize(*charge, size); };
  ReadCallback done = [this, job, slot, charge](Result<Buffer> bytes) {
    OnRead(job, slot, charge, std::move(bytes));
  };
  Storage* routed = options_.route ? options_.route(job->sample_indices[slot]) : nullptr;
  Storage& storage = routed != nullptr ? *routed : *storage_;
  if (ref.offset == 0 && ref.length < 0) {
    storage.ReadAsyncGated(ref.uri, std::move(done), std::move(gate));
  } else {
    storage.ReadRangeAsyncGated(ref.uri, ref.offset, ref.length, std::move(done),
                                  std::move(gate));
  }
}

bool ReadStage::OnReadSize(ReadCharge& charge, int64_t size) {
  // Asked by the storage while a read waits: a stopped run wants none of its reads.
  if (size == kReadStillWanted) return !stop_.stop_requested();
  MutexLock lock(mu_);
  charge.sized = true;
  SampleReads& sample = *charge.sample;
  // Checked before anything is noted: a size past the budget must not become the
  // reservation of the reads after it.
  if (const int64_t needs = sample.charged - charge.bytes + size;
      options_.fail_past_budget && needs > options_.io_budget_bytes) {
    charge.too_large = needs;
    return false;
  }
  NoteSizeLocked(size);
  const int64_t others = undecoded_bytes_ - charge.bytes;
  // A later item of a sample is never refused: the sample holds its earlier items.
  const bool first = sample.charged == charge.bytes;
  if (first && others > 0 && others + size > options_.io_budget_bytes) {
    charge.refused = size;
    return false;
  }
  AddUndecodedLocked(size - charge.bytes);
  sample.charged += size - charge.bytes;
  charge.bytes = size;
  capacity_cv_.notify_all();  // a reservation larger than the object frees budget
  return true;
}

std::vector<ReadStage::ParkedRead> ReadStage::TakeParkedLocked() {
  std::vector<ParkedRead> out;
  const bool stopped = stop_.stop_requested();
  while (!parked_.empty() && (stopped || FitsLocked(parked_.front().charge->refused))) {
    if (!stopped) ChargeLocked(*parked_.front().charge, parked_.front().charge->refused);
    out.push_back(std::move(parked_.front()));
    parked_.pop_front();
  }
  return out;
}

void ReadStage::RestartParked(std::vector<ParkedRead> reads) {
  for (ParkedRead& read : reads) {
    // refused >= 0: the run stopped while it was parked; a parked read is a sample's
    // first, so the sample holds nothing.
    if (read.charge->refused >= 0) {
      done_(read.job, read.slot, Status::Cancelled("the run was cancelled"), 0);
    } else {
      Start(read.job, read.slot, std::move(read.charge));
    }
  }
}

void ReadStage::Release(int64_t bytes) {
  std::vector<ParkedRead> restart;
  {
    MutexLock lock(mu_);
    AddUndecodedLocked(-bytes);
    restart = TakeParkedLocked();
    capacity_cv_.notify_all();
  }
  RestartParked(std::move(restart));
}

Status ReadStage::TooLarge(const SampleRecord& record, const ReadCharge& charge) const {
  const std::string& uri = record.media[charge.item].uri;
  const std::string what = charge.item == 0 ? "'" + uri + "'"
                                            : "sample's media up to '" + uri + "'";
  return Status::ResourceExhausted(
      "the " + what + " (" + std::to_string(charge.too_large) +
      " bytes or more) cannot fit in the I/O budget of " +
      std::to_string(options_.io_budget_bytes) +
      " bytes (execution.io_budget_bytes; by default memory.budget_bytes / 8): raise "
      "memory.budget_bytes or execution.io_budget_bytes");
}

void ReadStage::OnRead(const std::shared_ptr<BatchJob>& job, int slot,
                       const std::shared_ptr<ReadCharge>& charge, Result<Buffer> bytes) {
  if (options_.trace != nullptr) options_.trace->AsyncEnd("read", TraceId(*job, slot), Clock::now());
  SampleReads& sample = *charge->sample;
  const bool refused = charge->refused >= 0;  // its gate ran on this thread, before
  const int items = static_cast<int>(sample.bytes.size());
  const bool more = bytes.ok() && charge->item + 1 < items;
  std::shared_ptr<ReadCharge> next;  // the sample's next item, already charged
  std::vector<ParkedRead> restart;
  Status failed;
  int64_t charged = 0;
  {
    MutexLock lock(mu_);
    if (--reads_inflight_ == 0) busy_ns_ += NanosSince(busy_since_);
    if (refused) {
      // Nothing was allocated: wait until the object's size fits (or nothing else is
      // charged), then read it again.
      AddUndecodedLocked(-charge->bytes);
      sample.charged -= charge->bytes;
      charge->bytes = 0;
      parked_.push_back(ParkedRead{job, slot, charge});
    } else {
      latency_.Record(NanosSince(charge->issued));
      ++reads_done_;
      if (const int64_t needs = bytes.ok() ? sample.charged - charge->bytes +
                                                 static_cast<int64_t>(bytes->size())
                                           : 0;
          options_.fail_past_budget && needs > options_.io_budget_bytes) {
        // A storage that ignored the gate: the bytes exist, but the sample fails the same way.
        charge->too_large = needs;
      }
      if (charge->too_large >= 0) {
        failed = TooLarge(*job->records[slot], *charge);
      } else if (bytes.ok()) {
        // The charge becomes the buffer's size (it differs when the storage ignored the
        // gate, or the object changed between its size and its bytes).
        const auto size = static_cast<int64_t>(bytes->size());
        bytes_read_ += size;
        AddUndecodedLocked(size - charge->bytes);
        sample.charged += size - charge->bytes;
        charge->bytes = size;
        if (!charge->sized) NoteSizeLocked(size);
        fill_sum_ += std::min(1.0, static_cast<double>(undecoded_bytes_) /
                                       static_cast<double>(options_.io_budget_bytes));
        sample.bytes[charge->item] = *std::move(bytes);
      } else {
        failed = bytes.status();
      }
      if (more && stop_.stop_requested()) failed = Status::Cancelled("the run was cancelled");
      if (!failed.ok()) {
        AddUndecodedLocked(-sample.charged);  // this item's and the items before it
        sample.charged = 0;
      } else if (more) {
        next = std::make_shared<ReadCharge>();
        next->sample = charge->sample;
        next->item = charge->item + 1;
        // Its reservation takes at most what the budget has left: a sample's later item
        // is charged past what the others leave only once its size is known.
        ChargeLocked(*next, std::clamp<int64_t>(read_estimate_, 0,
                                                std::max<int64_t>(0, options_.io_budget_bytes -
                                                                         undecoded_bytes_)));
      }
      charged = sample.charged;
    }
    restart = TakeParkedLocked();
    capacity_cv_.notify_all();
  }
  RestartParked(std::move(restart));
  if (refused) return;
  if (!failed.ok()) {
    sample.bytes.clear();
    done_(job, slot, std::move(failed), 0);
  } else if (next != nullptr) {
    Start(job, slot, std::move(next));
  } else {
    done_(job, slot, std::move(sample.bytes), charged);
  }
}

int ReadStage::reads_inflight() const {
  MutexLock lock(mu_);
  return reads_inflight_;
}

int64_t ReadStage::bytes_read() const {
  MutexLock lock(mu_);
  return bytes_read_;
}

StageMetrics ReadStage::Metrics(double elapsed_s, double admit_blocked_s) const {
  MutexLock lock(mu_);
  StageMetrics read = StageMetrics::Of(StageKind::kRead, options_.io_inflight);
  read.items = reads_done_;
  int64_t busy = busy_ns_;
  if (reads_inflight_ > 0) busy += NanosSince(busy_since_);
  read.busy_s = busy * 1e-9;
  read.queue_fill = reads_done_ > 0 ? fill_sum_ / reads_done_ : 0.0;
  read.mean_latency_ms = 1e3 * latency_.Snapshot().Mean();  // every read done
  const double idle = std::max(0.0, elapsed_s - read.busy_s);
  read.blocked_s = std::min(idle, blocked_ns_ * 1e-9 + admit_blocked_s);
  read.starved_s = idle - read.blocked_s;
  return read;
}

}  // namespace headrace
