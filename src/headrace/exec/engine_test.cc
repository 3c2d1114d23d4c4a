// The engine's conformance battery: every configuration of the executor (threads,
// prefetch depth, reads or no reads) must pass the same behaviours: empty input, end
// of epoch, an error in the middle, cancel while blocked, start at batch k,
// determinism across thread counts.
#include "headrace/exec/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <latch>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stop_token>
#include <thread>

#include "headrace/core/atomic_max.h"

namespace headrace {
namespace {

// Writes a row derived from the sample's index and its random stream; fails for the
// indices in `bad`.
class FillOp final : public Op {
 public:
  explicit FillOp(std::set<int64_t> bad = {}) : bad_(std::move(bad)) {}
  std::string_view name() const override { return "test.fill"; }
  Status Run(SampleContext& ctx) const override {
    if (bad_.count(ctx.sample->index)) return Status::CorruptData("bad sample");
    Rng rng = ctx.OpRng(0);
    auto* row = reinterpret_cast<int64_t*>(ctx.rows[0]);
    row[0] = ctx.sample->index;
    row[1] = static_cast<int64_t>(rng.Next() >> 1);
    const Buffer* media = ctx.sample->MediaOf(0);
    row[2] = media == nullptr ? 0 : static_cast<int64_t>(media->size());
    row[3] = media == nullptr || media->empty() ? -1 : media->data()[0];
    return Status::Ok();
  }

 private:
  std::set<int64_t> bad_;
};

// FillOp that first takes scratch memory: `huge_bytes` for sample `huge_index`, 64 KiB
// for the others, as a decode of one huge image among ordinary ones does.
class ScratchOp final : public Op {
 public:
  ScratchOp(int64_t huge_index, size_t huge_bytes)
      : huge_index_(huge_index), huge_bytes_(huge_bytes) {}
  std::string_view name() const override { return "test.scratch"; }
  Status Run(SampleContext& ctx) const override {
    const size_t bytes = ctx.sample->index == huge_index_ ? huge_bytes_ : 64 << 10;
    HR_ASSIGN_OR_RETURN(MutableImageView image,
                        ctx.NextScratchImage(static_cast<int>(bytes / 4096), 1024, 4));
    image.data[0] = 1;
    return fill_.Run(ctx);
  }

 private:
  int64_t huge_index_;
  size_t huge_bytes_;
  FillOp fill_;
};

// Blocks every sample until released; counts how many started.
class GateOp final : public Op {
 public:
  explicit GateOp(std::latch* started) : started_(started) {}
  std::string_view name() const override { return "test.gate"; }
  Status Run(SampleContext& ctx) const override {
    if (started_ != nullptr && !counted_.exchange(true)) started_->count_down();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return open_; });
    return Status::Ok();
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::latch* started_;
  mutable std::atomic<bool> counted_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool open_ = false;
};

// Adds the batch's seed-derived value to column 1 of every row; fails on batch 1 of
// each epoch.
class BatchMarkOp final : public BatchOp {
 public:
  std::string_view name() const override { return "test.batch_mark"; }
  Status Run(Batch& batch, uint64_t batch_seed) const override {
    if (batch.index_in_epoch == 1) return Status::UserFunctionError("batch 1 is bad");
    const Tensor* row = batch.Find("row");
    for (int64_t i = 0; i < batch.size(); ++i) {
      row->mutable_data<int64_t>()[i * 4 + 1] = static_cast<int64_t>(batch_seed >> 2);
    }
    return Status::Ok();
  }
};

// A store that builds each record on request, into the engine's scratch (as a manifest
// kept as lines parses each), and counts the requests.
class BuiltRecords final : public RecordStore {
 public:
  explicit BuiltRecords(std::shared_ptr<const std::vector<SampleRecord>> records)
      : records_(std::move(records)) {}
  int64_t size() const override { return static_cast<int64_t>(records_->size()); }
  const SampleRecord& Get(int64_t index, SampleRecord& scratch) const override {
    gets_.fetch_add(1, std::memory_order_relaxed);
    scratch = (*records_)[static_cast<size_t>(index)];
    return scratch;
  }
  RecordStoreMemory Memory() const override { return {}; }
  int64_t gets() const { return gets_.load(); }

