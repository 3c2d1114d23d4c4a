#include "headrace/exec/batch_formers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <tuple>

#include "headrace/core/record_store.h"

namespace headrace {
namespace {

// An op whose size pass tells the tokens (what a planned pack sizes by: text.tokenize).
class TellsTokensOp final : public Op {
 public:
  std::string_view name() const override { return "test.tells_tokens"; }
  Status Run(SampleContext&) const override { return Status::Ok(); }
  Telling Tells() const override { return Telling::kRowsAndTokens; }
};

struct Formed {
  std::shared_ptr<BatchFormer> former;
  EngineOptions engine;
};

// The former MakeBatchFormer picks for a run of 3 batches of 4 an epoch, with `pack`.
Formed Form(std::optional<PackOptions> pack, bool tells_tokens, EngineOptions engine = {},
            std::optional<PackState> resume = std::nullopt, bool plan_packing = true) {
  auto inputs = std::make_shared<EngineInputs>();
  inputs->fields.push_back(FieldSpec{"input_ids", DType::kI64, {}, FieldLayout::kRagged, "",
                                     "input_ids"});
  inputs->fields.push_back(FieldSpec{"input_ids_lengths", DType::kI32, {}, FieldLayout::kLengths});
  if (tells_tokens) inputs->chain().ops.push_back(std::make_unique<TellsTokensOp>());
  engine.order.num_samples = 12;
  engine.order.batch_size = 4;
  engine.order.shuffle = false;
  FormingRun run{.inputs = inputs, .pack = pack, .engine = &engine, .resume = resume,
                 .plan_packing = plan_packing};
  Result<std::shared_ptr<BatchFormer>> former = MakeBatchFormer(run);
  EXPECT_TRUE(former.ok()) << former.status().ToString();
  return {former.ok() ? *former : nullptr, engine};
}

PackOptions Pack(int64_t window) {
  PackOptions o;
  o.seq_len = 64;
  o.window = window;
  return o;
}

// A packing window with rows dealt (balance with window > 0): window 4, rows of 256.
PackOptions RowsDealt() {
  PackOptions pack = Pack(4);
  pack.seq_len = 256;
  return pack;
}

TEST(BatchFormers, EachRunGetsThePolicyThatTakesIt) {
  EXPECT_EQ(Form(std::nullopt, true).former->name(), "plain");
  EXPECT_EQ(Form(Pack(0), false).former->name(), "pack") << "the chain cannot tell tokens";
  EXPECT_EQ(Form(Pack(0), true).former->name(), "pack planned");
  EXPECT_EQ(Form(Pack(0), true, {}, std::nullopt, /*plan_packing=*/false).former->name(), "pack");
  EngineOptions on_demand;
  on_demand.schedule = Schedule::kOnDemand;
  EXPECT_EQ(Form(Pack(0), true, on_demand).former->name(), "plain")
      << "an on-demand engine's consumer packs (a Ray rank)";
}

TEST(BatchFormers, PlainLeavesTheEngineAsItIs) {
  EngineOptions engine;
  engine.start_epoch = 1;
  engine.start_batch = 2;
  const Formed f = Form(std::nullopt, false, engine);
  EXPECT_FALSE(f.former->keeps_sample_rows());
  EXPECT_FALSE(f.former->counts_losses());
  EXPECT_FALSE(f.engine.deliver_empty_batches);
  EXPECT_EQ(f.engine.start_epoch, 1);
  EXPECT_EQ(f.engine.start_batch, 2);
  EXPECT_FALSE(f.former->state().has_value());
  EXPECT_FALSE(f.former->stats().has_value());
}

TEST(BatchFormers, APackFollowsEveryPositionAndStartsWhereItsWindowMust) {
  EngineOptions engine;
  engine.start_epoch = 1;
  engine.start_batch = 2;
  Formed f = Form(Pack(0), false, engine);
  EXPECT_TRUE(f.former->keeps_sample_rows());
  EXPECT_TRUE(f.former->counts_losses());
  EXPECT_TRUE(f.engine.deliver_empty_batches) << "the packer sees every batch";
  EXPECT_EQ(f.engine.start_batch, 2) << "window 0: each batch packs alone";
  f = Form(Pack(4), false, engine);
  EXPECT_EQ(f.engine.start_epoch, 1);
  EXPECT_EQ(f.engine.start_batch, 0) << "a window replays its epoch up to the start";
  PackState saved;
  saved.epoch = 2;
  saved.from_batch = 1;
  saved.next_batch = 2;
  f = Form(Pack(4), false, engine, saved);
  EXPECT_EQ(f.engine.start_epoch, 2);
  EXPECT_EQ(f.engine.start_batch, 1) << "from where the saved window began";

  f = Form(Pack(4), true);
  EXPECT_FALSE(f.former->keeps_sample_rows()) << "planned: rows laid out as they run";
  EXPECT_TRUE(f.former->counts_losses());
}

// Sample i's "tokens": 3 + i % 5 of them, tokenized (counted) unless its run was handed
// what an earlier size pass tokenized (Sample::told), as text.tokenize does.
class CountingTokenizer final : public Op {
 public:
  std::string_view name() const override { return "test.counting_tokenizer"; }
  Telling Tells() const override { return Telling::kRowsAndTokens; }
  bool Predict(SizePass& pass) const override {
    const Sample& sample = *pass.ctx->sample;
    ToldSequence tokens;
    if (sample.told != nullptr && !sample.told->ids.empty()) {
      tokens.ids.swap(sample.told->ids);
      taken.fetch_add(1);
    } else {
      tokens.ids.assign(static_cast<size_t>(3 + sample.index % 5), sample.index);
      tokenized.fetch_add(1);
    }
    pass.rows[0] += static_cast<int64_t>(tokens.ids.size());
    if (pass.sequence != nullptr) *pass.sequence = tokens;
    return true;
  }
  Status Run(SampleContext& ctx) const override {
    const int64_t n = 3 + ctx.sample->index % 5;
    HR_ASSIGN_OR_RETURN(uint8_t* to, ctx.AppendRows(0, n));
    std::fill_n(reinterpret_cast<int64_t*>(to), n, ctx.sample->index);
    return Status::Ok();
  }
  mutable std::atomic<int64_t> tokenized{0};
  mutable std::atomic<int64_t> taken{0};
};

TEST(BatchFormers, APlannedPackTokenizesEachSampleOnceItsRunTakingWhatTheSizerTold) {
  auto records = std::make_shared<std::vector<SampleRecord>>();
  for (int i = 0; i < 24; ++i) records->push_back(SampleRecord{.id = std::to_string(i)});
  auto inputs = std::make_shared<EngineInputs>();
  inputs->source = MakeRecordSource(std::make_shared<VectorRecords>(records), MakeLocalStorage({}));
  auto op = std::make_unique<CountingTokenizer>();
  const CountingTokenizer& counting = *op;
  inputs->chain().ops.push_back(std::move(op));
  inputs->fields.push_back(FieldSpec{"input_ids", DType::kI64, {}, FieldLayout::kRagged, "",
                                     "input_ids"});
  inputs->fields.push_back(FieldSpec{"input_ids_lengths", DType::kI32, {}, FieldLayout::kLengths});
  inputs->reads_media = false;
  EngineOptions engine;
  engine.cpu_threads = 2;
  engine.order.num_samples = 24;
  engine.order.batch_size = 4;
  engine.order.seed = 3;
  PackOptions pack;
  pack.seq_len = 16;
  pack.window = 4;
  FormingRun run{.inputs = inputs, .pack = pack, .engine = &engine};
  Result<std::shared_ptr<BatchFormer>> former = MakeBatchFormer(run);
  ASSERT_TRUE(former.ok()) << former.status().ToString();
  ASSERT_EQ((*former)->name(), "pack planned");
  engine.former = *former;
  auto started = Engine::Start(inputs, engine);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  int64_t samples = 0;
  while (true) {
    Result<std::optional<Batch>> b = (*former)->Next(**started);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    if (!b->has_value()) break;
    samples += (*b)->size();
  }
  EXPECT_EQ(samples, 24);
  EXPECT_EQ(counting.tokenized.load(), 24) << "each sample tokenized once: by the sizer";
  EXPECT_EQ(counting.taken.load(), 24) << "and its run took what the sizer told";
}

// Sample i's tokens: 160 for every 8th sample, 4 + i % 3 for the others: the order's deal
// leaves some steps with two long samples on one rank.
class SkewedTokenizer final : public Op {
 public:
  static int64_t TokensOf(int64_t index) { return index % 8 == 0 ? 160 : 4 + index % 3; }
  std::string_view name() const override { return "test.skewed_tokenizer"; }
  Telling Tells() const override { return Telling::kRowsAndTokens; }
  bool Predict(SizePass& pass) const override {
    predicted.fetch_add(1);
    const int64_t n = TokensOf(pass.ctx->sample->index);
    pass.rows[0] += n;
    if (pass.sequence != nullptr) pass.sequence->ids.assign(static_cast<size_t>(n), 1);
    return true;
  }
  Status Run(SampleContext& ctx) const override {
    const int64_t n = TokensOf(ctx.sample->index);
    HR_ASSIGN_OR_RETURN(uint8_t* to, ctx.AppendRows(0, n));
    std::fill_n(reinterpret_cast<int64_t*>(to), n, ctx.sample->index);
    return Status::Ok();
  }
  mutable std::atomic<int64_t> predicted{0};  // size passes run
};

std::shared_ptr<EngineInputs> SkewedInputs(int samples) {
  auto records = std::make_shared<std::vector<SampleRecord>>();
  for (int i = 0; i < samples; ++i) records->push_back(SampleRecord{.id = std::to_string(i)});
  auto inputs = std::make_shared<EngineInputs>();
  inputs->source = MakeRecordSource(std::make_shared<VectorRecords>(records), MakeLocalStorage({}));
  inputs->chain().ops.push_back(std::make_unique<SkewedTokenizer>());
  inputs->fields.push_back(FieldSpec{"input_ids", DType::kI64, {}, FieldLayout::kRagged, "",
                                     "input_ids"});
  inputs->fields.push_back(FieldSpec{"input_ids_lengths", DType::kI32, {}, FieldLayout::kLengths});
  inputs->reads_media = false;
  return inputs;
}

EngineOptions SkewedRun(int rank) {
  EngineOptions engine;
  engine.cpu_threads = 2;
  engine.order.num_samples = 64;
  engine.order.batch_size = 4;
  engine.order.seed = 5;
  engine.order.rank = rank;
  engine.order.world_size = 2;
  return engine;
}

TEST(BatchFormers, ABalancedRunDealsEachStepsSamplesOverTheRanksByCost) {
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  std::vector<std::vector<std::vector<int64_t>>> shares(2);  // by rank, by step
  std::optional<BalanceSeen> seen;
  for (int rank = 0; rank < 2; ++rank) {
    EngineOptions engine = SkewedRun(rank);
    FormingRun run{.inputs = inputs, .engine = &engine};
    run.balance = BalanceOptions{};  // cost: tokens
    Result<std::shared_ptr<BatchFormer>> former = MakeBatchFormer(run);
    ASSERT_TRUE(former.ok()) << former.status().ToString();
    EXPECT_EQ((*former)->name(), "balanced plain");
    Result<EpochOrder> order = EpochOrder::Make(engine.order);
    ASSERT_TRUE(order.ok());
    for (int64_t j = 0; j < order->batches_per_rank_epoch(); ++j) {
      const BatchPosition p = order->Position(j);
      std::optional<std::vector<int64_t>> share =
          (*former)->Compose(p, order->SampleIndices(p), {});
      ASSERT_TRUE(share.has_value());
      shares[rank].push_back(*share);
    }
    seen = (*former)->balance();
  }
  Result<EpochOrder> order = EpochOrder::Make(SkewedRun(0).order);
  ASSERT_TRUE(order.ok());
  double before = 0, after = 0;
  for (size_t step = 0; step < shares[0].size(); ++step) {
    std::vector<int64_t> dealt = shares[0][step], ordered;
    dealt.insert(dealt.end(), shares[1][step].begin(), shares[1][step].end());
    int64_t tokens[2] = {0, 0}, ordered_tokens[2] = {0, 0};
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(shares[r][step].size(), 4u) << "each rank keeps its batch size";
      for (int64_t s : shares[r][step]) tokens[r] += SkewedTokenizer::TokensOf(s);
      const std::vector<int64_t> batch =
          order->SampleIndices({.epoch = 0, .index_in_epoch = int64_t(step) * 2 + r});
      for (int64_t s : batch) ordered_tokens[r] += SkewedTokenizer::TokensOf(s);
      ordered.insert(ordered.end(), batch.begin(), batch.end());
    }
    std::sort(dealt.begin(), dealt.end());
    std::sort(ordered.begin(), ordered.end());
    EXPECT_EQ(dealt, ordered) << "step " << step << ": its own samples, each once";
    before += std::max(ordered_tokens[0], ordered_tokens[1]);
    after += std::max(tokens[0], tokens[1]);
    EXPECT_LE(std::max(tokens[0], tokens[1]), std::max(ordered_tokens[0], ordered_tokens[1]));
  }
  EXPECT_LT(after, before) << "some step was uneven as ordered";
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->steps, 8);
  EXPECT_EQ(seen->untold, 0);
  EXPECT_DOUBLE_EQ(seen->max_before, before);
  EXPECT_DOUBLE_EQ(seen->max_after, after);
}

