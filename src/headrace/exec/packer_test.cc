#include "headrace/exec/packer.h"
#include "headrace/exec/pack_former.h"
#include "headrace/exec/pack_planner.h"

#include "headrace/core/pooling_allocator.h"
#include "headrace/core/ragged_rows.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>

namespace headrace {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kImagePad = 900;

// The layout of a Qwen-VL-like unpadded batch: tokens with their labels and position
// ids, a sample's image patches (not token-aligned), and a fixed field.
std::vector<FieldSpec> Layout() {
  return {
      FieldSpec{"input_ids", DType::kI64, {}, FieldLayout::kRagged, "", "input_ids"},
      FieldSpec{"input_ids_lengths", DType::kI32, {}, FieldLayout::kLengths},
      FieldSpec{"labels", DType::kI64, {}, FieldLayout::kRagged, "", "input_ids"},
      FieldSpec{"labels_lengths", DType::kI32, {}, FieldLayout::kLengths},
      FieldSpec{"pixel_values", DType::kF32, {2}, FieldLayout::kRagged},
      FieldSpec{"pixel_values_lengths", DType::kI32, {}, FieldLayout::kLengths},
      FieldSpec{"score", DType::kF32, {}},
  };
}

// Sample `index`: `length` tokens (index * 1000 + t, with `vision` image pads first),
// labels index * 1000 + 500 + t, index % 3 patch rows, score = index.
struct SampleSpec {
  int64_t index;
  int64_t length;
  int64_t vision = 0;
};

Tensor I64(const std::vector<int64_t>& v) {
  Tensor t = *Tensor::Allocate(DType::kI64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.mutable_data<int64_t>());
  return t;
}
Tensor I32(const std::vector<int32_t>& v) {
  Tensor t = *Tensor::Allocate(DType::kI32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.mutable_data<int32_t>());
  return t;
}

int64_t TokenOf(const SampleSpec& s, int64_t t) {
  return t < s.vision ? kImagePad : s.index * 1000 + t;
}

Batch MakeBatch(int64_t epoch, int64_t k, const std::vector<SampleSpec>& samples) {
  std::vector<int64_t> ids, labels, index;
  std::vector<int32_t> lengths, patch_lengths;
  std::vector<float> patches, score;
  Batch b;
  b.epoch = epoch;
  b.index_in_epoch = k;
  b.global_index = k;
  Batch::Strings id{"id", false, {}};
  for (const SampleSpec& s : samples) {
    for (int64_t t = 0; t < s.length; ++t) {
      ids.push_back(TokenOf(s, t));
      labels.push_back(s.index * 1000 + 500 + t);
    }
    lengths.push_back(static_cast<int32_t>(s.length));
    patch_lengths.push_back(static_cast<int32_t>(s.index % 3));
    for (int64_t p = 0; p < 2 * (s.index % 3); ++p) patches.push_back(static_cast<float>(s.index) + 0.5f);
    score.push_back(static_cast<float>(s.index));
    index.push_back(s.index);
    id.rows.push_back({"s" + std::to_string(s.index)});
  }
  Tensor pv = *Tensor::Allocate(DType::kF32, {static_cast<int64_t>(patches.size() / 2), 2});
  std::copy(patches.begin(), patches.end(), pv.mutable_data<float>());
  Tensor sc = *Tensor::Allocate(DType::kF32, {static_cast<int64_t>(score.size())});
  std::copy(score.begin(), score.end(), sc.mutable_data<float>());
  b.fields = {{"input_ids", I64(ids)},        {"input_ids_lengths", I32(lengths)},
              {"labels", I64(labels)},        {"labels_lengths", I32(lengths)},
              {"pixel_values", std::move(pv)}, {"pixel_values_lengths", I32(patch_lengths)},
              {"score", std::move(sc)},       {"index", I64(index)}};
  b.strings.push_back(std::move(id));
  return b;
}

// An epoch of `batches` input batches of `size` samples with lengths in [1, max_len].
std::vector<Batch> Epoch(int64_t epoch, int64_t batches, int64_t size, int64_t max_len,
                         uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> order(static_cast<size_t>(batches * size));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<Batch> out;
  for (int64_t k = 0; k < batches; ++k) {
    std::vector<SampleSpec> samples;
    for (int64_t s = 0; s < size; ++s) {
      const int64_t index = order[static_cast<size_t>(k * size + s)];
      samples.push_back({index, 1 + static_cast<int64_t>(rng() % max_len)});
    }
    out.push_back(MakeBatch(epoch, k, samples));
  }
  return out;
}

// `b` as an engine with EngineOptions::keep_sample_rows delivers it: its concatenated
// fields without rows, each sample's rows in Batch::sample_rows.
Batch Unjoined(const Batch& b) {
  std::vector<FieldSpec> layout = Layout();
  layout.push_back(FieldSpec{"index", DType::kI64, {}});
  auto memory = std::make_shared<PoolingAllocator>(DefaultAllocator(), 0);
  Batch out = b;
  for (int64_t s = 0; s < b.size(); ++s) {
    auto rows = std::make_shared<RaggedRows>(layout, memory);
    for (size_t f = 0; f < layout.size(); ++f) {
      if (layout[f].layout != FieldLayout::kRagged) continue;
      const std::vector<int64_t> offsets = *SampleOffsets(b, layout[f]);
      const int64_t n = offsets[s + 1] - offsets[s];
      uint8_t* to = *rows->Append(static_cast<int>(f), n);
      const size_t row = layout[f].sample_bytes();
      if (n > 0) {
        std::memcpy(to, b.Find(layout[f].name)->data<uint8_t>() + row * offsets[s], row * n);
      }
    }
    out.sample_rows.push_back(std::move(rows));
  }
  for (auto& [name, tensor] : out.fields) {
    const auto it = std::find_if(layout.begin(), layout.end(),
                                 [&](const FieldSpec& f) { return f.name == name; });
    if (!it->concatenated()) continue;
    std::vector<int64_t> shape{0};
    shape.insert(shape.end(), it->sample_shape.begin(), it->sample_shape.end());
    tensor = Tensor(it->dtype, std::move(shape), Buffer());
  }
  return out;
}

PackOptions Options(int64_t seq_len, int64_t window) {
  PackOptions o;
  o.seq_len = seq_len;
  o.window = window;
  o.pad_id = -7;
  o.vision_token_ids = {kImagePad};
  return o;
}

std::string Bytes(const Batch& b) {
  std::string out;
  for (const auto& [name, t] : b.fields) {
    out += name + ":";
    for (int64_t d : t.shape()) out += std::to_string(d) + ",";
    out.append(reinterpret_cast<const char*>(t.buffer().data()), t.nbytes());
  }
  for (const auto& c : b.strings) {
    for (const auto& row : c.rows) {
      for (const auto& s : row) out += c.name + "=" + s + ";";
    }
  }
  return out;
}

std::vector<Batch> PackAll(const std::vector<Batch>& epoch, const PackOptions& options) {
  Packer packer = *Packer::Make(Layout(), options);
  std::vector<Batch> out;
  for (size_t k = 0; k < epoch.size(); ++k) {
    Result<Batch> b = packer.Push(epoch[k], static_cast<int64_t>(k), k + 1 == epoch.size());
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    out.push_back(*std::move(b));
  }
  EXPECT_EQ(packer.stats().window_samples, 0);
  EXPECT_EQ(packer.stats().window_bytes, 0);
  return out;
}

// Checks one packed batch's layout against the samples it holds, and returns their
// indices in row order.
std::vector<int64_t> CheckPacked(const Batch& b, int64_t seq_len, int64_t pad_id) {
  const Tensor& ids = *b.Find("input_ids");
  const Tensor& labels = *b.Find("labels");
  const Tensor& lengths = *b.Find("input_ids_lengths");
  const Tensor& cu = *b.Find("cu_seqlens");
  const Tensor& per_row = *b.Find("samples_per_row");
  const Tensor& index = *b.Find("index");
  const int64_t rows = ids.shape()[0];
  EXPECT_EQ(ids.shape(), (std::vector<int64_t>{rows, seq_len}));
  EXPECT_EQ(per_row.numel(), rows);
  std::vector<int64_t> samples;
  int64_t s = 0, seg = 0;
  EXPECT_EQ(cu.data<int32_t>()[0], 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t at = 0;
    for (int32_t j = 0; j < per_row.data<int32_t>()[r]; ++j, ++s) {
      const int64_t sample = index.data<int64_t>()[s];
      const int64_t len = lengths.data<int32_t>()[s];
      samples.push_back(sample);
      for (int64_t t = 0; t < len; ++t) {
        const int64_t got = ids.data<int64_t>()[r * seq_len + at + t];
        EXPECT_TRUE(got == sample * 1000 + t || got == kImagePad) << sample << " " << t;
        EXPECT_EQ(labels.data<int64_t>()[r * seq_len + at + t],
                  t == 0 ? -100 : sample * 1000 + 500 + t);
      }
      at += len;
      ++seg;
      EXPECT_EQ(cu.data<int32_t>()[seg], r * seq_len + at);
      EXPECT_EQ(b.strings[0].rows[static_cast<size_t>(s)][0], "s" + std::to_string(sample));
      EXPECT_EQ(b.Find("score")->data<float>()[s], static_cast<float>(sample));
    }
    EXPECT_LE(at, seq_len);
    if (at < seq_len) {
      ++seg;
      EXPECT_EQ(cu.data<int32_t>()[seg], (r + 1) * seq_len);
      for (int64_t t = at; t < seq_len; ++t) {
        EXPECT_EQ(ids.data<int64_t>()[r * seq_len + t], pad_id);
        EXPECT_EQ(labels.data<int64_t>()[r * seq_len + t], -100);
      }
    }
  }
  EXPECT_EQ(cu.numel(), seg + 1);
  EXPECT_EQ(s, b.size());
  // pixel_values: each sample's patches, in row order.
  const Tensor& pv = *b.Find("pixel_values");
  const Tensor& pl = *b.Find("pixel_values_lengths");
  int64_t row = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(pl.data<int32_t>()[i], samples[i] % 3);
    for (int64_t p = 0; p < 2 * pl.data<int32_t>()[i]; ++p) {
      EXPECT_EQ(pv.data<float>()[row * 2 + p], static_cast<float>(samples[i]) + 0.5f);
    }
    row += pl.data<int32_t>()[i];
  }
  EXPECT_EQ(pv.shape()[0], row);
  return samples;
}