 private:
  std::shared_ptr<const std::vector<SampleRecord>> records_;
  mutable std::atomic<int64_t> gets_{0};
};

struct Config {
  int threads;
  int depth;
  bool reads_media;
};

std::string ConfigName(const testing::TestParamInfo<Config>& info) {
  return "t" + std::to_string(info.param.threads) + "_d" + std::to_string(info.param.depth) +
         (info.param.reads_media ? "_reads" : "_noreads");
}

class EngineConformance : public testing::TestWithParam<Config> {
 protected:
  static std::filesystem::path Dir() {
    const char* tmp = std::getenv("HEADRACE_TEST_TMP");
    // One folder per process: ctest runs each test in its own process, in parallel.
    auto dir =
        std::filesystem::path(tmp ? tmp : "/tmp") / ("engine_test." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir;
  }

  // A dataset of n records; with reads, record i's file holds i % 251 repeated i+1 times.
  static std::shared_ptr<std::vector<SampleRecord>> Records(int64_t n,
                                                            std::set<int64_t> missing = {}) {
    auto records = std::make_shared<std::vector<SampleRecord>>();
    for (int64_t i = 0; i < n; ++i) {
      SampleRecord r;
      r.id = std::to_string(i);
      std::string uri = (Dir() / ("f" + std::to_string(i))).string();
      if (missing.count(i)) {
        uri += ".missing";
      } else if (!std::filesystem::exists(uri)) {
        std::ofstream(uri) << std::string(i + 1, static_cast<char>(i % 251));
      }
      r.media.push_back(MediaRef{0, uri});
      records->push_back(std::move(r));
    }
    return records;
  }

  Result<std::unique_ptr<Engine>> Start(std::shared_ptr<std::vector<SampleRecord>> records,
                                        std::unique_ptr<Op> op, int64_t batch_size,
                                        std::optional<int64_t> epochs = 1, int64_t start = 0,
                                        double max_error_rate = 1.0, int threads = -1,
                                        std::unique_ptr<BatchOp> batch_op = nullptr,
                                        Schedule schedule = Schedule::kSequential) {
    EngineInputs in;
    std::shared_ptr<const RecordStore> store;
    if (build_records_) {
      built_ = std::make_shared<BuiltRecords>(std::move(records));
      store = built_;
    } else {
      store = std::make_shared<VectorRecords>(std::move(records));
    }
    in.chain().ops.push_back(std::move(op));
    if (batch_op) in.batch_ops.push_back(std::move(batch_op));
    in.fields.push_back(FieldSpec{"row", DType::kI64, {4}});
    in.reads_media = GetParam().reads_media;
    in.source = MakeRecordSource(std::move(store), MakeLocalStorage({.threads = 2}));
    EngineOptions opt;
    opt.schedule = schedule;
    opt.cpu_threads = threads > 0 ? threads : GetParam().threads;
    opt.prefetch_depth = GetParam().depth;
    opt.io_inflight = 4;
    opt.start_batch = start;
    opt.order.batch_size = batch_size;
    opt.order.epochs = epochs;
    opt.order.seed = 7;
    opt.budget.max_error_rate = max_error_rate;
    opt.budget.min_samples = 1;
    opt.scratch_retain_bytes = scratch_retain_bytes_;
    return Engine::Start(std::move(in), opt);
  }

  int64_t scratch_retain_bytes_ = EngineOptions{}.scratch_retain_bytes;
  // Start serves the records through a BuiltRecords (kept in built_) when set.
  bool build_records_ = false;
  std::shared_ptr<const BuiltRecords> built_;

  // All batches' rows, in delivery order.
  static std::vector<std::vector<int64_t>> Drain(Engine& engine) {
    std::vector<std::vector<int64_t>> out;
    while (true) {
      auto next = engine.Next();
      EXPECT_TRUE(next.ok()) << next.status().ToString();
      if (!next.ok() || !next->has_value()) break;
      const Batch& b = **next;
      const Tensor* row = b.Find("row");
      EXPECT_NE(row, nullptr);
      out.emplace_back(row->data<int64_t>(), row->data<int64_t>() + row->numel());
    }
    return out;
  }
};

TEST_P(EngineConformance, RecordsBuiltOnRequestGiveTheSameBatchesLookedUpOncePerSample) {
  // Sample 5's file is missing, sample 7's op fails: their errors name their URIs.
  const auto run = [&](bool build) {
    build_records_ = build;
    auto engine = Start(Records(22, {5}), std::make_unique<FillOp>(std::set<int64_t>{7}), 4,
                        /*epochs=*/2);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<std::vector<int64_t>> rows;
    std::vector<std::string> errors;
    while (true) {
      auto next = (*engine)->Next();
      EXPECT_TRUE(next.ok()) << next.status().ToString();
      if (!next.ok() || !next->has_value()) break;
      const Tensor* row = (**next).Find("row");
      rows.emplace_back(row->data<int64_t>(), row->data<int64_t>() + row->numel());
      for (const SampleError& e : (**next).errors) errors.push_back(e.ToString());
    }
    return std::make_pair(rows, errors);
  };
  const auto vector = run(false);
  const auto built = run(true);
  EXPECT_EQ(built.first, vector.first);
  EXPECT_EQ(built.second, vector.second);
  EXPECT_EQ(vector.second.size(), GetParam().reads_media ? 4u : 2u);
  // Each sample's record is asked for once per epoch, however many stages use it.
  EXPECT_EQ(built_->gets(), 2 * 22);
}

TEST_P(EngineConformance, RejectsEmptyInput) {
  auto engine = Start(std::make_shared<std::vector<SampleRecord>>(), std::make_unique<FillOp>(), 4);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(EngineConformance, DeliversEveryBatchInOrderThenEndOfEpoch) {
  auto engine = Start(Records(10), std::make_unique<FillOp>(), 4);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto batches = Drain(**engine);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].size(), 2u * 4);  // the partial last batch
  std::set<int64_t> seen;
  for (const auto& b : batches) {
    for (size_t i = 0; i < b.size(); i += 4) {
      seen.insert(b[i]);
      if (GetParam().reads_media) {
        EXPECT_EQ(b[i + 2], b[i] + 1);
      }
    }
  }
  EXPECT_EQ(seen.size(), 10u);
  auto again = (*engine)->Next();  // end of stream is sticky
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());
  EXPECT_EQ((*engine)->Metrics().samples_delivered, 10);
}

// Writes, per sample, the size and first byte of each of its two media items.
class TwoMediaOp final : public Op {
 public:
  std::string_view name() const override { return "test.two_media"; }
  Status Run(SampleContext& ctx) const override {
    auto* row = reinterpret_cast<int64_t*>(ctx.rows[0]);
    row[0] = ctx.sample->index;
    for (int field = 0; field < 2; ++field) {
      const Buffer* media = ctx.sample->MediaOf(field);
      if (media == nullptr) return Status::MissingField("no item of field " + std::to_string(field));
      row[1 + 2 * field] = static_cast<int64_t>(media->size());
      row[2 + 2 * field] = media->empty() ? -1 : media->data()[0];
    }
    return Status::Ok();
  }
};

TEST_P(EngineConformance, ReadsEveryMediaItemOfASampleWholeOrAsARange) {
  // Record i: field 0 is file i whole; field 1 is byte [1, 2) of file i + 1 (which
  // holds (i + 1) % 251 repeated i + 2 times); record 3's second item is missing.
  auto records = Records(8);
  for (int64_t i = 0; i < 7; ++i) {
    MediaRef ref{1, (*records)[i + 1].media[0].uri, 1, 1};
    if (i == 3) ref.uri += ".missing";
    (*records)[i].media.push_back(ref);
  }
  records->pop_back();
  EngineInputs in;
  in.source =
      MakeRecordSource(std::make_shared<VectorRecords>(records), MakeLocalStorage({.threads = 2}));
  in.chain().ops.push_back(std::make_unique<TwoMediaOp>());
  in.fields.push_back(FieldSpec{"row", DType::kI64, {5}});
  EngineOptions opt;
  opt.cpu_threads = GetParam().threads;
  opt.prefetch_depth = GetParam().depth;
  opt.io_inflight = 3;  // fewer than a batch's reads: a sample's items wait for capacity
  opt.io_budget_bytes = 8;  // the largest sample (7 + 1 bytes): few samples are read at once
  opt.order.batch_size = 3;
  opt.order.shuffle = false;
  opt.budget.max_error_rate = 1.0;
  opt.budget.min_samples = 1;
  auto engine = Engine::Start(std::move(in), opt);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::set<int64_t> seen;
  std::vector<SampleError> errors;
  while (true) {
    auto next = (*engine)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    const Tensor* row = (*next)->Find("row");
    for (int64_t s = 0; s < row->shape()[0]; ++s) {
      const int64_t* r = row->data<int64_t>() + 5 * s;
      const int64_t i = r[0];
      seen.insert(i);
      EXPECT_EQ(r[1], i + 1) << i;
      EXPECT_EQ(r[2], i % 251) << i;
      EXPECT_EQ(r[3], 1) << i;  // the range, not the object
      EXPECT_EQ(r[4], (i + 1) % 251) << i;
    }
    for (const SampleError& e : (*next)->errors) errors.push_back(e);
  }
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1, 2, 4, 5, 6}));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].index, 3);
  EXPECT_EQ(errors[0].status.code(), StatusCode::kNotFound);
  const EngineMetrics m = (*engine)->Metrics();
  EXPECT_EQ(m.samples_delivered, 6);
  EXPECT_EQ(m.samples_failed, 1);
}

