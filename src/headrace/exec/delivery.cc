#include "headrace/exec/delivery.h"

#include <algorithm>

namespace headrace {

template <typename Pred>
bool Delivery::ConsumerWaitLocked(MutexLock& lock, Pred ready,
                                  std::optional<std::chrono::nanoseconds> timeout) {
  wait_.waiting = true;
  wait_.since = Clock::now();
  bool got = true;
  if (timeout) {
    got = consumer_cv_.wait_for(lock, *timeout, ready);
  } else {
    consumer_cv_.wait(lock, ready);
  }
  wait_.waiting = false;
  const int64_t waited = NanosSince(wait_.since);
  wait_.total_ns += waited;
  if (!timeout) next_wait_.Record(waited);
  return got;
}

namespace {


// Every batch from start_batch on, to one consumer in order.
class InOrderDelivery final : public Delivery {
 public:
  InOrderDelivery(DeliveryOptions options, BudgetGauge& gauge, std::stop_source& stop)
      : Delivery(options, gauge, stop), to_start_(options.start_batch) {
    MutexLock lock(mu_);
    next_ = options.start_batch;
  }

  std::optional<int64_t> NextToStart() override {
    if (stop_.stop_requested() || to_start_ >= options_.total_batches) return std::nullopt;
    return to_start_++;
  }

  bool WaitReady(std::chrono::nanoseconds timeout) override {
    MutexLock lock(mu_);
    if (ReadyLocked()) return true;
    return ConsumerWaitLocked(lock, [this]() HR_LOCKED_LAMBDA { return ReadyLocked(); }, timeout);
  }

  Result<std::optional<Batch>> Next() override {
    MutexLock lock(mu_);
    ++wait_.calls;
    wait_.fill_sum += static_cast<double>(ready_.size()) / options_.prefetch_depth;
    while (true) {
      ConsumerWaitLocked(lock, [this]() HR_LOCKED_LAMBDA { return ReadyLocked(); }, std::nullopt);
      if (!failure_.ok()) return failure_;
      if (next_ >= options_.total_batches) {
        Status budget = budget_.Check(/*at_end=*/true);
        if (!budget.ok()) {
          failure_ = budget;
          return failure_;
        }
        return std::optional<Batch>();
      }
      Batch batch = DeliverLocked(next_);
      ++next_;
      // An epoch's end is a verdict point too: a run without an end (or a long one) must
      // not go on for epochs with every sample failing just because min_samples is large.
      const bool epoch_end = !options_.consumer_counts_losses &&
                             next_ % options_.batches_per_epoch == 0;
      if (Status budget = budget_.Check(epoch_end); !budget.ok()) {
        FailLocked(budget);
        lock.unlock();
        stop_.request_stop();
        return budget;
      }
      // Every sample failed: nothing to deliver, unless the consumer follows positions.
      if (batch.size() == 0 && !options_.deliver_empty_batches) continue;
      ++batches_delivered_;
      return std::optional<Batch>(std::move(batch));
    }
  }

  // The consumer takes batches in order: the oldest in production is needed first only
  // when no older batch is ready (that one's memory goes when the consumer takes it).
  std::optional<int64_t> NeededFirstLocked() const override HR_REQUIRES(mu_) {
    if (producing_.empty()) return std::nullopt;
    const int64_t oldest = *producing_.begin();
    if (!ready_.empty() && ready_.begin()->first < oldest) return std::nullopt;
    return oldest;
  }
  int64_t next_batch() const override {
    MutexLock lock(mu_);
    return next_;
  }

 private:
  bool ReadyLocked() const HR_REQUIRES(mu_) {
    return !failure_.ok() || next_ >= options_.total_batches || ready_.count(next_) > 0;
  }

  int64_t to_start_;  // the driver's: the next batch to start
  int64_t next_ HR_GUARDED_BY(mu_) = 0;  // the next batch to deliver
};

// Only the batches Submit() names; Take(k) from any thread.
class OnDemandDelivery final : public Delivery {
 public:
  OnDemandDelivery(DeliveryOptions options, BudgetGauge& gauge, std::stop_source& stop)
      : Delivery(options, gauge, stop) {}