// Rank `rank`'s shares of an epoch's steps as MakeBatchFormer's former deals them.
std::vector<std::vector<int64_t>> Shares(const std::shared_ptr<EngineInputs>& inputs, int rank,
                                         const BalanceOptions& balance) {
  EngineOptions engine = SkewedRun(rank);
  FormingRun run{.inputs = inputs, .engine = &engine};
  run.balance = balance;
  Result<std::shared_ptr<BatchFormer>> former = MakeBatchFormer(run);
  EXPECT_TRUE(former.ok()) << former.status().ToString();
  Result<EpochOrder> order = EpochOrder::Make(engine.order);
  std::vector<std::vector<int64_t>> shares;
  for (int64_t j = 0; j < order->batches_per_rank_epoch(); ++j) {
    const BatchPosition p = order->Position(j);
    shares.push_back(*(*former)->Compose(p, order->SampleIndices(p), {}));
  }
  return shares;
}

TEST(BatchFormers, WithASizeIndexTheDealIsTheSameAndNoSampleIsSized) {
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  const auto& op = static_cast<const SkewedTokenizer&>(*inputs->chain().ops.front());
  Result<std::vector<std::optional<SampleSize>>> sizes = SizeEverySample(inputs, "input_ids", 2);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  ASSERT_EQ(sizes->size(), 64u);
  EXPECT_EQ((*sizes)[8]->tokens, 160);
  BalanceOptions indexed;
  indexed.index = std::make_shared<const SizeIndex>(SizeIndex::Of("f", *sizes));
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<std::vector<int64_t>> sized = Shares(inputs, rank, BalanceOptions{});
    const int64_t before = op.predicted.load();
    EXPECT_EQ(Shares(inputs, rank, indexed), sized) << "rank " << rank;
    EXPECT_EQ(op.predicted.load(), before) << "the index told every size";
  }
}