TEST_P(EngineConformance, SkipsAFailingSampleInTheMiddleAndNamesIt) {
  auto engine = Start(Records(12, {5}), std::make_unique<FillOp>(std::set<int64_t>{7}), 4);
  ASSERT_TRUE(engine.ok());
  int64_t delivered = 0;
  std::vector<SampleError> errors;
  while (true) {
    auto next = (*engine)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    delivered += (*next)->size();
    for (const auto& e : (*next)->errors) errors.push_back(e);
    const Tensor* index = (*next)->Find("index");
    const Tensor* row = (*next)->Find("row");
    for (int64_t i = 0; i < (*next)->size(); ++i) {
      EXPECT_EQ(index->data<int64_t>()[i], row->data<int64_t>()[i * 4]);  // rows compacted
    }
  }
  const bool reads = GetParam().reads_media;
  EXPECT_EQ(delivered, reads ? 10 : 11);
  ASSERT_EQ(errors.size(), reads ? 2u : 1u);
  for (const auto& e : errors) {
    EXPECT_EQ(e.epoch, 0);
    if (e.index == 5) {
      EXPECT_EQ(e.status.code(), StatusCode::kNotFound);
      EXPECT_NE(e.uri.find("f5.missing"), std::string::npos);
    } else {
      EXPECT_EQ(e.index, 7);
      EXPECT_EQ(e.status.code(), StatusCode::kCorruptData);
    }
  }
  auto m = (*engine)->Metrics();
  EXPECT_EQ(m.samples_failed, reads ? 2 : 1);
}

TEST_P(EngineConformance, FailsTheRunWhenErrorsExceedTheBudget) {
  auto engine = Start(Records(8), std::make_unique<FillOp>(std::set<int64_t>{0, 1, 2, 3, 4}), 2, 1,
                      0, /*max_error_rate=*/0.25);
  ASSERT_TRUE(engine.ok());
  Status failure;
  for (int i = 0; i < 10 && failure.ok(); ++i) {
    auto next = (*engine)->Next();
    if (!next.ok()) {
      failure = next.status();
    } else if (!next->has_value()) {
      break;
    }
  }
  EXPECT_EQ(failure.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(failure.message().find("max_error_rate"), std::string::npos);
  // Both as percentages, neither truncated: was "1 of 2 failed (50.0%), above
  // errors.max_error_rate 0.250000".
  EXPECT_NE(failure.message().find(" of 2 samples failed (50%), above errors.max_error_rate 25%;"),
            std::string::npos)
      << failure.message();
}

TEST_P(EngineConformance, CancelWhileBlockedReturnsAndJoins) {
  std::latch started(1);
  auto gate = std::make_unique<GateOp>(&started);
  GateOp* gate_ptr = gate.get();
  auto engine = Start(Records(64), std::move(gate), 4, /*epochs=*/100);
  ASSERT_TRUE(engine.ok());
  started.wait();  // a worker is now blocked inside the chain
  std::thread consumer([&] {
    auto next = (*engine)->Next();  // blocks: no batch can complete
    EXPECT_FALSE(next.ok());
    EXPECT_EQ(next.status().code(), StatusCode::kCancelled);
  });
  (*engine)->Cancel();
  consumer.join();
  gate_ptr->Open();
  engine->reset();  // joins the driver, drains reads and tasks, joins the pool
}

TEST_P(EngineConformance, WaitReadyTimesOutUntilABatchIsReady) {
  std::latch started(1);
  auto gate = std::make_unique<GateOp>(&started);
  GateOp* gate_ptr = gate.get();
  auto engine = Start(Records(8), std::move(gate), 4);
  ASSERT_TRUE(engine.ok());
  started.wait();  // a sample of batch 0 is held in the chain: nothing can be ready
  EXPECT_FALSE((*engine)->WaitReady(std::chrono::milliseconds(1)));
  gate_ptr->Open();
  // Without a deadline that matters: the batch arrives, and Next() then has it at once.
  while (!(*engine)->WaitReady(std::chrono::milliseconds(50))) {
  }
  auto next = (*engine)->Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  auto rest = Drain(**engine);
  EXPECT_EQ(rest.size(), 1u);
  EXPECT_TRUE((*engine)->WaitReady(std::chrono::milliseconds(0)));  // the end is "ready"
}

TEST_P(EngineConformance, UnboundedEpochsRunOnAcrossEpochs) {
  auto engine = Start(Records(10), std::make_unique<FillOp>(), 4, /*epochs=*/std::nullopt);
  ASSERT_TRUE(engine.ok());
  EXPECT_EQ((*engine)->order().total_batches(), EpochOrder::kUnboundedBatches);
  std::vector<int64_t> epochs;
  for (int i = 0; i < 3 * 3 + 1; ++i) {  // 3 batches an epoch
    auto next = (*engine)->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    epochs.push_back((*next)->epoch);
  }
  EXPECT_EQ(epochs, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3}));
  engine->reset();  // destroyed with the producer running ahead, forever
}

TEST_P(EngineConformance, ConsumerStoppingEarlyDoesNotHang) {
  auto engine = Start(Records(64), std::make_unique<FillOp>(), 4, /*epochs=*/1000);
  ASSERT_TRUE(engine.ok());
  auto first = (*engine)->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  engine->reset();  // destroyed with the producer running ahead
}

TEST_P(EngineConformance, StartingAtBatchKMatchesTheUninterruptedRun) {
  auto full_engine = Start(Records(30), std::make_unique<FillOp>(), 4, /*epochs=*/3);
  ASSERT_TRUE(full_engine.ok());
  auto full = Drain(**full_engine);
  ASSERT_EQ(full.size(), 24u);  // 8 batches per epoch (last one partial), 3 epochs
  for (int64_t k : {0, 5, 8, 13, 23, 24}) {
    auto engine = Start(Records(30), std::make_unique<FillOp>(), 4, 3, k);
    ASSERT_TRUE(engine.ok());
    auto tail = Drain(**engine);
    ASSERT_EQ(tail.size(), full.size() - k) << "k=" << k;
    for (size_t i = 0; i < tail.size(); ++i) EXPECT_EQ(tail[i], full[k + i]) << "k=" << k;
  }
}

// The rows of a batch taken on demand.
std::vector<int64_t> Rows(const Batch& b) {
  const Tensor* row = b.Find("row");
  return std::vector<int64_t>(row->data<int64_t>(), row->data<int64_t>() + row->numel());
}