  std::optional<int64_t> NextToStart() override {
    MutexLock lock(mu_);
    const bool submitted = driver_cv_.wait(lock, stop_.get_token(), [this]() HR_LOCKED_LAMBDA {
      return !submitted_.empty();
    });
    if (!submitted || stop_.stop_requested()) return std::nullopt;
    const int64_t j = submitted_.front();
    submitted_.pop_front();
    return j;
  }

  Result<std::optional<Batch>> Next() override {
    return Status::InvalidArgument("Next() on an on-demand engine: use Submit() and Take()");
  }
  bool WaitReady(std::chrono::nanoseconds) override { return true; }
  int64_t next_batch() const override { return options_.start_batch; }

  Status Submit(int64_t batch) override {
    if (batch < 0 || batch >= options_.total_batches) {
      return Status::InvalidArgument("batch " + std::to_string(batch) + " is outside the run's " +
                                     std::to_string(options_.total_batches) + " batches");
    }
    MutexLock lock(mu_);
    if (!failure_.ok()) return failure_;
    if (!untaken_.insert(batch).second) {
      return Status::InvalidArgument("batch " + std::to_string(batch) +
                                     " is already submitted and not yet taken");
    }
    submitted_.push_back(batch);
    driver_cv_.notify_all();
    return Status::Ok();
  }

  bool WaitTakeable(int64_t batch, std::chrono::nanoseconds timeout) override {
    MutexLock lock(mu_);
    return consumer_cv_.wait_for(lock, timeout, [&]() HR_LOCKED_LAMBDA {
      return !failure_.ok() || untaken_.count(batch) == 0 || ready_.count(batch) > 0;
    });
  }

  Result<Batch> Take(int64_t batch) override {
    MutexLock lock(mu_);
    if (untaken_.count(batch) == 0) {
      return Status::InvalidArgument("batch " + std::to_string(batch) +
                                     " was not submitted, or was taken already");
    }
    consumer_cv_.wait(lock, [&]() HR_LOCKED_LAMBDA {
      return !failure_.ok() || ready_.count(batch) > 0;
    });
    if (!failure_.ok()) return failure_;
    Batch out = DeliverLocked(batch);
    untaken_.erase(batch);
    ++batches_delivered_;
    ++wait_.calls;
    return out;
  }