TEST(Packer, EverySampleOnceEachSegmentItsSample) {
  for (int64_t window : {0, 3, 16, 1000}) {
    const std::vector<Batch> epoch = Epoch(0, 12, 8, 40, 1);
    std::vector<Batch> packed = PackAll(epoch, Options(64, window));
    ASSERT_EQ(packed.size(), epoch.size());
    std::multiset<int64_t> seen;
    for (size_t k = 0; k < packed.size(); ++k) {
      EXPECT_EQ(packed[k].index_in_epoch, static_cast<int64_t>(k));
      for (int64_t s : CheckPacked(packed[k], 64, -7)) seen.insert(s);
      EXPECT_GE(packed[k].Find("input_ids")->shape()[0], 1) << "at least one row per batch";
    }
    EXPECT_EQ(seen.size(), 96u);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 96u) << "window " << window;
  }
}

TEST(Packer, TheWindowNarrowsOverTheEpochsLastBatchesWhenTheEpochIsKnown) {
  // 12 input batches of 8: unknown, the last packed batch holds the whole window too;
  // known, the window is at most 4 samples per batch still to come, so the last packed
  // batch holds at most 8 + 4. Every sample still comes once, and a resume agrees.
  const std::vector<Batch> epoch = Epoch(0, 12, 8, 40, 1);
  const auto last_samples = [&](const PackOptions& o) {
    std::vector<Batch> packed = PackAll(epoch, o);
    std::set<int64_t> seen;
    for (const Batch& b : packed) {
      for (int64_t s : CheckPacked(b, 64, -7)) EXPECT_TRUE(seen.insert(s).second) << s;
    }
    EXPECT_EQ(seen.size(), 96u);
    return packed.back().size();
  };
  PackOptions wide = Options(64, 16);
  EXPECT_GT(last_samples(wide), 8 + 4);
  wide.epoch_batches = 12;
  EXPECT_LE(last_samples(wide), 8 + 4);

  Packer whole = *Packer::Make(Layout(), wide);
  std::vector<Batch> from_whole;
  for (int64_t k = 0; k < 12; ++k) {
    Result<Batch> b = whole.Push(epoch[k], k, k == 11);
    ASSERT_TRUE(b.ok());
    from_whole.push_back(*std::move(b));
  }
  Packer first = *Packer::Make(Layout(), wide);
  for (int64_t k = 0; k < 10; ++k) ASSERT_TRUE(first.Push(epoch[k], k, false).ok());
  Packer resumed = *Packer::Make(Layout(), wide);
  resumed.Restore(first.state());
  for (int64_t k = first.state().from_batch; k < 12; ++k) {
    Result<Batch> b = resumed.Push(epoch[k], k, k == 11);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    if (k >= 10) EXPECT_EQ(Bytes(*b), Bytes(from_whole[k])) << "resumed at 10, batch " << k;
  }
}