TEST_P(EngineConformance, OnDemandBatchesInAnyOrderMatchTheSequentialRun) {
  auto seq = Start(Records(30), std::make_unique<FillOp>(), 4, /*epochs=*/2, 0, 1.0, -1,
                   std::make_unique<BatchMarkOp>());
  ASSERT_TRUE(seq.ok());
  std::vector<std::vector<int64_t>> full;
  while (true) {  // every position, the failed batch 1 of each epoch included (empty)
    auto next = (*seq)->Next();
    ASSERT_TRUE(next.ok());
    if (!next->has_value()) break;
    full.push_back(Rows(**next));
  }
  ASSERT_EQ(full.size(), 14u);  // batch 1 of each epoch fails whole: 16 - 2
  auto demand = Start(Records(30), std::make_unique<FillOp>(), 4, 2, 0, 1.0, -1,
                      std::make_unique<BatchMarkOp>(), Schedule::kOnDemand);
  ASSERT_TRUE(demand.ok()) << demand.status().ToString();
  Engine& e = **demand;
  EXPECT_EQ(e.Next().status().code(), StatusCode::kInvalidArgument);
  // Out of order, across the epoch boundary, more than the prefetch depth submitted.
  const std::vector<int64_t> order{13, 2, 9, 0, 15, 7, 8, 1};
  for (int64_t k : order) ASSERT_TRUE(e.Submit(k).ok()) << k;
  EXPECT_EQ(e.Submit(2).code(), StatusCode::kInvalidArgument);  // queued already
  EXPECT_EQ(e.Submit(16).code(), StatusCode::kInvalidArgument);  // outside the run
  // Each taken by its own thread, as a Ray worker's calls do: a batch admitted holds
  // the window until taken, so one thread alone would have to take in submission order.
  std::map<int64_t, std::vector<int64_t>> got;
  std::map<int64_t, size_t> errors;
  std::mutex got_mu;
  std::vector<std::thread> takers;
  for (int64_t k : order) {
    takers.emplace_back([&, k] {
      Result<Batch> b = e.Take(k);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      std::lock_guard lock(got_mu);
      got[k] = Rows(*b);
      errors[k] = b->errors.size();
    });
  }
  for (std::thread& t : takers) t.join();
  ASSERT_EQ(got.size(), order.size());
  EXPECT_EQ(got[1].size(), 0u);  // the position of a dropped batch, its errors inside
  EXPECT_EQ(errors[1], 4u);
  EXPECT_EQ(e.Take(2).status().code(), StatusCode::kInvalidArgument);  // taken already
  // Sequential delivery skips the two dropped batches: map positions to it.
  auto seq_index = [](int64_t k) { return k - (k >= 1) - (k >= 9); };
  for (const auto& [k, rows] : got) {
    if (k % 8 == 1) continue;
    EXPECT_EQ(rows, full[seq_index(k)]) << "batch " << k;
  }
  // A batch taken once can be submitted again (a reassignment) and is the same.
  ASSERT_TRUE(e.Submit(9).ok());
  auto again = e.Take(9);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Rows(*again), got[9]);
}

TEST_P(EngineConformance, OnDemandTakeWaitingIsWokenByCancel) {
  auto gate = std::make_unique<GateOp>(nullptr);
  GateOp* gate_ptr = gate.get();
  auto engine = Start(Records(16), std::move(gate), 4, 1, 0, 1.0, -1, nullptr,
                      Schedule::kOnDemand);
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->Submit(3).ok());
  EXPECT_FALSE((*engine)->WaitTakeable(3, std::chrono::milliseconds(1)));
  std::thread canceller([&] { (*engine)->Cancel(); });
  EXPECT_EQ((*engine)->Take(3).status().code(), StatusCode::kCancelled);
  canceller.join();
  gate_ptr->Open();
}

TEST_P(EngineConformance, SameSeedSameBatchesWhateverTheThreadCount) {
  auto one = Start(Records(40), std::make_unique<FillOp>(), 8, 2, 0, 1.0, /*threads=*/1);
  auto four = Start(Records(40), std::make_unique<FillOp>(), 8, 2, 0, 1.0, /*threads=*/4);
  ASSERT_TRUE(one.ok() && four.ok());
  auto a = Drain(**one);
  auto b = Drain(**four);
  EXPECT_EQ(a, b);
  // A new epoch is a new order.
  ASSERT_EQ(a.size(), 10u);
  std::vector<int64_t> epoch0, epoch1;
  for (int i = 0; i < 5; ++i) {
    for (size_t r = 0; r < a[i].size(); r += 4) epoch0.push_back(a[i][r]);
    for (size_t r = 0; r < a[i + 5].size(); r += 4) epoch1.push_back(a[i + 5][r]);
  }
  EXPECT_NE(epoch0, epoch1);
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()),
            std::set<int64_t>(epoch1.begin(), epoch1.end()));
}

TEST_P(EngineConformance, NeverHoldsMoreThanDepthBatchesAhead) {
  std::latch started(1);
  auto gate = std::make_unique<GateOp>(nullptr);
  GateOp* gate_ptr = gate.get();
  auto engine = Start(Records(64), std::move(gate), 2, /*epochs=*/10);
  ASSERT_TRUE(engine.ok());
  gate_ptr->Open();
  auto first = (*engine)->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  // The consumer holds still; the producer must stop at `depth` batches ahead.
  auto m = (*engine)->Metrics();
  EXPECT_LE(m.samples_attempted, 2 * (1 + GetParam().depth));
}

TEST_P(EngineConformance, BatchOpsRunOnCompleteBatchesAndAFailureDropsTheBatch) {
  auto engine = Start(Records(12), std::make_unique<FillOp>(), 4, /*epochs=*/2, 0, 1.0, -1,
                      std::make_unique<BatchMarkOp>());
  ASSERT_TRUE(engine.ok());
  std::vector<int64_t> marks;
  int64_t delivered = 0;
  while (true) {
    auto next = (*engine)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    EXPECT_NE((*next)->index_in_epoch, 1);
    const Tensor* row = (*next)->Find("row");
    for (int64_t i = 0; i < (*next)->size(); ++i) marks.push_back(row->data<int64_t>()[i * 4 + 1]);
    delivered += (*next)->size();
  }
  EXPECT_EQ(delivered, 16);  // 2 of 3 batches in each of 2 epochs
  ASSERT_EQ(marks.size(), 16u);
  EXPECT_EQ(marks[0], marks[3]);  // one value per batch...
  EXPECT_NE(marks[0], marks[4]);  // ...different across batches
  auto m = (*engine)->Metrics();
  EXPECT_EQ(m.samples_failed, 8);
  EXPECT_EQ(m.errors_by_kind["user_function_error"], 8);
  ASSERT_FALSE(m.first_errors.empty());
  EXPECT_NE(m.first_errors[0].status.message().find("test.batch_mark on batch 1 of epoch 0"),
            std::string::npos);
}

