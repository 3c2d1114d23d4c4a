#include "headrace/exec/pack_sizer.h"

#include "headrace/core/record_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>

namespace headrace {
namespace {

Buffer Bytes(size_t n, char c) { return *Buffer::CopyOf(std::string(n, c).data(), n); }

TEST(ReadMedia, KeepsWhatTheSizerReadUntilTakenOnceAndDropsTheOldestPastItsBytes) {
  ReadMedia media(100);
  media.Put(0, 1, {Bytes(40, 'a')});
  media.Put(0, 2, {Bytes(30, 'b'), Bytes(10, 'c')});
  EXPECT_EQ(media.bytes(), 80);
  std::optional<std::vector<Buffer>> two = media.Take(0, 2);
  ASSERT_TRUE(two.has_value());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].data()[0], 'c');
  EXPECT_FALSE(media.Take(0, 2).has_value()) << "taken once";
  EXPECT_FALSE(media.Take(1, 1).has_value()) << "another epoch's sample 1";
  EXPECT_EQ(media.bytes(), 40);
  media.Put(0, 3, {Bytes(50, 'd')});
  media.Put(0, 4, {Bytes(20, 'e')});  // 110 bytes: the oldest (sample 1) goes
  EXPECT_EQ(media.bytes(), 70);
  EXPECT_FALSE(media.Take(0, 1).has_value()) << "dropped: its sample reads it again";
  EXPECT_TRUE(media.Take(0, 3).has_value());
  media.Put(0, 5, {Bytes(101, 'f')});  // more than all: not kept
  EXPECT_FALSE(media.Take(0, 5).has_value());
  EXPECT_EQ(media.bytes(), 20);
}

TEST(ToldSequences, KeepAtMostTheirCountAndBytesTheOldestDroppedFirst) {
  const auto told = [](int64_t tokens) {
    ToldSequence t;
    t.ids.assign(static_cast<size_t>(tokens), 7);
    t.labels.assign(static_cast<size_t>(tokens), -100);
    return t;
  };
  ToldSequences kept(kToldBytes, kToldSamples);
  for (int64_t i = 0; i <= static_cast<int64_t>(kToldSamples); ++i) kept.Put(1, 100 + i, told(4));
  EXPECT_FALSE(kept.Take(1, 100).has_value()) << "the oldest went";
  ASSERT_TRUE(kept.Take(1, 101).has_value()) << "kept";
  EXPECT_FALSE(kept.Take(1, 101).has_value()) << "taken once";
  ToldSequences small(1000);
  small.Put(0, 1, told(40));  // 640 bytes
  small.Put(0, 2, told(40));  // 1280: the oldest goes
  EXPECT_EQ(small.bytes(), 640);
  EXPECT_FALSE(small.Take(0, 1).has_value());
  EXPECT_EQ(small.Take(0, 2)->ids.size(), 40u);
  small.Put(0, 3, told(100));  // more than all: not kept
  EXPECT_FALSE(small.Take(0, 3).has_value());
}

// An op whose size pass tells (or not), and is no text.tokenize.
class TellingOp final : public Op {
 public:
  explicit TellingOp(bool tells) : tells_(tells) {}
  std::string_view name() const override { return "test.telling"; }
  Status Run(SampleContext&) const override { return Status::Ok(); }
  Telling Tells() const override { return tells_ ? Telling::kRows : Telling::kNothing; }

 private:
  bool tells_;
};

TEST(ChainTellsTokens, NotWithoutATokenizeNorAfterAnOpThatCannotTell) {
  EngineInputs in;
  in.chain().ops.push_back(std::make_unique<TellingOp>(true));
  EXPECT_FALSE(ChainTellsTokens(in)) << "no text.tokenize";
  in.chain().ops.push_back(std::make_unique<TellingOp>(false));
  EXPECT_FALSE(ChainTellsTokens(in));
  EngineInputs none;
  EXPECT_FALSE(ChainTellsTokens(none)) << "no chain";
}

// Tells its sample's first media item's size as the tokens of batch field 0.
class BytesAsTokens final : public Op {
 public:
  std::string_view name() const override { return "test.bytes_as_tokens"; }
  Status Run(SampleContext&) const override { return Status::Ok(); }
  bool Predict(SizePass& pass) const override {
    const Buffer* media = pass.ctx->sample->MediaOf(0);
    if (media == nullptr) return false;
    pass.rows[0] += static_cast<int64_t>(media->size());
    return true;
  }
  Telling Tells() const override { return Telling::kRowsAndTokens; }
};