TEST(Packer, TheSamplesOwnRowsPackAsTheJoinedBatch) {
  // An engine that leaves the concatenated fields unjoined (the local loader's path) and
  // a joined batch (a Ray rank's) give the same packed batches, and a resume replays the
  // same way; a carried sample's rows are never copied.
  const std::vector<Batch> joined = Epoch(0, 6, 8, 70, 11);
  std::vector<Batch> unjoined;
  for (const Batch& b : joined) unjoined.push_back(Unjoined(b));
  for (const int64_t window : {int64_t{0}, int64_t{5}}) {
    for (const bool truncate : {true, false}) {
      PackOptions o = Options(64, window);
      o.overflow = truncate ? PackOverflow::kTruncate : PackOverflow::kSkip;
      const std::vector<Batch> a = PackAll(joined, o);
      const std::vector<Batch> b = PackAll(unjoined, o);
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k) {
        EXPECT_EQ(Bytes(a[k]), Bytes(b[k])) << "window " << window << " batch " << k;
      }
    }
    Packer whole = *Packer::Make(Layout(), Options(64, window));
    for (size_t k = 0; k < 3; ++k) ASSERT_TRUE(whole.Push(unjoined[k], k, false).ok());
    const PackState state = whole.state();
    Packer resumed = *Packer::Make(Layout(), Options(64, window));
    resumed.Restore(state);
    for (int64_t k = state.from_batch; k < 6; ++k) {
      Result<Batch> x = resumed.Push(unjoined[k], k, k == 5);
      ASSERT_TRUE(x.ok()) << x.status().ToString();
      if (k >= 3) {
        Result<Batch> y = whole.Push(unjoined[k], k, k == 5);
        ASSERT_TRUE(y.ok());
        EXPECT_EQ(Bytes(*x), Bytes(*y)) << "resumed at 3, batch " << k;
      }
    }
  }
  // A carried sample keeps its own rows: the window holds them (no copy), and only them.
  Packer p = *Packer::Make(Layout(), Options(64, 5));
  ASSERT_TRUE(p.Push(unjoined[0], 0, false).ok());
  ASSERT_GT(p.stats().window_samples, 0);
  int64_t held = 0;
  for (const auto& rows : unjoined[0].sample_rows) held += rows.use_count() - 1;
  EXPECT_EQ(held, p.stats().window_samples);
  // So the packer copies less: the joined batch's carried samples are copied out whole.
  Packer q = *Packer::Make(Layout(), Options(64, 5));
  ASSERT_TRUE(q.Push(joined[0], 0, false).ok());
  EXPECT_GT(p.stats().bytes_copied, 0);
  EXPECT_LT(p.stats().bytes_copied, q.stats().bytes_copied);
}

TEST(Packer, WindowZeroPacksEachBatchAlone) {
  const std::vector<Batch> epoch = Epoch(0, 6, 8, 40, 2);
  std::vector<Batch> packed = PackAll(epoch, Options(64, 0));
  for (size_t k = 0; k < epoch.size(); ++k) {
    std::vector<int64_t> got = CheckPacked(packed[k], 64, -7);
    const Tensor& in = *epoch[k].Find("index");
    std::set<int64_t> want(in.data<int64_t>(), in.data<int64_t>() + in.numel());
    EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), want);
  }
}

TEST(Packer, LargerWindowFillsBetter) {
  const std::vector<Batch> epoch = Epoch(0, 40, 4, 50, 3);
  PackStats small, large;
  {
    Packer p = *Packer::Make(Layout(), Options(64, 0));
    for (size_t k = 0; k < epoch.size(); ++k) ASSERT_TRUE(p.Push(epoch[k], static_cast<int64_t>(k), k + 1 == epoch.size()).ok());
    small = p.stats();
  }
  {
    Packer p = *Packer::Make(Layout(), Options(64, 64));
    for (size_t k = 0; k < epoch.size(); ++k) ASSERT_TRUE(p.Push(epoch[k], static_cast<int64_t>(k), k + 1 == epoch.size()).ok());
    large = p.stats();
  }
  EXPECT_EQ(small.tokens, large.tokens);
  EXPECT_GT(large.fill(), small.fill());
  EXPECT_LT(large.rows, small.rows);
  EXPECT_EQ(large.samples, 160);
  EXPECT_GT(large.max_window_bytes, 0);
}

TEST(Packer, BestFitRule) {
  // seq_len 10, one batch: lengths 6 (a), 5 (b), 4 (c), 3 (d), 3 (e), 1 (f), flushed.
  // Row 1: a (oldest) + the longest that fits in 4: c. Room 0.
  // Row 2: b + longest in 5: d (earliest of the 3s). Room 2: f. Room 1.
  // Row 3: e.
  const Batch b = MakeBatch(0, 0, {{1, 6}, {2, 5}, {3, 4}, {4, 3}, {5, 3}, {6, 1}});
  Packer p = *Packer::Make(Layout(), Options(10, 0));
  Batch out = *p.Push(b, 0, true);
  EXPECT_EQ(CheckPacked(out, 10, -7), (std::vector<int64_t>{1, 3, 2, 4, 6, 5}));
  const Tensor& per_row = *out.Find("samples_per_row");
  EXPECT_EQ(std::vector<int32_t>(per_row.data<int32_t>(), per_row.data<int32_t>() + 3),
            (std::vector<int32_t>{2, 3, 1}));
  const Tensor& cu = *out.Find("cu_seqlens");
  EXPECT_EQ(std::vector<int32_t>(cu.data<int32_t>(), cu.data<int32_t>() + cu.numel()),
            (std::vector<int32_t>{0, 6, 10, 15, 18, 19, 20, 23, 30}));
  EXPECT_EQ(p.stats().tokens, 22);
  EXPECT_EQ(p.stats().padding_tokens, 8);
}

TEST(Packer, WindowCarriesAtMostWindowSamples) {
  const std::vector<Batch> epoch = Epoch(0, 10, 8, 30, 4);
  Packer p = *Packer::Make(Layout(), Options(64, 5));
  for (size_t k = 0; k + 1 < epoch.size(); ++k) {
    ASSERT_TRUE(p.Push(epoch[k], static_cast<int64_t>(k), false).ok());
    EXPECT_LE(p.stats().window_samples, 5);
    EXPECT_EQ(p.state().waiting.size(), static_cast<size_t>(p.stats().window_samples));
  }
  ASSERT_TRUE(p.Push(epoch.back(), 9, true).ok());
  EXPECT_EQ(p.stats().window_samples, 0);
  EXPECT_EQ(p.state().epoch, 1);
  EXPECT_EQ(p.state().next_batch, 0);
}

TEST(Packer, ResumeAtEveryBatchIsByteIdentical) {
  for (int64_t window : {0, 7, 40}) {
    const std::vector<Batch> epoch = Epoch(2, 14, 6, 45, 5);
    const std::vector<Batch> whole = PackAll(epoch, Options(64, window));
    for (size_t k = 1; k <= epoch.size(); ++k) {  // a state exists after the first batch
      Packer first = *Packer::Make(Layout(), Options(64, window));
      for (size_t j = 0; j < k; ++j) ASSERT_TRUE(first.Push(epoch[j], static_cast<int64_t>(j), j + 1 == epoch.size()).ok());
      const PackState state = first.state();
      if (k == epoch.size()) {
        EXPECT_EQ(state.epoch, 3);
        continue;
      }
      EXPECT_EQ(state.next_batch, static_cast<int64_t>(k));
      EXPECT_LE(state.from_batch, state.next_batch);
      Packer second = *Packer::Make(Layout(), Options(64, window));
      second.Restore(state);
      for (size_t j = static_cast<size_t>(state.from_batch); j < epoch.size(); ++j) {
        const bool replay = second.replaying(static_cast<int64_t>(j));
        EXPECT_EQ(replay, j < k);
        Result<Batch> b = second.Push(epoch[j], static_cast<int64_t>(j), j + 1 == epoch.size());
        ASSERT_TRUE(b.ok()) << b.status().ToString();
        if (replay) {
          EXPECT_EQ(b->fields.size(), 0u);
          continue;
        }
        EXPECT_EQ(Bytes(*b), Bytes(whole[j])) << "window " << window << " resumed at " << k
                                              << ", batch " << j;
      }
    }
  }
}