TEST_P(EngineConformance, ReturnsAHugeSampleScratchAndReportsIt) {
  constexpr int64_t kMiB = 1 << 20;
  scratch_retain_bytes_ = 4 * kMiB;
  auto engine = Start(Records(12), std::make_unique<ScratchOp>(5, 64 * kMiB), 4);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_EQ(Drain(**engine).size(), 3u);
  const EngineMetrics m = (*engine)->Metrics();
  EXPECT_GE(m.scratch_sample_peak_bytes, 64 * kMiB);
  EXPECT_GE(m.scratch_peak_bytes, m.scratch_sample_peak_bytes);
  // Held now: what each thread kept, within the allowance; the huge slot went back
  // after its sample. (Possibly nothing: a thread whose last sample was the huge one
  // trimmed its only slot, and which thread ran last is up to timing.)
  EXPECT_LE(m.scratch_bytes, GetParam().threads * 4 * kMiB);
  EXPECT_EQ(m.scratch_retain_bytes, 4 * kMiB);
}

// FillOp that says it waited 1 µs for the GIL, as a Python op does.
class GilOp final : public Op {
 public:
  std::string_view name() const override { return "test.gil"; }
  Status Run(SampleContext& ctx) const override {
    ctx.gil_wait_ns = 1000;
    return fill_.Run(ctx);
  }

 private:
  FillOp fill_;
};

TEST_P(EngineConformance, ReportsGilWaitsReadLatencyAndTheBudgetsForTheDoctor) {
  auto engine = Start(Records(12), std::make_unique<GilOp>(), 4);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_EQ(Drain(**engine).size(), 3u);
  const EngineMetrics m = (*engine)->Metrics();
  ASSERT_EQ(m.ops.size(), 1u);
  EXPECT_NEAR(m.ops[0].gil_wait_s, 12 * 1e-6, 1e-12);
  EXPECT_EQ(m.full_batch_bytes, 4 * (4 * 8 + 8));  // the row field and the index
  EXPECT_GT(m.batch_budget_bytes, 0);
  EXPECT_GT(m.io_budget_bytes, 0);
  for (const StageMetrics& s : m.stages) {
    if (s.name == "read") {
      EXPECT_EQ(s.items, 12);
      EXPECT_GE(s.mean_latency_ms, 0);
    } else {
      EXPECT_EQ(s.mean_latency_ms, -1) << s.name;
    }
  }
}

TEST_P(EngineConformance, OpsThatNeverTakeTheGilReportNoGilWait) {
  auto engine = Start(Records(8), std::make_unique<FillOp>(), 4);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_EQ(Drain(**engine).size(), 2u);
  EXPECT_EQ((*engine)->Metrics().ops[0].gil_wait_s, -1);
}

// FillOp that says it decoded 5 video frames and took 2, as video.decode does.
class FramesOp final : public Op {
 public:
  std::string_view name() const override { return "test.frames"; }
  Status Run(SampleContext& ctx) const override {
    ctx.frames_decoded = 5;
    ctx.frames_taken = 2;
    return fill_.Run(ctx);
  }

 private:
  FillOp fill_;
};

TEST_P(EngineConformance, SumsTheVideoFramesAnOpDecodedAndTook) {
  auto engine = Start(Records(12), std::make_unique<FramesOp>(), 4);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_EQ(Drain(**engine).size(), 3u);
  const EngineMetrics m = (*engine)->Metrics();
  ASSERT_EQ(m.ops.size(), 1u);
  EXPECT_EQ(m.ops[0].frames_decoded, 12 * 5);
  EXPECT_EQ(m.ops[0].frames_taken, 12 * 2);
  auto plain = Start(Records(8), std::make_unique<FillOp>(), 4);  // decodes no frames
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_EQ(Drain(**plain).size(), 2u);
  EXPECT_EQ((*plain)->Metrics().ops[0].frames_decoded, -1);
}

// A former's Compose (exec/batch_former.h) decides which samples a batch computes, in
// which order (a planned pack's packed batches); its HandOver hands over media already
// read, which the samples then run on instead of reading them.
class ComposingFormer final : public BatchFormer {
 public:
  std::string_view name() const override { return "composing"; }
  std::optional<std::vector<int64_t>> Compose(const BatchPosition& p,
                                              std::span<const int64_t> samples,
                                              std::stop_token) override {
    composed_at.push_back(p.local_index);
    std::vector<int64_t> out(samples.rbegin(), samples.rend());  // reversed
    if (p.local_index == 1) out.clear();                      // nothing
    if (p.local_index == 2) out.push_back(0);                 // and one of batch 0's again
    return out;
  }
  HandedOver HandOver(int64_t, int64_t index, bool media) override {
    if (!media || index % 2 == 0) return {};  // read as usual
    std::lock_guard lock(mu);
    ++handed;
    return {std::vector<Buffer>{*Buffer::CopyOf("xyz", 3)}, std::nullopt};
  }
  Result<std::optional<Batch>> Next(BatchInput& input) override { return input.Next(); }

  std::vector<int64_t> composed_at;  // the driver's calls, in order
  std::mutex mu;
  int64_t handed = 0;
};

TEST_P(EngineConformance, ComposedBatchesRunTheirSamplesInOrderOnMediaHandedOver) {
  auto records = Records(12);
  EngineInputs in;
  in.source =
      MakeRecordSource(std::make_shared<VectorRecords>(records), MakeLocalStorage({.threads = 2}));
  in.chain().ops.push_back(std::make_unique<FillOp>());
  in.fields.push_back(FieldSpec{"row", DType::kI64, {4}});
  in.reads_media = GetParam().reads_media;
  EngineOptions opt;
  opt.cpu_threads = GetParam().threads;
  opt.prefetch_depth = GetParam().depth;
  opt.order.batch_size = 4;
  opt.order.shuffle = false;
  opt.deliver_empty_batches = true;
  auto former = std::make_shared<ComposingFormer>();
  opt.former = former;
  const std::vector<int64_t>& composed_at = former->composed_at;
  const int64_t& handed = former->handed;
  auto engine = Engine::Start(std::move(in), opt);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<std::vector<int64_t>> got;
  while (true) {
    auto next = (*engine)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    const Tensor* row = (*next)->Find("row");
    std::vector<int64_t> indices;
    for (int64_t s = 0; s < (*next)->size(); ++s) {
      const int64_t* r = row->data<int64_t>() + 4 * s;
      indices.push_back(r[0]);
      if (!GetParam().reads_media) continue;
      if (r[0] % 2 == 1) {
        EXPECT_EQ(r[2], 3) << "the media handed over, not the file";
        EXPECT_EQ(r[3], 'x');
      } else {
        EXPECT_EQ(r[2], r[0] + 1) << "the file, read";
      }
    }
    got.push_back(indices);
  }
  EXPECT_EQ(got, (std::vector<std::vector<int64_t>>{{3, 2, 1, 0}, {}, {11, 10, 9, 8, 0}}));
  EXPECT_EQ(composed_at, (std::vector<int64_t>{0, 1, 2}));
  if (GetParam().reads_media) {
    EXPECT_EQ(handed, 4);
    EXPECT_EQ((*engine)->Metrics().bytes_read, 4 * 3 + (1 + 3 + 9 + 11 + 1)) << "both counted";
  } else {
    EXPECT_EQ(handed, 0) << "nothing to read: not asked";
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, EngineConformance,
                         testing::Values(Config{1, 1, false}, Config{2, 4, false},
                                         Config{1, 2, true}, Config{3, 4, true}),
                         ConfigName);

// Serves each read at once, on the caller's thread: asks the gate with the object's size
// (`size_of(uri)`), then delivers that many bytes. Calls `after_second_read` once.
class SizedStorage final : public Storage {
 public:
  SizedStorage(std::function<int64_t(const std::string&)> size_of,
               std::function<void()> after_second_read)
      : size_of_(std::move(size_of)), after_second_read_(std::move(after_second_read)) {}
  void ReadAsync(std::string uri, ReadCallback done) override {
    ReadAsyncGated(std::move(uri), std::move(done), nullptr);
  }
  void ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) override {
    const int64_t size = size_of_(uri);
    if (gate && !gate(size)) return done(Status::Cancelled("refused"));
    done(*Buffer::Allocate(static_cast<size_t>(size)));
    if (served_.fetch_add(1) + 1 == 2) after_second_read_();
  }
  std::string_view name() const override { return "sized"; }

 private:
  std::function<int64_t(const std::string&)> size_of_;
  std::function<void()> after_second_read_;
  std::atomic<int> served_{0};
};