// SkewedInputs(64) over records whose samples below `with_image` hold an image (a media
// item of the source's image field): the sizer reads the kinds from the records alone.
std::shared_ptr<EngineInputs> ImagesBelow(int with_image) {
  auto records = std::make_shared<std::vector<SampleRecord>>();
  for (int i = 0; i < 64; ++i) {
    SampleRecord r{.id = std::to_string(i)};
    if (i < with_image) r.media.push_back(MediaRef{.field = 0, .uri = "image.jpg"});
    records->push_back(std::move(r));
  }
  std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  inputs->source = MakeRecordSource(std::make_shared<VectorRecords>(records), MakeLocalStorage({}));
  return inputs;
}

TEST(BatchFormers, AModalitySafeRankHoldsAnImageInEveryStepThatHasOnePerRank) {
  // Samples 0-15 hold an image (a media item of the source's image field); read from
  // their records: the sizer needs no bytes to know it.
  std::shared_ptr<EngineInputs> inputs = ImagesBelow(16);
  BalanceOptions safe;
  safe.every_rank = ModalityBit(FieldKind::kImage);
  Result<EpochOrder> order = EpochOrder::Make(SkewedRun(0).order);
  ASSERT_TRUE(order.ok());
  const std::vector<std::vector<int64_t>> shares[2] = {Shares(inputs, 0, safe),
                                                       Shares(inputs, 1, safe)};
  const std::vector<std::vector<int64_t>> by_cost[2] = {Shares(inputs, 0, BalanceOptions{}),
                                                        Shares(inputs, 1, BalanceOptions{})};
  int64_t steps_with_two = 0, left_without = 0;  // ... and a rank without one, by cost alone
  for (size_t step = 0; step < shares[0].size(); ++step) {
    int64_t images = 0;
    for (int r = 0; r < 2; ++r) {
      for (int64_t s : order->SampleIndices({.epoch = 0, .index_in_epoch = int64_t(step) * 2 + r})) {
        images += s < 16;
      }
    }
    if (images < 2) continue;
    ++steps_with_two;
    for (int r = 0; r < 2; ++r) {
      left_without += std::none_of(by_cost[r][step].begin(), by_cost[r][step].end(),
                                   [](int64_t s) { return s < 16; });
    }
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(std::any_of(shares[r][step].begin(), shares[r][step].end(),
                              [](int64_t s) { return s < 16; }))
          << "rank " << r << ", step " << step << " (" << images << " images)";
    }
  }
  EXPECT_GT(steps_with_two, 0);
  EXPECT_GT(left_without, 0) << "the deal by cost alone would leave a rank without an image";
}

// One batch a time, as the run hands them to a former.
class OneBatchInput final : public BatchInput {
 public:
  std::optional<Batch> batch;
  Result<std::optional<Batch>> Next() override { return std::exchange(batch, std::nullopt); }
  bool WaitReady(std::chrono::nanoseconds) override { return batch.has_value(); }
  int64_t batches_per_epoch() const override { return 8; }
  void ChargeHeld(int64_t) override {}
  Status CountLost(std::span<const LostSample>, bool) override { return Status::Ok(); }
};

// A batch of samples `indices` (its `index` field), with `kinds` as kSampleKindsField if
// given.
Batch IndexedBatch(const std::vector<int64_t>& indices, const std::vector<int32_t>& kinds = {}) {
  Batch batch;
  Tensor index = *Tensor::Allocate(DType::kI64, {int64_t(indices.size())});
  std::copy(indices.begin(), indices.end(), index.mutable_data<int64_t>());
  batch.fields.emplace_back("index", std::move(index));
  if (!kinds.empty()) {
    Tensor field = *Tensor::Allocate(DType::kI32, {int64_t(kinds.size())});
    std::copy(kinds.begin(), kinds.end(), field.mutable_data<int32_t>());
    batch.fields.emplace_back(std::string(kSampleKindsField), std::move(field));
  }
  return batch;
}