TEST(Packer, ResumeRefusesAChangedDataset) {
  const std::vector<Batch> epoch = Epoch(0, 6, 6, 45, 6);
  Packer first = *Packer::Make(Layout(), Options(64, 20));
  for (size_t j = 0; j < 3; ++j) ASSERT_TRUE(first.Push(epoch[j], static_cast<int64_t>(j), false).ok());
  PackState state = first.state();
  ASSERT_FALSE(state.waiting.empty());
  state.waiting.back() = 123456;  // not in the replayed batches
  Packer second = *Packer::Make(Layout(), Options(64, 20));
  second.Restore(state);
  Status status;
  for (size_t j = static_cast<size_t>(state.from_batch); j < epoch.size() && status.ok(); ++j) {
    status = second.Push(epoch[j], static_cast<int64_t>(j), j + 1 == epoch.size()).status();
  }
  EXPECT_THAT(status.message(), HasSubstr("resume"));
}

TEST(Packer, OverflowTruncatesOrSkipsAndCounts) {
  const Batch b = MakeBatch(0, 0, {{1, 30}, {2, 8}, {3, 12}});
  {
    Packer p = *Packer::Make(Layout(), Options(10, 0));
    Batch out = *p.Push(b, 0, true);
    std::vector<int64_t> got = CheckPacked(out, 10, -7);
    EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), (std::set<int64_t>{1, 2, 3}));
    EXPECT_EQ(p.stats().truncated, 2);
    EXPECT_EQ(p.stats().tokens, 28);
    // Data lost: each cut sample is an error of the batch and a lost sample, named.
    ASSERT_EQ(out.errors.size(), 2u);
    EXPECT_EQ(out.errors[0].index, 1);
    EXPECT_EQ(out.errors[0].status.code(), StatusCode::kPackTruncated);
    EXPECT_THAT(out.errors[0].status.ToString(),
                HasSubstr("pack_truncated: packing: the sample's 30 tokens exceed "
                          "batch.pack.seq_len 10: cut to 10"));
    const std::vector<LostSample> lost = p.TakeLost();
    ASSERT_EQ(lost.size(), 2u);
    EXPECT_EQ(lost[1].error.index, 3);
    EXPECT_TRUE(lost[1].was_delivered);
    EXPECT_TRUE(p.TakeLost().empty()) << "taken once";
  }
  {
    PackOptions o = Options(10, 0);
    o.overflow = PackOverflow::kSkip;
    Packer p = *Packer::Make(Layout(), o);
    Batch out = *p.Push(b, 0, true);
    EXPECT_EQ(CheckPacked(out, 10, -7), (std::vector<int64_t>{2}));
    EXPECT_EQ(p.stats().skipped, 2);
    ASSERT_EQ(out.errors.size(), 2u);
    EXPECT_EQ(out.errors[1].index, 3);
    EXPECT_EQ(out.errors[1].status.code(), StatusCode::kPackSkipped);
    EXPECT_THAT(out.errors[1].status.message(),
                HasSubstr("12 tokens exceed batch.pack.seq_len 10: left out"));
    EXPECT_EQ(p.TakeLost().size(), 2u);
  }
  {
    PackOptions o = Options(10, 0);
    o.budget = true;
    Packer p = *Packer::Make(Layout(), o);
    const std::vector<Batch> out = *p.PushBudget(b, 0, true);
    ASSERT_FALSE(out.empty());
    ASSERT_EQ(out[0].errors.size(), 2u);
    EXPECT_THAT(out[0].errors[0].status.message(),
                HasSubstr("30 tokens exceed batch.max_tokens 10: cut to 10"));
    EXPECT_EQ(p.TakeLost().size(), 2u);
  }
}