// Runs `n` samples whose objects have `size_of(index)` bytes with the CPU stage held until
// two reads landed, so that fetched bytes pile up; returns the metrics. Samples whose
// object is larger than the I/O budget fail; the rest are delivered.
EngineMetrics RunWithIoBudget(int64_t n, std::function<int64_t(int64_t)> size_of,
                              int64_t io_budget, int64_t* memory_budget) {
  int64_t too_large = 0;
  for (int64_t i = 0; i < n; ++i) too_large += size_of(i) > io_budget ? 1 : 0;
  auto records = std::make_shared<std::vector<SampleRecord>>();
  for (int64_t i = 0; i < n; ++i) {
    SampleRecord r;
    r.id = std::to_string(i);
    r.media.push_back(MediaRef{0, std::to_string(i)});
    records->push_back(std::move(r));
  }
  auto gate = std::make_unique<GateOp>(nullptr);
  GateOp* gate_ptr = gate.get();
  EngineInputs in;
  in.chain().ops.push_back(std::move(gate));
  in.chain().ops.push_back(std::make_unique<FillOp>());
  in.fields.push_back(FieldSpec{"row", DType::kI64, {4}});
  in.source = MakeRecordSource(
      std::make_shared<VectorRecords>(records),
      std::make_shared<SizedStorage>(
          [size_of](const std::string& uri) { return size_of(std::stoll(uri)); },
          [gate_ptr] { gate_ptr->Open(); }));
  EngineOptions opt;
  opt.cpu_threads = 2;
  opt.io_inflight = 16;
  opt.prefetch_depth = 2;
  opt.order.batch_size = 4;
  opt.order.shuffle = false;
  opt.io_budget_bytes = io_budget;
  opt.budget.max_error_rate = 1.0;
  opt.batch_budget_bytes = static_cast<int64_t>(sizeof(int64_t) * 5 * 4) * opt.prefetch_depth;
  *memory_budget = opt.io_budget_bytes + opt.batch_budget_bytes;
  auto engine = Engine::Start(std::move(in), opt);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return {};
  int64_t delivered = 0;
  while (true) {
    auto next = (*engine)->Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    const Tensor* row = (*next)->Find("row");
    for (int64_t r = 0; r < (*next)->size(); ++r) {
      EXPECT_EQ(row->data<int64_t>()[r * 4 + 2], size_of(row->data<int64_t>()[r * 4]));
    }
    delivered += (*next)->size();
    for (const SampleError& e : (*next)->errors) {
      EXPECT_EQ(e.status.code(), StatusCode::kResourceExhausted) << e.status.ToString();
      EXPECT_GT(size_of(e.index), io_budget);
    }
  }
  EXPECT_EQ(delivered, n - too_large);
  return (*engine)->Metrics();
}

TEST(EngineIoBudget, FetchedBytesNeverExceedTheBudget) {
  // Reads used to be charged when they landed: 16 in flight overshot 250 kB by far.
  int64_t memory_budget = 0;
  const EngineMetrics m =
      RunWithIoBudget(24, [](int64_t) { return int64_t{100000}; }, 250000, &memory_budget);
  EXPECT_GT(m.budget_peak_bytes, 0);
  EXPECT_LE(m.budget_peak_bytes, memory_budget);
}

TEST(EngineIoBudget, ObjectsOfVaryingSizeStayWithinTheBudgetAndOneTooBigFails) {
  int64_t memory_budget = 0;
  auto size_of = [](int64_t i) { return i == 9 ? int64_t{400000} : 20000 + 9000 * (i % 7); };
  const EngineMetrics m = RunWithIoBudget(32, size_of, 250000, &memory_budget);
  // The 400 kB object can never fit the 250 kB I/O budget: its sample fails at the gate
  // (it used to pass alone, taking the budget's peak past the budget).
  EXPECT_LE(m.budget_peak_bytes, memory_budget);
  EXPECT_EQ(m.samples_failed, 1);
}

// Appends index % 5 rows of (index, a draw of its random stream) to the ragged field at
// row 1, and writes the index into the fixed one at row 0; fails for index 6.
class RaggedFillOp final : public Op {
 public:
  std::string_view name() const override { return "test.ragged"; }
  Status Run(SampleContext& ctx) const override {
    if (ctx.sample->index == 6) return Status::CorruptData("bad sample");
    *reinterpret_cast<int64_t*>(ctx.rows[0]) = ctx.sample->index;
    const int64_t n = ctx.sample->index % 5;
    HR_ASSIGN_OR_RETURN(uint8_t * out, ctx.AppendRows(1, n));
    Rng rng = ctx.OpRng(0);
    auto* rows = reinterpret_cast<int64_t*>(out);
    for (int64_t r = 0; r < n; ++r) {
      rows[2 * r] = ctx.sample->index;
      rows[2 * r + 1] = static_cast<int64_t>(rng.Next() >> 1);
    }
    return Status::Ok();
  }
};

struct RaggedRun {
  std::vector<int64_t> fixed, rows;
  std::vector<int32_t> lengths;
  EngineMetrics metrics;
};