// Balance with an image on every rank (every_rank: image).
BalanceOptions ImageOnEveryRank() {
  BalanceOptions safe;
  safe.every_rank = ModalityBit(FieldKind::kImage);
  return safe;
}

// A Ray worker's run: SkewedRun's order in one process, its batches on demand.
EngineOptions WorkerRun() {
  EngineOptions worker = SkewedRun(0);
  worker.order.world_size = 1;
  worker.schedule = Schedule::kOnDemand;
  return worker;
}

// A Ray worker's former (WorkerRun) asked for 2 ranks' steps balanced by `balance`,
// packed by `pack` if given, with the epoch order it is asked from, by epoch and batch.
class TwoRankWorker {
 public:
  TwoRankWorker(const std::shared_ptr<EngineInputs>& inputs, BalanceOptions balance,
                std::optional<PackOptions> pack = std::nullopt)
      : engine_(WorkerRun()) {
    FormingRun run{.inputs = inputs, .pack = std::move(pack), .engine = &engine_};
    run.balance = std::move(balance);
    run.balance->ranks = 2;
    Result<std::shared_ptr<BatchFormer>> former = MakeBatchFormer(run);
    EXPECT_TRUE(former.ok()) << former.status().ToString();
    if (former.ok()) former_ = *former;
    Result<EpochOrder> order = EpochOrder::Make(engine_.order);
    EXPECT_TRUE(order.ok());
    if (order.ok()) order_.emplace(std::move(*order));
  }
  bool ok() const { return former_ != nullptr && order_.has_value(); }
  BatchFormer& former() { return *former_; }
  const EpochOrder& order() const { return *order_; }
  std::optional<std::vector<int64_t>> Compose(int64_t epoch, int64_t b) {
    const BatchPosition p{.epoch = epoch, .index_in_epoch = b};
    return former_->Compose(p, order_->SampleIndices(p), {});
  }

 private:
  EngineOptions engine_;
  std::shared_ptr<BatchFormer> former_;
  std::optional<EpochOrder> order_;
};

TEST(BatchFormers, AnOnDemandModalitySafeBatchIsDealtAndFlaggedAsItsRanksOwn) {
  // Samples 0-15 hold an image. A worker's batch b (any order) holds rank b mod 2's
  // modality-safe share of its step, and leaves (FinishTaken) flagged as that rank's
  // Next() flags it: image where the share holds none.
  std::shared_ptr<EngineInputs> inputs = ImagesBelow(16);
  const BalanceOptions safe = ImageOnEveryRank();
  const std::vector<std::vector<int64_t>> ranks[2] = {Shares(inputs, 0, safe),
                                                      Shares(inputs, 1, safe)};
  TwoRankWorker worker(inputs, safe);
  ASSERT_TRUE(worker.ok());
  int64_t lacking = 0, holding = 0;
  for (const int64_t b : {3, 0, 1, 2, 15, 14, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}) {
    const std::vector<int64_t> share = *worker.Compose(0, b);
    EXPECT_EQ(share, ranks[b % 2][static_cast<size_t>(b / 2)]) << "batch " << b;
    Batch batch = IndexedBatch(share);
    ASSERT_TRUE(worker.former().FinishTaken(batch).ok());
    const Tensor* dummy = batch.Find("dummy_kinds");
    ASSERT_NE(dummy, nullptr);
    const bool image = std::any_of(share.begin(), share.end(), [](int64_t s) { return s < 16; });
    EXPECT_EQ(std::vector<uint8_t>(dummy->data<uint8_t>(), dummy->data<uint8_t>() + 4),
              (std::vector<uint8_t>{uint8_t(image ? 0 : 1), 0, 0, 0}))
        << "batch " << b;
    (image ? holding : lacking) += 1;
  }
  EXPECT_GT(lacking, 0);
  EXPECT_GT(holding, 0);
}

TEST(BatchFormers, AModalitySafeBatchIsFlaggedByItsOwnEpochsDealWhileTheNextIsDealtAhead) {
  // Samples 0-15 hold an image. Every sample is in both epochs; the next epoch's batches
  // are dealt (Compose) before this epoch's leave (FinishTaken), as a run prefetching
  // across the epoch's end deals them: each batch is still flagged by its own share.
  std::shared_ptr<EngineInputs> inputs = ImagesBelow(16);
  TwoRankWorker worker(inputs, ImageOnEveryRank());
  ASSERT_TRUE(worker.ok());
  std::vector<std::pair<BatchPosition, std::vector<int64_t>>> dealt;
  for (const int64_t epoch : {1, 0}) {
    for (int64_t b = 0; b < 16; ++b) {
      dealt.emplace_back(BatchPosition{.epoch = epoch, .index_in_epoch = b},
                         *worker.Compose(epoch, b));
    }
  }
  std::reverse(dealt.begin(), dealt.end());  // epoch 0's leave first
  int64_t holding = 0;
  for (const auto& [p, share] : dealt) {
    Batch batch = IndexedBatch(share);
    batch.epoch = p.epoch;
    ASSERT_TRUE(worker.former().FinishTaken(batch).ok());
    const Tensor* dummy = batch.Find("dummy_kinds");
    ASSERT_NE(dummy, nullptr);
    const bool image = std::any_of(share.begin(), share.end(), [](int64_t s) { return s < 16; });
    EXPECT_EQ(dummy->data<uint8_t>()[0], image ? 0 : 1)
        << "epoch " << p.epoch << ", batch " << p.index_in_epoch;
    holding += image && p.epoch == 1;
  }
  EXPECT_GT(holding, 0);
}