 private:
  // Submitted and not yet admitted, in submission order; submitted and not yet taken.
  std::deque<int64_t> submitted_ HR_GUARDED_BY(mu_);
  std::set<int64_t> untaken_ HR_GUARDED_BY(mu_);
};

}  // namespace

std::optional<int64_t> Delivery::NeededFirstLocked() const {
  if (producing_.empty()) return std::nullopt;
  return *producing_.begin();
}

std::unique_ptr<Delivery> Delivery::Make(Schedule schedule, DeliveryOptions options,
                                         BudgetGauge& gauge, std::stop_source& stop) {
  if (schedule == Schedule::kOnDemand) {
    return std::make_unique<OnDemandDelivery>(options, gauge, stop);
  }
  return std::make_unique<InOrderDelivery>(options, gauge, stop);
}

bool Delivery::Admit(int64_t batch, int64_t bytes, int64_t samples) {
  MutexLock lock(mu_);
  const auto wait_start = Clock::now();
  const int64_t consumer_wait_before = ConsumerWaitNanosLocked();
  driver_cv_.wait(lock, stop_.get_token(), [&]() HR_LOCKED_LAMBDA {
    return admitted_ahead_ < options_.prefetch_depth &&
           (batch_bytes_ + bytes <= options_.batch_budget_bytes || admitted_ahead_ == 0);
  });
  // The wait is the consumer's doing only while the consumer was not itself waiting
  // for a batch; the rest of it is waiting for batches in production.
  wait_.admit_blocked_ns += std::max<int64_t>(
      0, NanosSince(wait_start) - (ConsumerWaitNanosLocked() - consumer_wait_before));
  if (stop_.stop_requested()) return false;
  ++admitted_ahead_;
  batch_bytes_ += bytes;
  gauge_.AddBatches(bytes);
  samples_attempted_ += samples;
  producing_.insert(batch);
  return true;
}

void Delivery::Ready(int64_t batch, Batch done, int64_t admitted, int64_t bytes) {
  MutexLock lock(mu_);
  RechargeLocked(bytes - admitted);
  ready_.emplace(batch, ReadyBatch{std::move(done), bytes});
  producing_.erase(batch);
  rows_cv_.notify_all();  // the oldest batch in production may be another
  consumer_cv_.notify_all();
}

void Delivery::Dropped(int64_t batch, int64_t delta) {
  MutexLock lock(mu_);
  RechargeLocked(delta);
  producing_.erase(batch);
  rows_cv_.notify_all();
}

bool Delivery::HoldRows(int64_t batch, int64_t bytes) {
  if (bytes <= 0) return true;
  MutexLock lock(mu_);
  // `others`: the threads waiting here besides this one.
  const auto may_hold = [&](int others) HR_LOCKED_LAMBDA {
    if (batch_bytes_ + bytes <= options_.batch_budget_bytes) return true;
    const std::optional<int64_t> needed = NeededFirstLocked();
    if (!needed.has_value()) return false;  // the consumer frees memory as it takes one
    if (*needed == batch) return true;
    // Every thread waits here: the needed batch's sample queued for a thread gets this
    // one once its sample has run.
    if (others + 1 < options_.cpu_threads || !first_queued_) return false;
    const std::optional<int64_t> first = first_queued_();
    return first.has_value() && *first <= *needed;
  };
  if (!may_hold(rows_waiting_.load())) {
    const auto start = Clock::now();
    ++rows_waits_;
    rows_waiting_.fetch_add(1);
    rows_cv_.wait(lock, stop_.get_token(),
                  [&]() HR_LOCKED_LAMBDA { return may_hold(rows_waiting_.load() - 1); });
    rows_waiting_.fetch_sub(1);
    rows_wait_ns_ += NanosSince(start);
  }
  if (stop_.stop_requested()) return false;
  batch_bytes_ += bytes;
  gauge_.AddBatches(bytes);
  return true;
}

void Delivery::Recharge(int64_t delta) {
  MutexLock lock(mu_);
  RechargeLocked(delta);
}

void Delivery::Queued() {
  // A thread that counts itself waiting does so under mu_, where it looks at the queue
  // (first_queued_) before it waits; the task was queued before this load: either that
  // thread saw it, or this sees the thread counted and notifies it once it waits (the
  // lock is free only then).
  if (rows_waiting_.load() == 0) return;
  MutexLock lock(mu_);
  rows_cv_.notify_all();
}

void Delivery::RechargeLocked(int64_t delta) {
  if (delta == 0) return;
  batch_bytes_ += delta;
  gauge_.AddBatches(delta);
  // Less charged: a batch, or a sample's rows, waiting for room may fit now.
  if (delta < 0) {
    driver_cv_.notify_all();
    rows_cv_.notify_all();
  }
}

void Delivery::Fail(Status status) {
  {
    MutexLock lock(mu_);
    FailLocked(std::move(status));
  }
  stop_.request_stop();
}

void Delivery::FailLocked(Status status) {
  if (failure_.ok()) failure_ = std::move(status);
  driver_cv_.notify_all();
  rows_cv_.notify_all();
  consumer_cv_.notify_all();
}

Batch Delivery::DeliverLocked(int64_t batch) {
  auto it = ready_.find(batch);
  Batch out = std::move(it->second.batch);
  batch_bytes_ -= it->second.bytes;
  gauge_.AddBatches(-it->second.bytes);
  ready_.erase(it);
  --admitted_ahead_;
  driver_cv_.notify_all();
  rows_cv_.notify_all();
  if (batch == options_.source_errors_batch && !options_.source_errors.empty()) {
    std::vector<SampleError> errors = options_.source_errors;
    for (SampleError& e : errors) e.epoch = out.epoch;
    errors.insert(errors.end(), std::make_move_iterator(out.errors.begin()),
                  std::make_move_iterator(out.errors.end()));
    out.errors = std::move(errors);
  }
  // Errors are counted here, in batch order, so that whether and where the error
  // budget stops a run does not depend on which thread finished first.
  budget_.Count(out, options_.entry_of);
  // How shuffled the batch is: the distances in dataset order between neighbours.
  if (const Tensor* index = out.Find("index"); index != nullptr) {
    const int64_t* rows = index->data<int64_t>();
    for (int64_t r = 1; r < index->numel(); ++r) {
      neighbour_distance_sum_ += static_cast<double>(
          rows[r] > rows[r - 1] ? rows[r] - rows[r - 1] : rows[r - 1] - rows[r]);
      ++neighbour_pairs_;
    }
  }
  return out;
}

namespace {

// The budget the run counts by: a blend's entries only where samples tell their entry.
RunBudgetOptions BudgetOptionsOf(const DeliveryOptions& options) {
  RunBudgetOptions budget = options.budget;
  if (!options.entry_of) {
    budget.entries.clear();
    budget.entry_max_error_rate.clear();
  }
  return budget;
}

}  // namespace

Delivery::Delivery(DeliveryOptions options, BudgetGauge& gauge, std::stop_source& stop)
    : options_(std::move(options)),
      gauge_(gauge),
      stop_(stop),
      budget_(BudgetOptionsOf(options_)) {}

Status Delivery::CountLost(std::span<const LostSample> lost, bool at_end) {
  if (lost.empty() && !at_end) return Status::Ok();
  Status budget;
  {
    MutexLock lock(mu_);
    if (!failure_.ok()) return failure_;
    budget_.CountLost(lost, options_.entry_of);
    budget = budget_.Check(at_end);
    if (budget.ok()) return budget;
    FailLocked(budget);
  }
  stop_.request_stop();
  return budget;
}

int64_t Delivery::ConsumerWaitNanosLocked() const {
  return wait_.total_ns + (wait_.waiting ? NanosSince(wait_.since) : 0);
}

// The base's consumer calls: each policy overrides the ones it serves.
Result<std::optional<Batch>> Delivery::Next() {
  return Status::InvalidArgument("Next() on this engine");
}
bool Delivery::WaitReady(std::chrono::nanoseconds) { return true; }
int64_t Delivery::next_batch() const { return 0; }
Status Delivery::Submit(int64_t) {
  return Status::InvalidArgument("Submit() on a sequential engine");
}
Result<Batch> Delivery::Take(int64_t) {
  return Status::InvalidArgument("Take() on a sequential engine: use Next()");
}
bool Delivery::WaitTakeable(int64_t, std::chrono::nanoseconds) { return true; }

DeliveryMetrics Delivery::Metrics() const {
  MutexLock lock(mu_);
  DeliveryMetrics m;
  m.samples_attempted = samples_attempted_;
  m.counts = budget_.run().counts();
  m.batches_delivered = batches_delivered_;
  m.batches_ready = static_cast<int64_t>(ready_.size());
  m.admit_blocked_s = wait_.admit_blocked_ns * 1e-9;
  m.queue_fill = wait_.calls > 0 ? std::min(1.0, wait_.fill_sum / wait_.calls) : 0.0;
  m.next_wait = next_wait_.Snapshot();
  m.errors_by_kind = budget_.run().by_kind();
  m.first_errors = budget_.run().first_errors();
  m.neighbour_distance_sum = neighbour_distance_sum_;
  m.neighbour_pairs = neighbour_pairs_;
  m.entries = budget_.entry_counts();
  m.rows_waits = rows_waits_;
  m.rows_wait_s = rows_wait_ns_ * 1e-9;
  m.rows_waiting = rows_waiting_.load();
  return m;
}

}  // namespace headrace