RaggedRun RunRagged(int threads) {
  auto records = std::make_shared<std::vector<SampleRecord>>(40);
  for (size_t i = 0; i < records->size(); ++i) (*records)[i].id = std::to_string(i);
  EngineInputs in;
  in.chain().ops.push_back(std::make_unique<RaggedFillOp>());
  in.fields = {FieldSpec{"fixed", DType::kI64, {}},
               FieldSpec{"ragged", DType::kI64, {2}, FieldLayout::kRagged},
               FieldSpec{"ragged_lengths", DType::kI32, {}, FieldLayout::kLengths}};
  in.reads_media = false;
  in.source = MakeRecordSource(std::make_shared<VectorRecords>(records), nullptr);
  EngineOptions opt;
  opt.cpu_threads = threads;
  opt.prefetch_depth = 3;
  opt.io_inflight = 4;
  opt.order.batch_size = 8;
  opt.order.seed = 3;
  opt.budget.max_error_rate = 1.0;
  opt.budget.min_samples = 1;
  RaggedRun out;
  auto engine = Engine::Start(std::move(in), opt);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return out;
  while (true) {
    auto next = (*engine)->Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    const Batch& b = **next;
    const Tensor* fixed = b.Find("fixed");
    const Tensor* ragged = b.Find("ragged");
    const Tensor* lengths = b.Find("ragged_lengths");
    EXPECT_EQ(lengths->numel(), b.size()) << "one entry per sample";
    int64_t rows = 0;
    for (int64_t s = 0; s < b.size(); ++s) {
      EXPECT_EQ(lengths->data<int32_t>()[s], fixed->data<int64_t>()[s] % 5);
      for (int32_t r = 0; r < lengths->data<int32_t>()[s]; ++r, ++rows) {
        EXPECT_EQ(ragged->data<int64_t>()[2 * rows], fixed->data<int64_t>()[s])
            << "each sample's rows follow the one before, in batch order";
      }
    }
    EXPECT_EQ(rows, ragged->shape()[0]);
    out.fixed.insert(out.fixed.end(), fixed->data<int64_t>(),
                     fixed->data<int64_t>() + fixed->numel());
    out.rows.insert(out.rows.end(), ragged->data<int64_t>(),
                    ragged->data<int64_t>() + ragged->numel());
    out.lengths.insert(out.lengths.end(), lengths->data<int32_t>(),
                       lengths->data<int32_t>() + lengths->numel());
  }
  out.metrics = (*engine)->Metrics();
  return out;
}

TEST(EngineRagged, ConcatenatedFieldsAreTheSameWhateverTheThreadCountAndAreCharged) {
  const RaggedRun one = RunRagged(1);
  const RaggedRun three = RunRagged(3);
  EXPECT_EQ(one.fixed.size(), 39u) << "one sample failed";
  EXPECT_EQ(one.fixed, three.fixed);
  EXPECT_EQ(one.rows, three.rows);
  EXPECT_EQ(one.lengths, three.lengths);
  // Their bytes were charged to the batch budget while the batches waited, and
  // released with them.
  const int64_t fixed_batch = 8 * 2 * 8;
  EXPECT_GT(one.metrics.budget_peak_bytes, fixed_batch);
  EXPECT_EQ(one.metrics.budget_used_bytes, 0);
  EXPECT_EQ(three.metrics.budget_used_bytes, 0);
}

// Appends, and tells before it runs, 8 rows of 8 bytes for samples 0-31 and 25,600
// (200 KiB) for the rest; counts the rows' bytes alive (appended, and not of a batch the
// consumer took or waits for) and their peak.
class TellingRowsOp final : public Op {
 public:
  static int64_t BytesOf(int64_t index) { return 8 * (index < 32 ? 8 : 25600); }
  std::string_view name() const override { return "test.telling_rows"; }
  Telling Tells() const override { return Telling::kRows; }
  bool Predict(SizePass& pass) const override {
    pass.rows[1] += BytesOf(pass.ctx->sample->index) / 8;
    return true;
  }
  Status Run(SampleContext& ctx) const override {
    const int64_t n = BytesOf(ctx.sample->index) / 8;
    *reinterpret_cast<int64_t*>(ctx.rows[0]) = ctx.sample->index;
    HR_ASSIGN_OR_RETURN(uint8_t * out, ctx.AppendRows(1, n));
    std::fill_n(reinterpret_cast<int64_t*>(out), n, ctx.sample->index);
    StoreMax(peak, alive.fetch_add(n * 8) + n * 8);
    return Status::Ok();
  }
  static inline std::atomic<int64_t> alive{0};
  static inline std::atomic<int64_t> peak{0};
};

TEST(EngineRagged, ToldRowsPastTheBatchBudgetWaitForItBeyondTheBatchTheConsumerNeeds) {
  // Before 2026-12-07 a batch was admitted by the mean rows a sample so far, and its
  // samples' rows were held as they came: after eight batches of small samples, the
  // four admitted next ran at once, 4 x 800 KiB of rows against a 1 MiB batch budget.
  TellingRowsOp::alive = 0;
  TellingRowsOp::peak = 0;
  auto records = std::make_shared<std::vector<SampleRecord>>(64);
  for (size_t i = 0; i < records->size(); ++i) (*records)[i].id = std::to_string(i);
  EngineInputs in;
  in.chain().ops.push_back(std::make_unique<TellingRowsOp>());
  in.fields = {FieldSpec{"fixed", DType::kI64, {}},
               FieldSpec{"ragged", DType::kI64, {}, FieldLayout::kRagged},
               FieldSpec{"ragged_lengths", DType::kI32, {}, FieldLayout::kLengths}};
  in.reads_media = false;
  in.source = MakeRecordSource(std::make_shared<VectorRecords>(records), nullptr);
  EngineOptions opt;
  opt.cpu_threads = 2;
  opt.prefetch_depth = 4;
  opt.order.batch_size = 4;
  opt.order.shuffle = false;  // batch k holds samples 4k to 4k + 3: the small ones first
  opt.batch_budget_bytes = 1 << 20;
  auto engine = Engine::Start(std::move(in), opt);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  for (int64_t k = 0;; ++k) {
    // The consumer waits for batch k only once the engine went as far ahead of it as it
    // could: every batch admitted is ready, or a sample's rows wait for the budget.
    if (k > 0 && k < 16) {
      EngineMetrics m;
      do {
        std::this_thread::yield();
        m = (*engine)->Metrics();
      } while (!(m.batches_ready >= 1 &&
                 (m.rows_waiting > 0 ||
                  m.batches_ready == m.samples_attempted / 4 - m.batches_delivered)));
    }
    // Batch k's rows are the consumer's from now (the batch it waits for may go past the
    // budget: it must be made for the run to go on).
    for (int64_t i = 4 * k; i < 4 * k + 4 && i < 64; ++i) {
      TellingRowsOp::alive.fetch_sub(TellingRowsOp::BytesOf(i));
    }
    auto next = (*engine)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) {
      EXPECT_EQ(k, 16);
      break;
    }
    EXPECT_TRUE((*next)->errors.empty());
    EXPECT_EQ((*next)->Find("fixed")->data<int64_t>()[0], 4 * k);
  }
  const EngineMetrics m = (*engine)->Metrics();
  EXPECT_GT(m.rows_waits, 0);
  // The rows of the batches past the one the consumer waits for: within the budget, and
  // past it those of the batch it needs next (its samples never wait, so that it is
  // made): 1.0-1.2 MiB measured, 2.4-3.2 MiB before.
  EXPECT_LE(TellingRowsOp::peak.load(), (1 << 20) + 4 * 204800);
}