TEST(BatchFormers, AModalitySafeBatchSaysWhichKindsItLacks) {
  // Samples 0-2 hold an image: most steps cannot give each rank one.
  std::shared_ptr<EngineInputs> inputs = ImagesBelow(3);
  int64_t lacking = 0, holding = 0;
  for (int rank = 0; rank < 2; ++rank) {
    EngineOptions engine = SkewedRun(rank);
    FormingRun run{.inputs = inputs, .engine = &engine};
    run.balance = BalanceOptions{};
    run.balance->every_rank = ModalityBit(FieldKind::kImage) | ModalityBit(FieldKind::kAudio);
    Result<std::shared_ptr<BatchFormer>> former = MakeBatchFormer(run);
    ASSERT_TRUE(former.ok()) << former.status().ToString();
    Result<EpochOrder> order = EpochOrder::Make(engine.order);
    ASSERT_TRUE(order.ok());
    OneBatchInput input;
    for (int64_t j = 0; j < order->batches_per_rank_epoch(); ++j) {
      const BatchPosition p = order->Position(j);
      const std::vector<int64_t> share = *(*former)->Compose(p, order->SampleIndices(p), {});
      // The run's batch of those samples (its `index` field), then the former's Next.
      Batch b;
      b.index_in_epoch = p.index_in_epoch;
      Result<Tensor> index = Tensor::Allocate(DType::kI64, {int64_t(share.size())});
      ASSERT_TRUE(index.ok());
      std::copy(share.begin(), share.end(), index->mutable_data<int64_t>());
      b.fields.emplace_back("index", *index);
      input.batch = std::move(b);
      Result<std::optional<Batch>> out = (*former)->Next(input);
      ASSERT_TRUE(out.ok() && out->has_value());
      const Tensor* dummy = (*out)->Find("dummy_kinds");
      ASSERT_NE(dummy, nullptr);
      ASSERT_EQ(dummy->shape(), (std::vector<int64_t>{4})) << "image, video, audio, pointcloud";
      const bool image = std::any_of(share.begin(), share.end(), [](int64_t s) { return s < 3; });
      const uint8_t* flags = dummy->data<uint8_t>();
      EXPECT_EQ(flags[0], image ? 0 : 1) << "rank " << rank << ", batch " << j;
      EXPECT_EQ(flags[2], 1) << "no sample holds audio";
      EXPECT_EQ(flags[1] + flags[3], 0) << "video and point clouds were not asked for";
      (image ? holding : lacking) += 1;
    }
  }
  EXPECT_GT(lacking, 0);
  EXPECT_GT(holding, 0);
}

// A rank's packed batches of an epoch: each batch's samples (`index`), rows, tokens and
// pack state.
struct RankBatches {
  std::vector<std::vector<int64_t>> samples;
  std::vector<std::vector<int64_t>> values;  // each batch's `index`, -1, `input_ids`, -1
  std::vector<int64_t> rows;
  std::vector<int64_t> tokens;
  std::vector<PackState> states;
  std::vector<int> lacks_image;  // dummy_kinds[0], where the batch has the field
  std::vector<std::vector<std::vector<int64_t>>> row_samples;  // each batch's rows' samples
  std::string name;
  std::optional<BalanceSeen> balance;  // the former's, once the run ended
};

// How PackedRank runs: a planned pack of `seq_len`-token rows and `window`, with
// `balance` (nullopt: none), from `resume` (nullopt: the start, or batch `start_batch`
// with no saved state), planned by `sizes` (null: the size pass).
struct PackedRun {
  std::optional<BalanceOptions> balance;
  std::optional<PackState> resume;
  int64_t seq_len = 256;
  int64_t window = 4;
  std::shared_ptr<const SizeIndex> sizes;
  int64_t start_batch = 0;
};

// Rank `rank` of 2 over SkewedInputs as `how` runs it. Samples cut to a row count
// against no error budget.
RankBatches PackedRank(const std::shared_ptr<EngineInputs>& inputs, int rank,
                       const PackedRun& how) {
  EngineOptions engine = SkewedRun(rank);
  engine.budget.max_error_rate = 1;
  engine.start_batch = how.start_batch;
  FormingRun run{.inputs = inputs, .pack = Pack(how.window), .engine = &engine,
                 .resume = how.resume, .sizes = how.sizes};
  run.pack->seq_len = how.seq_len;
  run.balance = how.balance;
  Result<std::shared_ptr<BatchFormer>> former = MakeBatchFormer(run);
  EXPECT_TRUE(former.ok()) << former.status().ToString();
  RankBatches out;
  if (!former.ok()) return out;
  out.name = std::string((*former)->name());
  engine.former = *former;
  auto started = Engine::Start(inputs, engine);
  EXPECT_TRUE(started.ok()) << started.status().ToString();
  while (started.ok()) {
    Result<std::optional<Batch>> b = (*former)->Next(**started);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok() || !b->has_value()) break;
    const Tensor* index = (*b)->Find("index");
    const Tensor* lengths = (*b)->Find("input_ids_lengths");
    const Tensor* per_row = (*b)->Find("samples_per_row");
    EXPECT_TRUE(index != nullptr && lengths != nullptr && per_row != nullptr);
    if (index == nullptr || lengths == nullptr || per_row == nullptr) break;
    out.samples.emplace_back(index->data<int64_t>(), index->data<int64_t>() + index->numel());
    out.values.emplace_back();
    for (const Tensor* t : {index, (*b)->Find("input_ids")}) {
      out.values.back().insert(out.values.back().end(), t->data<int64_t>(),
                               t->data<int64_t>() + t->numel());
      out.values.back().push_back(-1);
    }
    out.rows.push_back(per_row->numel());
    out.row_samples.emplace_back();
    for (int64_t r = 0, at = 0; r < per_row->numel(); ++r) {
      const int32_t k = per_row->data<int32_t>()[r];
      out.row_samples.back().emplace_back(out.samples.back().begin() + at,
                                          out.samples.back().begin() + at + k);
      at += k;
    }
    const int32_t* n = lengths->data<int32_t>();
    out.tokens.push_back(std::accumulate(n, n + lengths->numel(), int64_t{0}));
    out.states.push_back(*(*former)->state());
    if (const Tensor* dummy = (*b)->Find("dummy_kinds"); dummy != nullptr) {
      out.lacks_image.push_back(dummy->data<uint8_t>()[0]);
    }
  }
  out.balance = (*former)->balance();
  return out;
}

TEST(BatchFormers, ABalancedPlannedPackRunsTheDealtSamples) {
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  std::vector<int64_t> delivered;
  for (int rank = 0; rank < 2; ++rank) {
    const RankBatches b = PackedRank(inputs, rank, {.balance = BalanceOptions{}, .window = 0});
    ASSERT_EQ(b.name, "balanced pack planned");
    for (const std::vector<int64_t>& samples : b.samples) {
      delivered.insert(delivered.end(), samples.begin(), samples.end());
    }
  }
  std::sort(delivered.begin(), delivered.end());
  std::vector<int64_t> all(64);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(delivered, all) << "the two ranks' packed batches hold every sample once";
}