TEST(SizeByTheSizePass, TellsFromTheBytesReadKeepsThemAndReadsNothingPastTheBudget) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pack_sizer_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto records = std::make_shared<std::vector<SampleRecord>>();
  for (const int64_t size : {10, 50, 200, -1}) {  // -1: no such file
    SampleRecord r;
    r.id = "s" + std::to_string(records->size());
    const auto path = dir / r.id;
    if (size >= 0) std::ofstream(path) << std::string(static_cast<size_t>(size), 'x');
    r.media.push_back(MediaRef{0, path.string() + (size < 0 ? ".missing" : "")});
    records->push_back(std::move(r));
  }
  auto in = std::make_shared<EngineInputs>();
  in->source = MakeRecordSource(std::make_shared<VectorRecords>(records), MakeLocalStorage({}));
  in->chain().ops.push_back(std::make_unique<BytesAsTokens>());
  in->fields.push_back(FieldSpec{"tokens", DType::kI64, {}, FieldLayout::kRagged});
  EXPECT_TRUE(ChainTellsTokens(*in));
  PackOptions options;
  options.seq_len = 1000;
  auto keep = std::make_shared<ReadMedia>(1 << 20);
  const PackPlanner::Sizer sizer = SizeByTheSizePass(in, 0, options, keep, 100);
  const std::vector<int64_t> all = {0, 1, 2, 3};
  const std::vector<std::optional<PackPlanner::Told>> told = sizer(0, all, {});
  ASSERT_EQ(told.size(), 4u);
  ASSERT_TRUE(told[0].has_value() && told[1].has_value());
  EXPECT_EQ(told[0]->tokens, 10);
  EXPECT_EQ(told[1]->tokens, 50);
  EXPECT_EQ(told[1]->id, "s1");
  EXPECT_FALSE(told[2].has_value()) << "200 bytes: past the budget, not read";
  EXPECT_FALSE(told[3].has_value()) << "missing";
  EXPECT_EQ(keep->bytes(), 60) << "what it read, for the samples' runs";
  EXPECT_EQ(keep->Take(0, 1)->front().size(), 50u);

  std::stop_source stopped;
  stopped.request_stop();
  for (const auto& t : sizer(0, all, stopped.get_token())) EXPECT_FALSE(t.has_value());
  std::filesystem::remove_all(dir);
}

// A storage whose reads complete, on a thread of its own, a round at a time: once
// `round` reads wait (or all the rest of `total`), all of them. Each object holds 8 bytes,
// or with `size_in_name` the number its name ends with ("object40": 40), and each read's
// gate is asked for that size before it waits (as the local, S3 and HTTP backends ask): a
// refused read ends kCancelled at once and is not counted. It records the most reads,
// and the most bytes, that waited at once.
class RoundsStorage final : public Storage {
 public:
  RoundsStorage(int round, int total, bool size_in_name = false)
      : round_(round), total_(total), size_in_name_(size_in_name) {
    thread_ = std::jthread([this](std::stop_token stop) {
      std::unique_lock lock(mu_);
      while (true) {
        if (!cv_.wait(lock, stop, [&] {
              return !pending_.empty() &&
                     static_cast<int>(pending_.size()) >= std::min(round_, total_ - completed_);
            })) {
          return;
        }
        auto now = std::move(pending_);
        pending_.clear();
        completed_ += static_cast<int>(now.size());
        pending_bytes_ = 0;
        lock.unlock();
        for (auto& [size, done] : now) done(Bytes(static_cast<size_t>(size), 'x'));
        lock.lock();
      }
    });
  }
  void ReadAsync(std::string uri, ReadCallback done) override {
    ReadAsyncGated(std::move(uri), std::move(done), nullptr);
  }
  void ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) override {
    const int64_t size =
        size_in_name_ ? std::stoll(uri.substr(uri.find_first_of("0123456789"))) : 8;
    if (gate != nullptr && !gate(size)) {
      done(Status::Cancelled("refused by the gate"));
      return;
    }
    std::lock_guard lock(mu_);
    pending_.emplace_back(size, std::move(done));
    pending_bytes_ += size;
    max_inflight_ = std::max(max_inflight_, static_cast<int>(pending_.size()));
    max_pending_bytes_ = std::max(max_pending_bytes_, pending_bytes_);
    cv_.notify_all();
  }
  std::string_view name() const override { return "rounds"; }
  int max_inflight() {
    std::lock_guard lock(mu_);
    return max_inflight_;
  }
  int64_t max_pending_bytes() {
    std::lock_guard lock(mu_);
    return max_pending_bytes_;
  }

 private:
  const int round_;
  const int total_;
  const bool size_in_name_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::vector<std::pair<int64_t, ReadCallback>> pending_;
  int completed_ = 0;
  int max_inflight_ = 0;
  int64_t pending_bytes_ = 0;
  int64_t max_pending_bytes_ = 0;
  std::jthread thread_;  // last: stopped and joined first
};