TEST(EpochOrder, RanksGetDisjointEqualShares) {
  std::set<int64_t> all;
  int64_t per_rank = -1;
  for (int rank = 0; rank < 3; ++rank) {
    auto order = EpochOrder::Make(
        {.num_samples = 100, .batch_size = 10, .seed = 1, .rank = rank, .world_size = 3});
    ASSERT_TRUE(order.ok());
    if (per_rank < 0) per_rank = order->batches_per_rank_epoch();
    EXPECT_EQ(order->batches_per_rank_epoch(), per_rank);
    for (int64_t j = 0; j < order->batches_per_rank_epoch(); ++j) {
      for (int64_t i : order->SampleIndices(order->Position(j))) {
        EXPECT_TRUE(all.insert(i).second) << "sample " << i << " given twice";
      }
    }
  }
  EXPECT_EQ(per_rank, 3);
  EXPECT_EQ(all.size(), 90u);
}

TEST(EpochOrder, ShuffleOffKeepsFileOrder) {
  auto order = EpochOrder::Make({.num_samples = 5, .batch_size = 2, .shuffle = false});
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->Permutation(3), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(order->SampleIndices(order->Position(2)), (std::vector<int64_t>{4}));
}

TEST(EpochOrder, UnboundedAndHugeRunsSaturate) {
  auto unbounded = EpochOrder::Make({.num_samples = 10, .batch_size = 3, .epochs = std::nullopt});
  ASSERT_TRUE(unbounded.ok());
  EXPECT_EQ(unbounded->total_batches(), EpochOrder::kUnboundedBatches);
  EXPECT_EQ(unbounded->Position(4 * 1000000 + 1).epoch, 1000000);
  auto huge = EpochOrder::Make(
      {.num_samples = 10, .batch_size = 3, .epochs = std::numeric_limits<int64_t>::max() / 2});
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(huge->total_batches(), EpochOrder::kUnboundedBatches);  // 4 x (max / 2) overflows
  EXPECT_FALSE(EpochOrder::Make({.num_samples = 10, .epochs = 0}).ok());
}

TEST(EpochOrder, RejectsBadRank) {
  EXPECT_FALSE(EpochOrder::Make({.num_samples = 5, .rank = 2, .world_size = 2}).ok());
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

// A source that parses even samples' caption at run time, as a Parquet row group's cells.
class CaptionSource final : public RecordSource {
 public:
  explicit CaptionSource(std::shared_ptr<const RecordStore> records)
      : RecordSource({}, nullptr, {std::move(records)}) {}
  Status Fill(std::vector<Buffer> media, Sample& sample) const override {
    FillFromRecord(std::move(media), sample);
    if (sample.index % 2 == 0) {
      sample.parsed.attributes = {Attribute{3, "parsed " + std::to_string(sample.index)}};
      sample.attributes = sample.parsed.attributes;
    }
    return Status::Ok();
  }
};

TEST(EngineSourceFill, StringsParsedAtRunTimeReachTheBatchTheRecordsOtherwise) {
  auto records = std::make_shared<std::vector<SampleRecord>>(6);
  for (int i = 0; i < 6; ++i) {
    (*records)[i].id = std::to_string(i);
    (*records)[i].attributes = {Attribute{3, std::string("record ") + std::to_string(i)}};
  }
  EngineInputs in;
  in.source = std::make_shared<CaptionSource>(std::make_shared<VectorRecords>(records));
  in.chain().ops.push_back(std::make_unique<FillOp>());
  in.fields.push_back(FieldSpec{"row", DType::kI64, {4}});
  in.strings.push_back(EngineInputs::StringField{"caption", 3, false});
  in.reads_media = false;
  EngineOptions opt;
  opt.cpu_threads = 2;
  opt.order.batch_size = 6;
  auto engine = Engine::Start(std::move(in), opt);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto batch = (*engine)->Next();
  ASSERT_TRUE(batch.ok() && batch->has_value());
  const Batch& b = **batch;
  ASSERT_EQ(b.strings.size(), 1u);
  ASSERT_EQ(b.strings[0].rows.size(), 6u);
  const Tensor* index = b.Find("index");
  ASSERT_NE(index, nullptr);
  for (int row = 0; row < 6; ++row) {
    const int64_t i = index->data<int64_t>()[row];
    EXPECT_EQ(b.strings[0].rows[row],
              std::vector<std::string>{(i % 2 == 0 ? "parsed " : "record ") + std::to_string(i)});
  }
}

TEST(EngineEpochRecords, EachEpochReadsItsOwnRecordsAndTooFewEpochsAreRefused) {
  const auto records_named = [](const std::string& tag, int64_t bad) {
    auto records = std::make_shared<std::vector<SampleRecord>>(4);
    for (int i = 0; i < 4; ++i) (*records)[i].id = tag + std::to_string(i);
    (*records)[bad].status = Status::CorruptData("skipped in " + tag);
    return records;
  };
  const auto start = [&](std::optional<int64_t> epochs) {
    EngineInputs in;
    in.source = std::make_shared<RecordSource>(
        SourceSpec{}, nullptr,
        std::vector<std::shared_ptr<const RecordStore>>{
            std::make_shared<VectorRecords>(records_named("epoch0-", 1)),
            std::make_shared<VectorRecords>(records_named("epoch1-", 2))});
    in.chain().ops.push_back(std::make_unique<FillOp>());
    in.fields.push_back(FieldSpec{"row", DType::kI64, {4}});
    in.strings.push_back(EngineInputs::StringField{"id", -1, false});
    in.reads_media = false;
    EngineOptions opt;
    opt.cpu_threads = 2;
    opt.order.batch_size = 4;
    opt.order.shuffle = false;
    opt.order.epochs = epochs;
    opt.budget.max_error_rate = 1.0;
    return Engine::Start(std::move(in), opt);
  };
  auto engine = start(2);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto batch = (*engine)->Next();
    ASSERT_TRUE(batch.ok() && batch->has_value());
    const std::string tag = "epoch" + std::to_string(epoch) + "-";
    std::vector<std::vector<std::string>> ids;
    for (int i = 0; i < 4; ++i) {
      if (i != epoch + 1) ids.push_back({tag + std::to_string(i)});
    }
    EXPECT_EQ((*batch)->strings[0].rows, ids);
    ASSERT_EQ((*batch)->errors.size(), 1u);
    EXPECT_EQ((*batch)->errors[0].index, epoch + 1);
    EXPECT_EQ((*batch)->errors[0].status.message(), "skipped in " + tag);
  }
  EXPECT_EQ(start(3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(start(std::nullopt).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headrace