TEST(BatchFormers, ABalancedPackWithAWindowDealsEachStepsRowsOverTheRanks) {
  // With a packing window each rank's packer would carry what its rows cannot hold into
  // its later steps and undo a deal of samples: the step's rows are planned over both
  // ranks' samples (one window, the same on both) and the rows are dealt by cost.
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  RankBatches dealt[2], alone[2];
  for (int rank = 0; rank < 2; ++rank) {
    dealt[rank] = PackedRank(inputs, rank, {.balance = BalanceOptions{}});
    alone[rank] = PackedRank(inputs, rank, {});
  }
  EXPECT_EQ(dealt[0].name, "balanced rows, pack planned");
  EXPECT_EQ(alone[0].name, "pack planned");
  ASSERT_EQ(dealt[0].samples.size(), 8u) << "one packed batch a step";
  ASSERT_EQ(dealt[1].samples.size(), 8u);
  std::vector<int64_t> every;
  int64_t slowest_dealt = 0, slowest_alone = 0;
  for (size_t step = 0; step < 8; ++step) {
    for (int r = 0; r < 2; ++r) {
      every.insert(every.end(), dealt[r].samples[step].begin(), dealt[r].samples[step].end());
    }
    if (step + 1 < 8) {
      EXPECT_EQ(dealt[0].rows[step], dealt[1].rows[step]) << "step " << step << ": as many rows";
    }
    EXPECT_GE(dealt[0].rows[step], 1);
    const PackState& a = dealt[0].states[step];
    const PackState& b = dealt[1].states[step];
    EXPECT_TRUE(a.shared);
    EXPECT_EQ(a.waiting, b.waiting) << "step " << step << ": one window, the same on both ranks";
    EXPECT_EQ(std::tie(a.epoch, a.from_batch, a.next_batch),
              std::tie(b.epoch, b.from_batch, b.next_batch));
    slowest_dealt += std::max(dealt[0].tokens[step], dealt[1].tokens[step]);
    slowest_alone += std::max(alone[0].tokens[step], alone[1].tokens[step]);
  }
  EXPECT_FALSE(alone[0].states.back().shared);
  std::sort(every.begin(), every.end());
  std::vector<int64_t> all(64);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(every, all) << "the ranks' rows hold every sample of the epoch once";
  // The 160-token samples land where the rows are dealt, not on whichever rank the
  // order gave them to.
  EXPECT_LT(slowest_dealt, slowest_alone);

  // A rank resumed from its state after step 2 continues as the unbroken run.
  for (int rank = 0; rank < 2; ++rank) {
    const RankBatches resumed =
        PackedRank(inputs, rank, {.balance = BalanceOptions{}, .resume = dealt[rank].states[2]});
    ASSERT_EQ(resumed.samples.size(), 5u) << "rank " << rank;
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(resumed.samples[k], dealt[rank].samples[k + 3])
          << "rank " << rank << ", step " << k + 3;
    }
  }
}

// What a former's balance statistics say (BatchFormer::balance), to compare whole.
auto Counted(const BalanceSeen& seen) {
  return std::tuple(seen.steps, seen.untold, seen.max_before, seen.max_after, seen.mean,
                    seen.short_ranks);
}

TEST(BatchFormers, ABalancedPackStartedMidEpochCountsOnlyTheStepsItDeals) {
  // A start at step 3 without a saved state replays the window over steps 0-2
  // (PackPlanner::Skip); their rows are no rank's from this run, so the balance statistics
  // count steps 3-7 only, as a resume from the state saved after step 2 counts them.
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  const RankBatches whole = PackedRank(inputs, 1, {.balance = BalanceOptions{}});
  ASSERT_EQ(whole.states.size(), 8u);
  const RankBatches resumed =
      PackedRank(inputs, 1, {.balance = BalanceOptions{}, .resume = whole.states[2]});
  const RankBatches started =
      PackedRank(inputs, 1, {.balance = BalanceOptions{}, .start_batch = 3});
  ASSERT_TRUE(whole.balance && resumed.balance && started.balance);
  EXPECT_EQ(whole.balance->steps, 8);
  EXPECT_EQ(started.samples, resumed.samples) << "the unbroken run's steps 3-7";
  EXPECT_EQ(resumed.balance->steps, 5);
  EXPECT_EQ(Counted(*started.balance), Counted(*resumed.balance));
}

TEST(BatchFormers, ABalancedPackWithAWindowDealsRowsWithAnImageToEveryRankItCan) {
  // Samples 0-7 hold an image. The rows are dealt with every_rank: image: each rank's
  // packed batch holds an image whenever two of the step's rows do, and its dummy_kinds
  // says when it holds none. (That the deal by cost alone may leave a rank without one:
  // StepDeal.RowsDealtWithEveryRankGiveEachRankARowOfTheKind.)
  std::shared_ptr<EngineInputs> inputs = ImagesBelow(8);
  BalanceOptions safe;
  safe.every_rank = ModalityBit(FieldKind::kImage);
  // Rows of 12 tokens: up to 4 a rank a step.
  const RankBatches dealt[2] = {PackedRank(inputs, 0, {.balance = safe, .seq_len = 12}),
                                PackedRank(inputs, 1, {.balance = safe, .seq_len = 12})};
  const auto images = [](const std::vector<int64_t>& samples) {
    return std::any_of(samples.begin(), samples.end(), [](int64_t s) { return s < 8; });
  };
  int64_t safe_steps = 0, lacking = 0;
  ASSERT_EQ(dealt[0].samples.size(), 8u);
  for (size_t step = 0; step < 8; ++step) {
    int64_t image_rows = 0;
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(dealt[r].lacks_image.size(), 8u) << "every batch says";
      const bool holds = images(dealt[r].samples[step]);
      EXPECT_EQ(dealt[r].lacks_image[step], holds ? 0 : 1) << "rank " << r << ", step " << step;
      lacking += !holds;
      for (const auto& row : dealt[r].row_samples[step]) image_rows += images(row);
    }
    if (image_rows < 2) continue;
    ++safe_steps;
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(images(dealt[r].samples[step])) << "rank " << r << ", step " << step;
    }
  }
  EXPECT_GT(safe_steps, 0);
  EXPECT_GT(lacking, 0) << "some step has fewer image rows than ranks: flagged";
}