// The sizer of BytesAsTokens over `records` read from `storage`, `max_inflight` at once.
PackPlanner::Sizer WindowedSizer(std::shared_ptr<std::vector<SampleRecord>> records,
                                 std::shared_ptr<Storage> storage, int max_inflight) {
  auto in = std::make_shared<EngineInputs>();
  in->source = MakeRecordSource(std::make_shared<VectorRecords>(records), std::move(storage));
  in->chain().ops.push_back(std::make_unique<BytesAsTokens>());
  in->fields.push_back(FieldSpec{"tokens", DType::kI64, {}, FieldLayout::kRagged});
  PackOptions options;
  options.seq_len = 1000;
  return SizeByTheSizePass(in, 0, options, nullptr, INT64_MAX, nullptr, max_inflight);
}

TEST(SizeByTheSizePass, ReadsAWindowOfIoInflightAtOnceAndSizesEverySample) {
  auto records = std::make_shared<std::vector<SampleRecord>>();
  for (int i = 0; i < 11; ++i) {
    SampleRecord r;
    r.id = "s" + std::to_string(i);
    r.media.push_back(MediaRef{0, "object" + std::to_string(i)});
    records->push_back(std::move(r));
  }
  auto storage = std::make_shared<RoundsStorage>(3, 11);
  const PackPlanner::Sizer sizer = WindowedSizer(records, storage, /*max_inflight=*/3);
  std::vector<int64_t> all(11);
  std::iota(all.begin(), all.end(), 0);
  const std::vector<std::optional<PackPlanner::Told>> told = sizer(0, all, {});
  ASSERT_EQ(told.size(), 11u);
  for (const auto& t : told) {
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->tokens, 8);
  }
  EXPECT_EQ(storage->max_inflight(), 3) << "a window of 3 reads, never the whole call's 11";
}

TEST(SizeByTheSizePass, ASampleWithMoreItemsThanTheWindowIsSized) {
  // 7 items of one sample through a window of 2: its reads go out as earlier ones return.
  auto records = std::make_shared<std::vector<SampleRecord>>(1);
  for (int m = 0; m < 7; ++m) {
    (*records)[0].media.push_back(MediaRef{0, "object" + std::to_string(m)});
  }
  auto storage = std::make_shared<RoundsStorage>(2, 7);
  const PackPlanner::Sizer sizer = WindowedSizer(records, storage, /*max_inflight=*/2);
  const std::vector<int64_t> one = {0};
  const std::vector<std::optional<PackPlanner::Told>> told = sizer(0, one, {});
  ASSERT_TRUE(told[0].has_value());
  EXPECT_EQ(told[0]->tokens, 8) << "BytesAsTokens counts the first item's bytes";
  EXPECT_EQ(storage->max_inflight(), 2);
}

TEST(SizeByTheSizePass, HoldsItsReadsToTheIoBudgetAsTheReadStageDoes) {
  // 7 objects of 40 bytes, a budget of 100 and a window of 8: two reads' bytes at once;
  // the third's gate refuses it, and it is read again once the two are sized.
  auto records = std::make_shared<std::vector<SampleRecord>>();
  for (int i = 0; i < 7; ++i) {
    SampleRecord r;
    r.media.push_back(MediaRef{0, "object40"});
    records->push_back(std::move(r));
  }
  auto storage = std::make_shared<RoundsStorage>(2, 7, /*size_in_name=*/true);
  auto in = std::make_shared<EngineInputs>();
  in->source = MakeRecordSource(std::make_shared<VectorRecords>(records), storage);
  in->chain().ops.push_back(std::make_unique<BytesAsTokens>());
  in->fields.push_back(FieldSpec{"tokens", DType::kI64, {}, FieldLayout::kRagged});
  PackOptions options;
  options.seq_len = 1000;
  const PackPlanner::Sizer sizer =
      SizeByTheSizePass(in, 0, options, nullptr, /*io_budget_bytes=*/100, nullptr, 8);
  std::vector<int64_t> all(7);
  std::iota(all.begin(), all.end(), 0);
  for (const auto& t : sizer(0, all, {})) {
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->tokens, 40);
  }
  EXPECT_EQ(storage->max_pending_bytes(), 80) << "never a third read's bytes past 100";

  // One sample whose 3 items take 120 bytes, more than the budget: its first read waits
  // for the budget, the others follow it (its bytes are released only once it is sized).
  auto three = std::make_shared<std::vector<SampleRecord>>(1);
  for (int m = 0; m < 3; ++m) (*three)[0].media.push_back(MediaRef{0, "object40"});
  auto alone = std::make_shared<RoundsStorage>(3, 3, /*size_in_name=*/true);
  in->source = MakeRecordSource(std::make_shared<VectorRecords>(three), alone);
  const PackPlanner::Sizer one =
      SizeByTheSizePass(in, 0, options, nullptr, /*io_budget_bytes=*/100, nullptr, 8);
  const std::vector<int64_t> first = {0};
  const std::vector<std::optional<PackPlanner::Told>> told = one(0, first, {});
  ASSERT_TRUE(told[0].has_value());
  EXPECT_EQ(alone->max_pending_bytes(), 120);
}

}  // namespace
}  // namespace headrace