TEST(Packer, ACutThroughVisionTokensFailsTheSample) {
  // Sample 1: 12 tokens, 11 of them image pads: a cut at 10 drops one.
  // Sample 2: 12 tokens, 4 image pads first: a cut at 10 keeps them all.
  const Batch b = MakeBatch(3, 0, {{1, 12, 11}, {2, 12, 4}, {3, 5}});
  Packer p = *Packer::Make(Layout(), Options(10, 0));
  Batch out = *p.Push(b, 0, true);
  EXPECT_EQ(CheckPacked(out, 10, -7), (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(out.errors.size(), 2u);  // and sample 2's cut (pack_truncated)
  EXPECT_EQ(out.errors[1].index, 2);
  EXPECT_EQ(out.errors[1].status.code(), StatusCode::kPackTruncated);
  EXPECT_EQ(out.errors[0].index, 1);
  EXPECT_EQ(out.errors[0].epoch, 3);
  EXPECT_EQ(out.errors[0].uri, "s1");
  EXPECT_THAT(out.errors[0].status.message(),
              HasSubstr("12 tokens exceed batch.pack.seq_len 10, and the cut would drop 1 of its 11 "
                        "vision tokens"));
  EXPECT_EQ(p.stats().failed, 1);
  EXPECT_EQ(p.stats().vision_tokens, 4);
  EXPECT_EQ(p.stats().truncated, 1);
}

TEST(Packer, EmptyAndAllFailedBatchesKeepTheCount) {
  Packer p = *Packer::Make(Layout(), Options(16, 4));
  Batch empty = MakeBatch(0, 0, {});
  Batch out = *p.Push(empty, 0, false);
  EXPECT_EQ(out.index_in_epoch, 0);
  EXPECT_EQ(out.Find("input_ids")->shape(), (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(out.Find("cu_seqlens")->numel(), 1);
  out = *p.Push(MakeBatch(0, 1, {{5, 3}}), 1, true);
  EXPECT_EQ(CheckPacked(out, 16, -7), (std::vector<int64_t>{5}));
}

TEST(Packer, OutOfOrderBatchesAreRefused) {
  const std::vector<Batch> epoch = Epoch(0, 3, 2, 5, 7);
  Packer p = *Packer::Make(Layout(), Options(16, 4));
  ASSERT_TRUE(p.Push(epoch[0], 0, false).ok());
  EXPECT_THAT(p.Push(epoch[2], 2, false).status().message(), HasSubstr("expected input batch 1"));
}

TEST(Packer, ConfigErrors) {
  EXPECT_THAT(Packer::Make(Layout(), Options(0, 0)).status().message(),
              HasSubstr("batch.pack.seq_len: must be > 0"));
  EXPECT_THAT(Packer::Make(Layout(), Options(8, -1)).status().message(),
              HasSubstr("batch.pack.window: must be >= 0"));
  std::vector<FieldSpec> padded{FieldSpec{"input_ids", DType::kI64, {128}}};
  EXPECT_THAT(Packer::Make(padded, Options(8, 0)).status().message(),
              HasSubstr("text.tokenize {pad: false}"));
  // labels is one of input_ids' per-token fields: packing by it left input_ids ragged.
  PackOptions by_labels = Options(8, 0);
  by_labels.token_field = "labels";
  EXPECT_THAT(Packer::Make(Layout(), by_labels).status().message(),
              HasSubstr("batch.pack.field: 'labels' is a per-token field of 'input_ids': pack "
                        "by the sequence itself, field: input_ids"));
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

PackOptions Budget(int64_t max_tokens, int64_t window) {
  PackOptions o = Options(max_tokens, window);
  o.budget = true;
  return o;
}

TEST(PackerBudget, BatchesOfAtMostMaxTokensEverySampleOnce) {
  for (int64_t window : {0, 5, 100}) {
    const std::vector<Batch> epoch = Epoch(0, 10, 8, 40, 11);
    Packer p = *Packer::Make(Layout(), Budget(100, window));
    std::set<int64_t> seen;
    int64_t outputs = 0, tokens = 0;
    for (size_t k = 0; k < epoch.size(); ++k) {
      Result<std::vector<Batch>> out = p.PushBudget(epoch[k], static_cast<int64_t>(k),
                                                    k + 1 == epoch.size());
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      ASSERT_GE(out->size(), 1u);
      for (const Batch& b : *out) {
        ++outputs;
        const Tensor& ids = *b.Find("input_ids");
        const Tensor& lengths = *b.Find("input_ids_lengths");
        const Tensor& cu = *b.Find("cu_seqlens");
        EXPECT_EQ(ids.shape().size(), 1u) << "unpadded";
        EXPECT_LE(ids.numel(), 100);
        EXPECT_EQ(b.Find("samples_per_row"), nullptr);
        EXPECT_EQ(cu.numel(), b.size() + 1);
        EXPECT_EQ(cu.data<int32_t>()[cu.numel() - 1], ids.numel());
        int64_t at = 0;
        for (int64_t s = 0; s < b.size(); ++s) {
          const int64_t sample = b.Find("index")->data<int64_t>()[s];
          EXPECT_TRUE(seen.insert(sample).second);
          const int64_t len = lengths.data<int32_t>()[s];
          EXPECT_EQ(cu.data<int32_t>()[s], at);
          for (int64_t t = 0; t < len; ++t) {
            EXPECT_EQ(ids.data<int64_t>()[at + t], sample * 1000 + t);
            EXPECT_EQ(b.Find("labels")->data<int64_t>()[at + t], sample * 1000 + 500 + t)
                << "labels as unpacked";
          }
          at += len;
          EXPECT_EQ(b.Find("score")->data<float>()[s], static_cast<float>(sample));
        }
        tokens += ids.numel();
      }
    }
    EXPECT_EQ(seen.size(), 80u);
    EXPECT_EQ(p.stats().tokens, tokens);
    EXPECT_EQ(p.stats().rows, outputs);
    EXPECT_EQ(p.stats().padding_tokens, outputs * 100 - tokens);
  }
}

TEST(PackerBudget, ResumeRebuildsTheSameBatches) {
  const std::vector<Batch> epoch = Epoch(1, 9, 8, 40, 12);
  std::vector<std::vector<std::string>> whole;
  {
    Packer p = *Packer::Make(Layout(), Budget(120, 10));
    for (size_t k = 0; k < epoch.size(); ++k) {
      whole.emplace_back();
      const std::vector<Batch> out =
          *p.PushBudget(epoch[k], static_cast<int64_t>(k), k + 1 == epoch.size());
      for (const Batch& b : out) whole.back().push_back(Bytes(b));
    }
  }
  for (size_t k = 1; k < epoch.size(); ++k) {
    Packer first = *Packer::Make(Layout(), Budget(120, 10));
    for (size_t j = 0; j < k; ++j) ASSERT_TRUE(first.PushBudget(epoch[j], static_cast<int64_t>(j), false).ok());
    Packer second = *Packer::Make(Layout(), Budget(120, 10));
    second.Restore(first.state());
    for (size_t j = static_cast<size_t>(first.state().from_batch); j < epoch.size(); ++j) {
      Result<std::vector<Batch>> pushed =
          second.PushBudget(epoch[j], static_cast<int64_t>(j), j + 1 == epoch.size());
      ASSERT_TRUE(pushed.ok()) << pushed.status().ToString() << " at " << k << " " << j;
      std::vector<Batch> out = *std::move(pushed);
      if (j < k) {
        EXPECT_TRUE(out.empty());
        continue;
      }
      ASSERT_EQ(out.size(), whole[j].size());
      for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(Bytes(out[i]), whole[j][i]) << k << " " << j;
    }
  }
}

}  // namespace
}  // namespace headrace

namespace headrace {
namespace {

// The queue a consumer drives: a state saved between two token batches of one input
// batch resumes with the next of them.
TEST(PackingQueue, ResumesBetweenTwoTokenBatchesOfOneInputBatch) {
  const std::vector<Batch> epoch = Epoch(0, 6, 8, 40, 21);
  const auto run = [&](PackingQueue& q, size_t from, std::vector<std::string>& out,
                       std::vector<PackState>* states) {
    for (size_t k = from; k < epoch.size(); ++k) {
      ASSERT_TRUE(q.Push(epoch[k], static_cast<int64_t>(k), k + 1 == epoch.size()).ok());
      while (std::optional<Batch> b = q.Pop()) {
        out.push_back(Bytes(*b));
        if (states != nullptr) states->push_back(q.state());
      }
    }
  };
  std::vector<std::string> whole;
  std::vector<PackState> states;
  {
    PackingQueue q(*Packer::Make(Layout(), Budget(60, 6)));
    run(q, 0, whole, &states);
  }
  ASSERT_GT(whole.size(), epoch.size());
  bool mid_batch = false;
  for (size_t i = 0; i + 1 < whole.size(); ++i) {
    mid_batch |= states[i].delivered > 0;
    PackingQueue q(*Packer::Make(Layout(), Budget(60, 6)));
    q.Resume(states[i]);
    std::vector<std::string> rest;
    run(q, static_cast<size_t>(states[i].from_batch), rest, nullptr);
    EXPECT_EQ(rest, std::vector<std::string>(whole.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                             whole.end()))
        << "resumed after token batch " << i;
  }
  EXPECT_TRUE(mid_batch);
}


// ---- PackPlanner (exec/pack_planner.h): the same rows, decided from told sizes ----

// Input batch k's samples as the engine's order gives them, and their told sizes: what a
// planner sizes (lengths from the batches themselves, vision tokens first).
struct Told {
  std::map<int64_t, SampleSpec> specs;  // by dataset index
  explicit Told(const std::vector<Batch>& epoch) {
    for (const Batch& b : epoch) {
      const Tensor& lengths = *b.Find("input_ids_lengths");
      const Tensor& index = *b.Find("index");
      const Tensor& ids = *b.Find("input_ids");
      int64_t at = 0;
      for (int64_t s = 0; s < b.size(); ++s) {
        const int64_t n = lengths.data<int32_t>()[s];
        int64_t vision = 0;
        while (vision < n && ids.data<int64_t>()[at + vision] == kImagePad) ++vision;
        specs[index.data<int64_t>()[s]] = {index.data<int64_t>()[s], n, vision};
        at += n;
      }
    }
  }
  PackPlanner::Sizer Sizer(int64_t seq_len, int* calls = nullptr) const {
    return [this, seq_len, calls](int64_t, std::span<const int64_t> indices, std::stop_token) {
      if (calls != nullptr) ++*calls;
      std::vector<std::optional<PackPlanner::Told>> out;
      for (const int64_t i : indices) {
        const SampleSpec& s = specs.at(i);
        out.push_back(PackPlanner::Told{s.length, s.vision, std::max<int64_t>(s.vision - seq_len, 0),
                                        "s" + std::to_string(i)});
      }
      return out;
    };
  }
};

std::vector<int64_t> IndicesOf(const Batch& b) {
  const Tensor& index = *b.Find("index");
  return {index.data<int64_t>(), index.data<int64_t>() + b.size()};
}

// The engine's batch of a plan: the planned samples, in row order, as computed.
Batch Computed(const Told& told, int64_t epoch, int64_t k, const PlannedPack& plan,
               const std::set<int64_t>& failing = {}) {
  std::vector<SampleSpec> samples;
  for (const auto& row : plan.rows) {
    for (const int64_t i : row) {
      if (failing.count(i) == 0) samples.push_back(told.specs.at(i));
    }
  }
  return MakeBatch(epoch, k, samples);
}

struct TokensEntry {
  int64_t id = 0;
  int64_t tokens = 0;
};

// TakePackRows over samples of `tokens` (ids 0, 1, ...), with `keep` and `multiple`.
std::vector<std::vector<int64_t>> RowsOf(const std::vector<int64_t>& tokens, int64_t seq_len,
                                         int64_t keep, int64_t multiple, size_t* left = nullptr) {
  std::map<int64_t, TokensEntry> window;
  std::multimap<int64_t, int64_t> by_tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    window[static_cast<int64_t>(i)] = {static_cast<int64_t>(i), tokens[i]};
    by_tokens.emplace(tokens[i], static_cast<int64_t>(i));
  }
  std::vector<std::vector<int64_t>> rows;
  for (const auto& row : TakePackRows(window, by_tokens, seq_len, false, keep, multiple)) {
    rows.emplace_back();
    for (const TokensEntry& e : row) rows.back().push_back(e.id);
  }
  if (left != nullptr) *left = window.size();
  return rows;
}

TEST(TakePackRows, RowsForRanksComeInMultiplesOfTheirCountAndNoneIsLeftEmpty) {
  // One rank: what fits one row is one row.
  EXPECT_EQ(RowsOf({10, 20, 30, 5}, 100, 0, 1), (std::vector<std::vector<int64_t>>{{0, 2, 1, 3}}));
  // Three ranks: the same samples spread over three rows, longest first to the emptiest.
  EXPECT_EQ(RowsOf({10, 20, 30, 5}, 100, 0, 3),
            (std::vector<std::vector<int64_t>>{{2}, {1}, {0, 3}}));
  // Fewer samples than ranks: as they fit (an epoch's end; the deal gives some rank none).
  EXPECT_EQ(RowsOf({10, 20}, 100, 0, 3), (std::vector<std::vector<int64_t>>{{0, 1}}));
  // A window kept: rows while more than `keep` wait, then on to a whole multiple.
  size_t left = 0;
  const std::vector<std::vector<int64_t>> rows =
      RowsOf({60, 60, 60, 60, 60, 60, 60, 60}, 100, 5, 2, &left);
  EXPECT_EQ(rows.size(), 4u) << "3 rows leave 5 waiting; a 4th makes the multiple";
  EXPECT_EQ(left, 4u);
}

TEST(PackPlanner, PlansTheRowsThePackerBuildsAndItsBatchesAreThePackersWithoutACopy) {
  for (const int64_t window : {0, 5, 40}) {
    for (const PackOverflow overflow : {PackOverflow::kTruncate, PackOverflow::kSkip}) {
      const std::vector<Batch> epoch = Epoch(0, 9, 7, 90, 17 + static_cast<uint32_t>(window));
      PackOptions options = Options(64, window);
      options.overflow = overflow;
      options.epoch_batches = 9;
      const Told told(epoch);
      Packer packer = *Packer::Make(Layout(), options);
      Packer laid = *Packer::Make(Layout(), options);
      PackPlanner planner(options, told.Sizer(options.seq_len));
      for (int64_t k = 0; k < 9; ++k) {
        const Batch expected = *packer.Push(epoch[k], k, k == 8);
        const std::vector<int64_t> in = IndicesOf(epoch[k]);
        const std::vector<int64_t> planned = planner.Plan(0, k, k, k == 8, in);
        EXPECT_EQ(planned, IndicesOf(expected)) << "window " << window << " batch " << k;
        std::optional<PlannedPack> plan = planner.Take(k);
        ASSERT_TRUE(plan.has_value());
        EXPECT_FALSE(planner.Take(k).has_value()) << "taken once";
        const Batch computed = Computed(told, 0, k, *plan);
        const Batch out = *laid.PushPlanned(computed, k, plan->rows, plan->skipped);
        EXPECT_EQ(Bytes(out), Bytes(expected)) << "window " << window << " batch " << k;
        EXPECT_EQ(out.Find("pixel_values")->data<float>(),
                  computed.Find("pixel_values")->data<float>())
            << "the patches are the computed batch's, not copied";
      }
      EXPECT_EQ(laid.stats().skipped, packer.stats().skipped);
      EXPECT_EQ(laid.stats().truncated, packer.stats().truncated);
      // The same samples lost (a planned cut goes with the batch its sample is laid out
      // in, the packer's with its input batch: with a window, not always the same one).
      EXPECT_EQ(laid.TakeLost().size(), packer.TakeLost().size());
      EXPECT_EQ(laid.stats().planned_batches, 9);
      EXPECT_LT(laid.stats().bytes_copied, packer.stats().bytes_copied);
    }
  }
}

TEST(PackPlanner, WithATokenBudgetItsBatchesAreThePackersAndRunsOfTheComputedBatch) {
  for (const int64_t window : {0, 6}) {
    const std::vector<Batch> epoch = Epoch(0, 6, 7, 90, 31 + static_cast<uint32_t>(window));
    PackOptions options = Options(150, window);
    options.budget = true;
    const Told told(epoch);
    Packer packer = *Packer::Make(Layout(), options);
    Packer laid = *Packer::Make(Layout(), options);
    PackPlanner planner(options, told.Sizer(options.seq_len));
    for (int64_t k = 0; k < 6; ++k) {
      const std::vector<Batch> expected = *packer.PushBudget(epoch[k], k, k == 5);
      (void)planner.Plan(0, k, k, k == 5, IndicesOf(epoch[k]));
      const PlannedPack plan = *planner.Take(k);
      const Batch computed = Computed(told, 0, k, plan);
      const std::vector<Batch> out = *laid.PushPlannedBudget(computed, k, plan.rows, plan.skipped);
      ASSERT_EQ(out.size(), expected.size()) << "window " << window << " batch " << k;
      const float* patches = computed.Find("pixel_values")->data<float>();
      for (size_t b = 0; b < out.size(); ++b) {
        EXPECT_EQ(Bytes(out[b]), Bytes(expected[b])) << "window " << window << " batch " << k;
        if (out[b].Find("pixel_values")->numel() == 0) continue;
        EXPECT_EQ(out[b].Find("pixel_values")->data<float>(), patches)
            << "a run of the computed batch's patches, not a copy";
        patches += out[b].Find("pixel_values")->numel();
      }
    }
    EXPECT_EQ(laid.stats().bytes_copied, 0) << "nothing copied: every field a run";
  }
}

TEST(PackPlanner, AFailedSampleLeavesItsRoomAndOneLongerThanToldARowOfItsOwn) {
  const std::vector<Batch> epoch = Epoch(0, 3, 8, 30, 5);
  const PackOptions options = Options(64, 0);
  const Told told(epoch);
  PackPlanner planner(options, told.Sizer(options.seq_len));
  (void)planner.Plan(0, 0, 0, false, IndicesOf(epoch[0]));
  const PlannedPack plan = *planner.Take(0);
  ASSERT_GE(plan.rows.front().size(), 2u);
  const int64_t gone = plan.rows.front()[1];
  Packer packer = *Packer::Make(Layout(), options);
  const Batch out = *packer.PushPlanned(Computed(told, 0, 0, plan, {gone}), 0, plan.rows);
  std::vector<int64_t> expected;
  for (const auto& row : plan.rows) {
    for (const int64_t i : row) {
      if (i != gone) expected.push_back(i);
    }
  }
  EXPECT_EQ(CheckPacked(out, 64, -7), expected);
  EXPECT_EQ(out.Find("samples_per_row")->data<int32_t>()[0],
            static_cast<int32_t>(plan.rows.front().size() - 1));
  EXPECT_EQ(out.Find("input_ids")->shape()[0], static_cast<int64_t>(plan.rows.size()));

  // Its first row's samples made 60 tokens each, not as told: they cannot share a row.
  Told longer = told;
  for (const int64_t i : plan.rows.front()) longer.specs[i].length = 60;
  const Batch apart = *packer.PushPlanned(Computed(longer, 0, 1, plan), 1, plan.rows);
  EXPECT_EQ(apart.Find("input_ids")->shape()[0],
            static_cast<int64_t>(plan.rows.size() + plan.rows.front().size() - 1));
  CheckPacked(apart, 64, -7);
}

TEST(PackPlanner, ACutThroughVisionTokensIsLeftOutAndNamedBeforeItRuns) {
  std::vector<SampleSpec> samples = {{0, 10}, {1, 80, 70}, {2, 80, 20}, {3, 12}};
  const std::vector<Batch> epoch = {MakeBatch(0, 0, samples)};
  const Told told(epoch);
  PackPlanner planner(Options(64, 0), told.Sizer(64));
  const std::vector<int64_t> planned = planner.Plan(0, 0, 0, true, IndicesOf(epoch[0]));
  EXPECT_EQ(std::count(planned.begin(), planned.end(), 1), 0) << "its vision tokens pass 64";
  EXPECT_EQ(std::count(planned.begin(), planned.end(), 2), 1) << "cut after its vision tokens";
  const PlannedPack plan = *planner.Take(0);
  ASSERT_EQ(plan.failed.size(), 1u);
  EXPECT_EQ(plan.failed[0].index, 1);
  EXPECT_EQ(plan.failed[0].uri, "s1");
  EXPECT_THAT(plan.failed[0].status.message(),
              HasSubstr("80 tokens exceed batch.pack.seq_len 64, and the cut would drop 6 of "
                        "its 70 vision tokens"));
  Packer packer = *Packer::Make(Layout(), Options(64, 0));
  const Batch out = *packer.PushPlanned(Computed(told, 0, 0, plan), 0, plan.rows, plan.skipped,
                                        plan.failed);
  ASSERT_EQ(out.errors.size(), 2u);  // the failure, and sample 2's cut (pack_truncated)
  EXPECT_EQ(out.errors[1].status.code(), StatusCode::kPackTruncated);
  EXPECT_EQ(packer.stats().failed, 1);
  EXPECT_EQ(packer.stats().truncated, 1);
  const std::vector<LostSample> lost = packer.TakeLost();
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_FALSE(lost[0].was_delivered) << "left out by the plan: never ran";
  EXPECT_TRUE(lost[1].was_delivered) << "cut once computed";
}

TEST(PackPlanner, FromASavedStateOrAStartBatchItPlansWhatTheUnbrokenRunDoes) {
  const std::vector<Batch> epoch = Epoch(2, 10, 6, 50, 23);
  PackOptions options = Options(64, 9);
  options.epoch_batches = 10;
  const Told told(epoch);
  const PackPlanner::InputBatch batch_of = [&](int64_t e, int64_t p) {
    EXPECT_EQ(e, 2);
    return IndicesOf(epoch[static_cast<size_t>(p)]);
  };
  PackPlanner unbroken(options, told.Sizer(64));
  std::vector<PlannedPack> plans;
  for (int64_t k = 0; k < 10; ++k) {
    (void)unbroken.Plan(2, k, k, k == 9, IndicesOf(epoch[k]));
    plans.push_back(*unbroken.Take(k));
  }
  for (int64_t at = 1; at < 10; ++at) {
    int sized = 0;
    PackPlanner resumed(options, told.Sizer(64, &sized));
    ASSERT_TRUE(resumed.Restore(plans[at - 1].after, batch_of).ok());
    EXPECT_LE(resumed.samples_sized(), static_cast<int64_t>(plans[at - 1].after.waiting.size()))
        << "only the waiting samples are sized again";
    PackPlanner skipped(options, told.Sizer(64));
    skipped.Skip(2, at, batch_of);
    for (int64_t k = at; k < 10; ++k) {
      (void)resumed.Plan(2, k, k, k == 9, IndicesOf(epoch[k]));
      (void)skipped.Plan(2, k, k, k == 9, IndicesOf(epoch[k]));
      EXPECT_EQ(resumed.Take(k)->rows, plans[k].rows) << "resumed at " << at << ", batch " << k;
      EXPECT_EQ(skipped.Take(k)->rows, plans[k].rows) << "started at " << at << ", batch " << k;
    }
  }
  // A state whose waiting samples the batches no longer hold.
  PackState wrong = plans[3].after;
  ASSERT_FALSE(wrong.waiting.empty());
  wrong.waiting.front() = 100000;
  PackPlanner resumed(options, told.Sizer(64));
  EXPECT_THAT(resumed.Restore(wrong, batch_of).message(), HasSubstr("changed since the state"));
}


TEST(PackPlanner, ASkippedSampleIsNamedAndLostBeforeItRuns) {
  const std::vector<Batch> epoch = {MakeBatch(0, 0, {{0, 10}, {1, 80}, {2, 12}})};
  const Told told(epoch);
  PackOptions options = Options(64, 0);
  options.overflow = PackOverflow::kSkip;
  PackPlanner planner(options, told.Sizer(64));
  const std::vector<int64_t> planned = planner.Plan(0, 0, 0, true, IndicesOf(epoch[0]));
  EXPECT_EQ(std::count(planned.begin(), planned.end(), 1), 0) << "never computed";
  PlannedPack plan = *planner.Take(0);
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_EQ(plan.skipped[0].index, 1);
  EXPECT_EQ(plan.skipped[0].status.code(), StatusCode::kPackSkipped);
  EXPECT_THAT(plan.skipped[0].status.message(),
              HasSubstr("80 tokens exceed batch.pack.seq_len 64: left out"));
  Packer packer = *Packer::Make(Layout(), options);
  const Batch out = *packer.PushPlanned(Computed(told, 0, 0, plan), 0, plan.rows, plan.skipped);
  ASSERT_EQ(out.errors.size(), 1u);
  EXPECT_EQ(out.errors[0].status.code(), StatusCode::kPackSkipped);
  EXPECT_EQ(packer.stats().skipped, 1);
  const std::vector<LostSample> lost = packer.TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_FALSE(lost[0].was_delivered);
}

TEST(PackingQueue, LostSamplesAreTheDeliveredBatchesOnly) {
  // A start past the epoch's first batch without a state replays it: what it lost there
  // was counted by the run that delivered it.
  const Batch first = MakeBatch(0, 0, {{0, 30}, {1, 8}});
  const Batch second = MakeBatch(0, 1, {{2, 30}, {3, 8}});
  PackingQueue queue(*Packer::Make(Layout(), Options(10, 0)));
  queue.DeliverFrom(1);
  EXPECT_FALSE(*queue.Push(first, 0, false));
  EXPECT_TRUE(queue.TakeLost().empty());
  EXPECT_TRUE(*queue.Push(second, 1, true));
  const std::vector<LostSample> lost = queue.TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].error.index, 2);
}
// What PackFormer::ready() asks (Loader::WaitReady): a queued packed batch whose every
// sample failed holds none, and the consumer's Next skips it and waits for input.
TEST(PackingQueue, HoldsSamplesOnlyWithABatchThatHasOne) {
  Batch failed = MakeBatch(0, 0, {});
  failed.errors.push_back(SampleError{0, 3, "s3", Status::InvalidArgument("bad")});
  PackingQueue queue(*Packer::Make(Layout(), Options(16, 0)));
  EXPECT_TRUE(*queue.Push(failed, 0, false));
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_FALSE(queue.HoldsSamples());
  EXPECT_TRUE(*queue.Push(MakeBatch(0, 1, {{5, 3}}), 1, true));
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_TRUE(queue.HoldsSamples());
  EXPECT_EQ(queue.Pop()->size(), 0u);
  EXPECT_TRUE(queue.HoldsSamples());
}

// The batches a former forms from, scripted; what it charged and counted.
class ScriptedInput final : public BatchInput {
 public:
  ScriptedInput(std::vector<Batch> batches, int64_t per_epoch)
      : batches_(std::move(batches)), per_epoch_(per_epoch) {}
  Result<std::optional<Batch>> Next() override {
    if (next_ == batches_.size()) return std::optional<Batch>();
    return std::optional<Batch>(batches_[next_++]);
  }
  bool WaitReady(std::chrono::nanoseconds) override { return true; }
  int64_t batches_per_epoch() const override { return per_epoch_; }
  void ChargeHeld(int64_t delta) override {
    charged += delta;
    most_charged = std::max(most_charged, charged);
  }
  Status CountLost(std::span<const LostSample> lost, bool at_end) override {
    counted.emplace_back(static_cast<int64_t>(lost.size()), at_end);
    return Status::Ok();
  }

  int64_t charged = 0;
  int64_t most_charged = 0;
  std::vector<std::pair<int64_t, bool>> counted;  // per input batch: lost, at the end

 private:
  std::vector<Batch> batches_;
  size_t next_ = 0;
  int64_t per_epoch_;
};

std::shared_ptr<BatchFormer> PackFormerOf(const PackOptions& options, EngineOptions& engine) {
  auto inputs = std::make_shared<EngineInputs>();
  inputs->fields = Layout();
  FormingRun run{.inputs = inputs, .pack = options, .engine = &engine, .plan_packing = false};
  Result<std::shared_ptr<BatchFormer>> former = MakeBatchFormer(run);
  EXPECT_TRUE(former.ok()) << former.status().ToString();
  EXPECT_EQ((*former)->name(), "pack");
  return *former;
}

TEST(PackFormer, ItsBatchesAreThePackersItsWindowChargedAndItsLossesCountedPerInputBatch) {
  const std::vector<Batch> epoch = Epoch(0, 6, 4, 24, 11);  // some longer than 16: cut
  PackOptions options = Options(16, 4);
  options.epoch_batches = 6;
  const std::vector<Batch> want = PackAll(epoch, options);
  EngineOptions engine;
  std::shared_ptr<BatchFormer> former = PackFormerOf(options, engine);
  ScriptedInput input(epoch, 6);
  std::vector<Batch> got;
  while (true) {
    Result<std::optional<Batch>> b = former->Next(input);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    if (!b->has_value()) break;
    got.push_back(**b);
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(Bytes(got[k]), Bytes(want[k])) << k;
  const PackStats stats = *former->stats();
  EXPECT_GT(stats.truncated, 0);
  ASSERT_EQ(input.counted.size(), 6u) << "once per input batch";
  int64_t lost = 0;
  for (size_t k = 0; k < 6; ++k) {
    lost += input.counted[k].first;
    EXPECT_EQ(input.counted[k].second, k == 5) << "the epoch's last is its verdict";
  }
  EXPECT_EQ(lost, stats.truncated + stats.skipped);
  EXPECT_GT(input.most_charged, 0) << "the window is charged to the batch budget";
  EXPECT_EQ(input.charged, 0) << "and released as the epoch's end empties it";
  EXPECT_EQ(former->state()->epoch, 1) << "the next epoch's start";
  EXPECT_EQ(former->state()->next_batch, 0);
  EXPECT_TRUE(former->state()->waiting.empty());
}

TEST(PackFormer, APackedBatchWithNoSampleIsHeldBackAndItsErrorsGoWithTheNext) {
  Batch failed = MakeBatch(0, 0, {});
  failed.errors.push_back(SampleError{0, 3, "s3", Status::InvalidArgument("bad")});
  EngineOptions engine;  // deliver_empty_batches false: the consumer wants samples
  std::shared_ptr<BatchFormer> former = PackFormerOf(Options(16, 0), engine);
  ScriptedInput input({failed, MakeBatch(0, 1, {{5, 3}})}, 2);
  Result<std::optional<Batch>> b = former->Next(input);
  ASSERT_TRUE(b.ok() && b->has_value()) << b.status().ToString();
  EXPECT_EQ(CheckPacked(**b, 16, -7), (std::vector<int64_t>{5}));
  ASSERT_EQ((*b)->errors.size(), 1u);
  EXPECT_EQ((*b)->errors[0].index, 3);
  EXPECT_FALSE(former->Next(input)->has_value());
}

}  // namespace
}  // namespace headrace