TEST(BatchFormers, AnOnDemandRunWithRowsDealtComputesEachRanksRowsAsItsOwnRunPlansThem) {
  // A Ray worker with batch.pack and a window: its epoch batch b is the samples of the
  // rows rank b mod 2's own run keeps of step b div 2, in row order (the rank lays them
  // out by its own plan), whichever order the ranks' requests come in.
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  const RankBatches ranks[2] = {PackedRank(inputs, 0, {.balance = BalanceOptions{}}),
                                PackedRank(inputs, 1, {.balance = BalanceOptions{}})};
  TwoRankWorker worker(inputs, BalanceOptions{}, RowsDealt());
  ASSERT_TRUE(worker.ok());
  for (const int64_t b : {5, 0, 15, 1, 8, 9, 2, 3, 4, 6, 7, 10, 11, 12, 13, 14, 0, 1}) {
    std::optional<std::vector<int64_t>> samples = worker.Compose(0, b);
    ASSERT_TRUE(samples.has_value());
    EXPECT_EQ(*samples, ranks[b % 2].samples[static_cast<size_t>(b / 2)]) << "batch " << b;
  }
  // Epoch 1's requests among epoch 0's (a request window across the epoch's end: both
  // plans kept), then epoch 2's (epoch 0's plan dropped) and epoch 0's again (planned
  // anew from its start): the same rows every time.
  for (const int64_t epoch : {1, 0, 2, 0}) {
    ASSERT_TRUE(worker.Compose(epoch, 0).has_value());
    EXPECT_EQ(*worker.Compose(0, 3), ranks[1].samples[1])
        << "after epoch " << epoch << "'s first batch";
  }
}

TEST(BatchFormers, AnOnDemandRunWithRowsDealtCountsEachStepOnceHoweverOftenItPlansIt) {
  // A Ray worker's balance statistics with rows dealt count each step of an epoch once,
  // as a rank's own run counts the steps it deals, though the worker plans an epoch again
  // from its start when asked for one whose plan it no longer keeps (StepRowsPlan).
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  const RankBatches rank = PackedRank(inputs, 0, {.balance = BalanceOptions{}});
  ASSERT_TRUE(rank.balance.has_value());
  ASSERT_EQ(rank.balance->steps, 8);
  TwoRankWorker worker(inputs, BalanceOptions{}, RowsDealt());
  ASSERT_TRUE(worker.ok());
  const auto compose = [&](int64_t epoch, int64_t b) {
    EXPECT_TRUE(worker.Compose(epoch, b).has_value()) << epoch << ", " << b;
  };
  for (const int64_t b : {5, 0, 15, 1, 8, 9, 2, 3, 4, 6, 7, 10, 11, 12, 13, 14, 0, 1}) {
    compose(0, b);
  }
  EXPECT_EQ(Counted(*worker.former().balance()), Counted(*rank.balance)) << "epoch 0, as rank 0's";
  // Epochs 1 and 2's first steps (epoch 0's plan dropped), then epoch 0's last batch: the
  // whole epoch planned again, no step of it counted again.
  compose(1, 0);
  compose(2, 0);
  const BalanceSeen three_epochs = *worker.former().balance();
  EXPECT_EQ(three_epochs.steps, 8 + 1 + 1);
  compose(0, 15);
  EXPECT_EQ(Counted(*worker.former().balance()), Counted(three_epochs));
  // Epoch 2's second step (its plan dropped in turn): its first planned again, uncounted.
  compose(2, 3);
  EXPECT_EQ(worker.former().balance()->steps, 8 + 1 + 2);
}

// Rank 0's packed batches (seq_len 64, window 4) of SkewedInputs(64) as a planned pack
// forms them, each as its `index` and `input_ids` values; `sizes`: the run's size index.
std::vector<std::vector<int64_t>> PlannedPackRun(const std::shared_ptr<EngineInputs>& inputs,
                                                 std::shared_ptr<const SizeIndex> sizes) {
  RankBatches b = PackedRank(inputs, 0, {.seq_len = 64, .sizes = std::move(sizes)});
  EXPECT_EQ(b.name, "pack planned");
  return std::move(b.values);
}

TEST(BatchFormers, APlannedPackPlansBySizeIndexAsItWouldBySizing) {
  // batch.pack.index: the samples that fit a row (64 tokens) are planned by their
  // entries, not sized on the driver; the 160-token ones (every 8th) by the size pass, as
  // their cut is checked against where their vision tokens lie. The batches are the same.
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  const auto& op = static_cast<const SkewedTokenizer&>(*inputs->chain().ops.front());
  Result<std::vector<std::optional<SampleSize>>> sizes = SizeEverySample(inputs, "input_ids", 2);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  const auto index = std::make_shared<const SizeIndex>(SizeIndex::Of("f", *sizes));
  int64_t before = op.predicted.load();
  const std::vector<std::vector<int64_t>> sized = PlannedPackRun(inputs, nullptr);
  const int64_t sizing = op.predicted.load() - before;
  before = op.predicted.load();
  const std::vector<std::vector<int64_t>> indexed = PlannedPackRun(inputs, index);
  const int64_t reading = op.predicted.load() - before;
  ASSERT_FALSE(sized.empty());
  EXPECT_EQ(indexed, sized);
  // Rank 0's 32 samples: each run's own size pass, plus the driver's: 32 sizing, 4 (the
  // long ones) reading the index.
  EXPECT_EQ(sizing - reading, 32 - 4) << "sizing " << sizing << ", reading " << reading;
}

