#include "headrace/exec/chain_stage.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "headrace/core/atomic_max.h"
#include "headrace/exec/size_index.h"

namespace headrace {
namespace {

// Scratch images of the sample currently running on this thread; reused, so a
// steady-state sample allocates nothing. Counted in the stage's scratch_usage_: pool
// threads belong to one stage and exit before it is destroyed.
thread_local ScratchArena tls_scratch;
// The named values of the sample running on this thread (SampleContext::values).
thread_local std::vector<Value> tls_values;
// Whether this thread has named its row of the trace.
thread_local bool tls_trace_named = false;

}  // namespace

namespace {
// A sample's priority in the pool: its batch's local index times this, plus its slot.
constexpr int64_t kSlots = int64_t{1} << 24;  // more than any batch's samples

size_t OpsOf(const std::vector<OpChain>& chains) {
  size_t n = 0;
  for (const OpChain& c : chains) n += c.ops.size();
  return n;
}
}  // namespace

ChainStage::ChainStage(const Source& source, const std::vector<OpChain>& chains,
                       ChainStageOptions options, std::stop_token stop, Release release,
                       Done done)
    : source_(source),
      chains_(chains),
      options_(options),
      stop_(std::move(stop)),
      release_(std::move(release)),
      done_(std::move(done)),
      pool_(std::make_unique<ThreadPool>(options.threads)),
      ops_(std::make_unique<OpCounters[]>(OpsOf(chains))) {
  size_t first = 0;
  for (const OpChain& c : chains_) {
    runners_.emplace_back(c, options.seed);
    first_op_.push_back(first);
    first += c.ops.size();
  }
}

ChainStage::~ChainStage() { pool_.reset(); }

void ChainStage::Submit(const std::shared_ptr<BatchJob>& job, int slot, std::vector<Buffer> media,
                        int64_t charged, std::vector<std::shared_ptr<MediaReader>> readers) {
  // Samples run in their batches' order, and in slot order within one, whatever order
  // their reads complete in: with reads of several batches in flight, a FIFO ran the
  // samples whose bytes came first, and the earliest batch (the one the consumer waits
  // for) finished last among them. The first batch of VLM samples of
  // bench/vlm_processor.py came after 0.46 s, its last sample started after 20 of the
  // next batches'. Slot order lets the assemble stage join each sample's rows soon
  // after it ends (AssembleStage::SampleDone).
  const int64_t priority = job->position.local_index * kSlots + slot;
  if (!readers.empty()) {
    // Its ranged reads planned ahead of every sample's run (a task of ~1 ms: the index
    // parsed from the bytes its readers hold), so that they travel while the threads run
    // the samples before it, rather than while the sample's own thread waits.
    pool_->Submit([this, job, slot, readers]() { PlanReads(job, slot, readers); },
                  std::numeric_limits<int64_t>::min());
  }
  const bool submitted = pool_->Submit(
      [this, job, slot, media = std::move(media), charged,
       readers = std::move(readers)]() mutable {
        Run(job, slot, std::move(media), charged, std::move(readers));
      },
      priority);
  if (!submitted) {
    if (charged > 0) release_(charged);
    done_(job, slot, Status::Cancelled("the run was cancelled"));
  }
}

std::optional<int64_t> ChainStage::FirstQueuedBatch() const {
  const std::optional<int64_t> priority = pool_->FirstQueued();
  if (!priority.has_value()) return std::nullopt;
  if (*priority < 0) return std::numeric_limits<int64_t>::min();  // a read plan
  return *priority / kSlots;
}

void ChainStage::Run(const std::shared_ptr<BatchJob>& job, int slot, std::vector<Buffer> media,
                     int64_t charged, std::vector<std::shared_ptr<MediaReader>> readers) {
  Status status;
  if (stop_.stop_requested()) {
    status = Status::Cancelled("the run was cancelled");
  } else {
    const int64_t index = job->sample_indices[slot];
    Sample sample;
    sample.epoch = job->position.epoch;
    sample.index = index;
    sample.record = job->records[slot];
    if (!job->told.empty() && job->told[slot].has_value()) sample.told = &*job->told[slot];
    status = source_.Fill(std::move(media), sample);
    if (status.ok() && !readers.empty()) {
      if (readers.size() != sample.media.size()) {
        status = Status::Internal("a sample read in ranges has " +
                                  std::to_string(sample.media.size()) + " media items for " +
                                  std::to_string(readers.size()) + " readers");
      }
      for (size_t i = 0; status.ok() && i < readers.size(); ++i) {
        sample.media[i].reader = std::move(readers[i]);
      }
    }
    if (options_.trace != nullptr && !tls_trace_named) {
      tls_trace_named = true;
      options_.trace->NameThread("cpu worker");
    }
    tls_scratch.Account(&scratch_usage_);
    if (status.ok()) {
      RaggedRows* ragged = job->ragged.empty() ? nullptr : &job->ragged[slot];
      const size_t c = runners_.size() == 1 ? 0 : static_cast<size_t>(source_.EntryOf(index));
      const size_t first = first_op_[c];
      status = runners_[c].Run(sample, job->slots[slot].data(), ragged, tls_scratch, tls_values,
                               [&](size_t i, Clock::time_point start, Clock::time_point end,
                                   const SampleContext& ctx) {
                                 CountOp(first + i, start, end, ctx, index);
                               });
      // A sample that failed before its size pass never asked its batch's gate, which
      // its rows (kept by a packer) may outlive.
      if (ragged != nullptr) ragged->set_gate(nullptr);
    }
    if (status.ok() && options_.sizes != nullptr && options_.sizes_token_field >= 0 &&
        !job->ragged.empty()) {
      CheckEntry(sample, job->ragged[slot].rows(options_.sizes_token_field));
    }
    if (status.ok() && !job->parsed_attributes.empty() &&
        sample.attributes.data() != sample.record->attributes.data()) {
      job->parsed_attributes[slot].emplace(sample.attributes.begin(), sample.attributes.end());
    }
    samples_run_.fetch_add(1, std::memory_order_relaxed);
    for (const Sample::Item& item : sample.media) {
      if (item.reader == nullptr) continue;
      const MediaReader::Stats read = item.reader->stats();
      ranged_requests_.fetch_add(read.requests, std::memory_order_relaxed);
      ranged_bytes_.fetch_add(read.bytes, std::memory_order_relaxed);
      ranged_unplanned_.fetch_add(read.unplanned, std::memory_order_relaxed);
    }
    SettleScratch();
    // The encoded bytes die here (the sample holds the last handle), before the budget
    // is released.
  }
  media.clear();
  if (charged > 0) release_(charged);
  done_(job, slot, std::move(status));
}

void ChainStage::CheckEntry(const Sample& sample, int64_t tokens) {
  const std::optional<int64_t> entry = options_.sizes->TokensAt(sample.index);
  if (!entry.has_value() || *entry == tokens) return;
  if (stale_.fetch_add(1, std::memory_order_relaxed) > 0) return;
  const std::string uri =
      sample.record != nullptr && !sample.record->media.empty() ? sample.record->media[0].uri
                                                                : "<no uri>";
  MutexLock lock(stale_mu_);
  first_stale_ = "epoch " + std::to_string(sample.epoch) + ", index " +
                 std::to_string(sample.index) + ", " + uri + ": " + std::to_string(tokens) +
                 " tokens, its entry " + std::to_string(*entry);
}

StaleEntries ChainStage::stale_entries() const {
  MutexLock lock(stale_mu_);
  return {options_.sizes != nullptr, stale_.load(std::memory_order_relaxed), first_stale_};
}

void ChainStage::PlanReads(const std::shared_ptr<BatchJob>& job, int slot,
                           const std::vector<std::shared_ptr<MediaReader>>& readers) {
  if (stop_.stop_requested()) return;
  Sample sample;
  sample.epoch = job->position.epoch;
  sample.index = job->sample_indices[slot];
  sample.record = job->records[slot];
  if (!source_.Fill(std::vector<Buffer>(readers.size()), sample).ok() ||
      sample.media.size() != readers.size()) {
    return;  // the run reports it
  }
  for (size_t i = 0; i < readers.size(); ++i) sample.media[i].reader = readers[i];
  const size_t c = runners_.size() == 1 ? 0 : static_cast<size_t>(source_.EntryOf(sample.index));
  runners_[c].PlanReads(sample, tls_values);
}

void ChainStage::CountOp(size_t i, Clock::time_point start, Clock::time_point end,
                         const SampleContext& ctx, int64_t index) {
  const int64_t op_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  OpCounters& op = ops_[i];
  op.ns.fetch_add(op_ns, std::memory_order_relaxed);
  op.latency.Record(op_ns);
  if (ctx.gil_wait_ns >= 0) {
    op.gil_wait_ns.fetch_add(ctx.gil_wait_ns, std::memory_order_relaxed);
    op.takes_gil.store(true, std::memory_order_relaxed);
  }
  if (ctx.frames_decoded >= 0) {
    op.frames_decoded.fetch_add(ctx.frames_decoded, std::memory_order_relaxed);
    op.frames_taken.fetch_add(ctx.frames_taken, std::memory_order_relaxed);
    op.decodes_frames.store(true, std::memory_order_relaxed);
  }
  if (options_.trace != nullptr) {
    options_.trace->Span(OpAt(i).name(), "cpu", start, end, index);
  }
}

void ChainStage::SettleScratch() {
  StoreMax(scratch_sample_peak_, static_cast<int64_t>(tls_scratch.capacity()));
  tls_scratch.Trim(static_cast<size_t>(options_.scratch_retain_bytes));
}

StageMetrics ChainStage::Metrics(double elapsed_s, double admit_blocked_s) const {
  const int threads = pool_->size();
  StageMetrics cpu = StageMetrics::Of(StageKind::kChain, threads);
  cpu.items = samples_run();
  cpu.busy_s = pool_->busy_seconds() / threads;
  const double idle = std::max(0.0, elapsed_s - cpu.busy_s);
  cpu.blocked_s = std::min(idle, admit_blocked_s);
  cpu.starved_s = idle - cpu.blocked_s;
  return cpu;
}

const Op& ChainStage::OpAt(size_t i) const {
  size_t c = 0;
  while (c + 1 < first_op_.size() && first_op_[c + 1] <= i) ++c;
  return *chains_[c].ops[i - first_op_[c]];
}

std::vector<OpMetrics> ChainStage::OpsMetrics() const {
  std::vector<OpMetrics> out;
  for (size_t c = 0; c < chains_.size(); ++c) {
    for (size_t k = 0; k < chains_[c].ops.size(); ++k) {
      const OpCounters& op = ops_[first_op_[c] + k];
      const bool frames = op.decodes_frames.load();
      out.push_back(OpMetrics{std::string(chains_[c].ops[k]->name()), chains_[c].entry,
                              samples_run(), op.ns.load() * 1e-9, op.latency.Snapshot(),
                              op.takes_gil.load() ? op.gil_wait_ns.load() * 1e-9 : -1,
                              frames ? op.frames_decoded.load() : -1,
                              frames ? op.frames_taken.load() : 0});
    }
  }
  return out;
}

ScratchMetrics ChainStage::Scratch() const {
  return ScratchMetrics{scratch_usage_.held(), scratch_usage_.peak(),
                        scratch_sample_peak_.load(std::memory_order_relaxed)};
}

}  // namespace headrace