TEST(BatchFormers, ASampleWhoseTokensDifferFromItsIndexEntryIsCountedAndNamed) {
  // An index whose entries for samples 8 and 9 say one token more than they make (their
  // data changed since it was built): the engine counts each as it runs, naming the first.
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  Result<std::vector<std::optional<SampleSize>>> sizes = SizeEverySample(inputs, "input_ids", 2);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  (*sizes)[8]->tokens += 1;
  (*sizes)[9]->tokens += 1;
  EngineOptions engine = SkewedRun(0);
  engine.order.world_size = 1;
  engine.cpu_threads = 2;
  engine.sizes = std::make_shared<const SizeIndex>(SizeIndex::Of("f", *sizes));
  engine.sizes_token_field = 0;
  auto started = Engine::Start(inputs, engine);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  int64_t samples = 0;
  while (true) {
    Result<std::optional<Batch>> b = (*started)->Next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    if (!b->has_value()) break;
    samples += (*b)->size();
  }
  EXPECT_EQ(samples, 64);
  const StaleEntries stale = (*started)->Metrics().stale_entries;
  EXPECT_TRUE(stale.checked);
  EXPECT_EQ(stale.count, 2);
  EXPECT_TRUE(stale.first == "epoch 0, index 8, <no uri>: 160 tokens, its entry 161" ||
              stale.first == "epoch 0, index 9, <no uri>: 4 tokens, its entry 5")
      << stale.first << " (the first seen of the two, whichever thread ran it)";
}

TEST(BatchFormers, BalanceNeedsAChainThatTellsTokensAndAnInOrderEngine) {
  EngineOptions engine = SkewedRun(0);
  FormingRun run{.inputs = std::make_shared<EngineInputs>(), .engine = &engine};
  run.balance = BalanceOptions{};
  Result<std::shared_ptr<BatchFormer>> former = MakeBatchFormer(run);
  ASSERT_FALSE(former.ok());
  EXPECT_NE(former.status().message().find("batch.balance"), std::string::npos);
  engine.schedule = Schedule::kOnDemand;
  run.inputs = SkewedInputs(8);
  former = MakeBatchFormer(run);
  ASSERT_FALSE(former.ok());
  EXPECT_NE(former.status().message().find("Ray"), std::string::npos);
}

TEST(BatchFormers, AnOnDemandRunDealsEachBatchAsItsRanksOwnRunDoes) {
  // A Ray worker: rank 0 of 1, computing any rank's batch; its epoch batch b is rank
  // b mod 2's share of step b div 2, and it must hold what that rank's run deals it.
  const std::shared_ptr<EngineInputs> inputs = SkewedInputs(64);
  const std::vector<std::vector<int64_t>> ranks[2] = {Shares(inputs, 0, BalanceOptions{}),
                                                      Shares(inputs, 1, BalanceOptions{})};
  TwoRankWorker worker(inputs, BalanceOptions{});
  ASSERT_TRUE(worker.ok());
  ASSERT_EQ(worker.order().batches_per_epoch(), 16);
  // Out of order, as the ranks' requests come.
  for (const int64_t b : {5, 0, 15, 1, 8, 9, 2, 3, 4, 6, 7, 10, 11, 12, 13, 14}) {
    std::optional<std::vector<int64_t>> share = worker.Compose(0, b);
    ASSERT_TRUE(share.has_value());
    EXPECT_EQ(*share, ranks[b % 2][static_cast<size_t>(b / 2)]) << "batch " << b;
  }
  // With batch.pack the worker deals alike and leaves the rows to the rank: its batches
  // are the shares, unpacked.
  TwoRankWorker packing(inputs, BalanceOptions{}, Pack(0));
  ASSERT_TRUE(packing.ok());
  EXPECT_EQ(packing.former().name(), "balanced plain");
  for (const int64_t b : {3, 0, 1}) {
    EXPECT_EQ(*packing.Compose(0, b), ranks[b % 2][static_cast<size_t>(b / 2)]) << "batch " << b;
  }
}

TEST(BatchFormers, AModalitySafeRankFormingItsWorkersBatchesFlagsThemAsItsOwnRun) {
  // A Ray rank that packs its workers' batches deals nothing itself: each worker batch
  // leaves with its samples' kinds (kSampleKindsField), and the rank's former flags its
  // batches from them, as the rank's own run flags the shares it dealt.
  std::shared_ptr<EngineInputs> inputs = ImagesBelow(16);
  const BalanceOptions safe = ImageOnEveryRank();
  TwoRankWorker worker(inputs, safe, Pack(0));
  ASSERT_TRUE(worker.ok());

  // Rank 1's run (plain here: the kinds' path is the former's, whatever it wraps).
  EngineOptions engine = SkewedRun(1);
  FormingRun run{.inputs = inputs, .engine = &engine};
  run.balance = safe;
  Result<std::shared_ptr<BatchFormer>> rank = MakeBatchFormer(run);
  ASSERT_TRUE(rank.ok()) << rank.status().ToString();
  OneBatchInput input;
  int64_t lacking = 0, holding = 0;
  for (int64_t step = 0; step < 8; ++step) {
    const std::vector<int64_t> share = *worker.Compose(0, step * 2 + 1);
    Batch computed = IndexedBatch(share);
    ASSERT_TRUE(worker.former().FinishTaken(computed).ok());
    EXPECT_EQ(computed.Find("dummy_kinds"), nullptr) << "the rank flags its own batches";
    const Tensor* kinds = computed.Find(kSampleKindsField);
    ASSERT_NE(kinds, nullptr);
    ASSERT_EQ(kinds->numel(), int64_t(share.size()));
    for (size_t i = 0; i < share.size(); ++i) {
      EXPECT_EQ(uint32_t(kinds->data<int32_t>()[i]),
              share[i] < 16 ? ModalityBit(FieldKind::kImage) : 0u);
    }
    input.batch = std::move(computed);
    Result<std::optional<Batch>> out = (*rank)->Next(input);
    ASSERT_TRUE(out.ok() && out->has_value()) << out.status().ToString();
    EXPECT_EQ((*out)->Find(kSampleKindsField), nullptr) << "taken out at the rank";
    const Tensor* dummy = (*out)->Find("dummy_kinds");
    ASSERT_NE(dummy, nullptr);
    const bool image = std::any_of(share.begin(), share.end(), [](int64_t s) { return s < 16; });
    EXPECT_EQ(dummy->data<uint8_t>()[0], image ? 0 : 1) << "step " << step;
    (image ? holding : lacking) += 1;
  }
  EXPECT_GT(lacking + holding, 0);
  EXPECT_GT(holding, 0);

  // A worker's field that does not match its batch is refused, not guessed at.
  input.batch = IndexedBatch({1, 2, 3}, {0, 1});
  Result<std::optional<Batch>> bad = (*rank)->Next(input);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(kSampleKindsField), std::string::npos);
}

}  // namespace
}  // namespace headrace
