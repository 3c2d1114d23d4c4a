#include "headrace/ops/for_each_item.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "headrace/ops/op_plan.h"

namespace headrace {
namespace {

using ::testing::HasSubstr;

constexpr int kListField = 1;
constexpr int kSlot = 0;

// Writes each item's first byte and the first draw of its random stream into its row
// (two int64s), and an image into scratch; fails on an item whose bytes are "bad".
class ItemProbeOp final : public Op {
 public:
  std::string_view name() const override { return "probe"; }
  Status Run(SampleContext& ctx) const override {
    const auto* bytes = ctx.Get<EncodedBytes>(kSlot);
    if (bytes == nullptr || bytes->size == 0) return Status::Internal("no item");
    if (std::string_view(reinterpret_cast<const char*>(bytes->data), bytes->size) == "bad") {
      return Status::CorruptData("not an item");
    }
    HR_ASSIGN_OR_RETURN(MutableImageView image, ctx.NextScratchImage(8, 8, 1));
    std::memset(image.data, bytes->data[0], 64);
    const int64_t row[2] = {bytes->data[0], static_cast<int64_t>(ctx.OpRng(3).Next() >> 1)};
    std::memcpy(ctx.rows[1], row, sizeof row);
    return Status::Ok();
  }
};

// Appends as many rows to the ragged field at row 3 as its item has bytes, each row the
// byte's value: a `[?, 1]` field with one entry per item.
class RaggedProbeOp final : public Op {
 public:
  std::string_view name() const override { return "ragged"; }
  Status Run(SampleContext& ctx) const override {
    const auto* bytes = ctx.Get<EncodedBytes>(kSlot);
    HR_ASSIGN_OR_RETURN(uint8_t * out, ctx.AppendRows(3, static_cast<int64_t>(bytes->size)));
    std::memcpy(out, bytes->data, bytes->size);
    return Status::Ok();
  }
};

struct Fixture {
  SampleRecord record;
  Sample sample;
  std::vector<Value> values = std::vector<Value>(1);
  std::vector<int64_t> other_row = {7};      // row 0: a field of another op
  std::vector<int64_t> items_row;            // row 1: [max_items, 2]
  int64_t count = -1;                        // row 2
  std::vector<uint8_t*> rows;
  ScratchArena scratch;
  // Rows 1 (when the list is not padded: the items, 2 int64s each) and 3 (u8 ragged).
  RaggedRows ragged{std::vector<size_t>{0, 2 * sizeof(int64_t), 0, 1},
                    std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {})};

  Fixture(const std::vector<std::string>& items, int max_items) {
    record.media.push_back(MediaRef{0, "single.jpg", 0, -1});
    sample.media.push_back(Sample::Item{0, *Buffer::CopyOf("s", 1), "single.jpg"});
    for (size_t i = 0; i < items.size(); ++i) {
      record.media.push_back(MediaRef{kListField, "item" + std::to_string(i), 0, -1});
      sample.media.push_back(Sample::Item{kListField,
                                          *Buffer::CopyOf(items[i].data(), items[i].size()),
                                          record.media.back().uri});
    }
    sample.record = &record;
    items_row.assign(static_cast<size_t>(max_items) * 2, -1);
    rows = {reinterpret_cast<uint8_t*>(other_row.data()),
            reinterpret_cast<uint8_t*>(items_row.data()), reinterpret_cast<uint8_t*>(&count),
            nullptr};
  }

  Status Run(const ForEachItemOp& op, uint64_t seed = 42) {
    SampleContext ctx;
    ctx.sample = &sample;
    ctx.sample_seed = seed;
    ctx.scratch = &scratch;
    ctx.values = values;
    ctx.rows = rows.data();
    ctx.ragged = &ragged;
    return op.Run(ctx);
  }

  // The items the op appended to row 1 (a list that is not padded).
  std::vector<int64_t> Items() const {
    const std::span<const uint8_t> b = ragged.bytes(1);
    std::vector<int64_t> out(b.size() / sizeof(int64_t));
    if (!b.empty()) std::memcpy(out.data(), b.data(), b.size());
    return out;
  }
};

enum class Layout { kPadded, kConcatenated };

ForEachItemOp MakeOp(int max_items, Layout layout = Layout::kPadded, bool ragged = false) {
  ForEachItemOp::Options o;
  o.list = "views";
  o.source_field = kListField;
  o.slot = kSlot;
  o.max_items = max_items;
  o.fields = {ForEachItemOp::ItemField{1, 2 * sizeof(int64_t), layout == Layout::kPadded}};
  o.count_row = 2;
  std::vector<std::unique_ptr<Op>> ops;
  ops.push_back(std::make_unique<ItemProbeOp>());
  if (ragged) ops.push_back(std::make_unique<RaggedProbeOp>());
  return ForEachItemOp(std::move(o), std::move(ops));
}

TEST(ForEachItemOp, ConcatenatedItemsAreAppendedOnePerItemWithNothingPadded) {
  const ForEachItemOp op = MakeOp(4, Layout::kConcatenated);
  Fixture f({"a", "b"}, 4);
  ASSERT_TRUE(f.Run(op).ok());
  EXPECT_EQ(f.count, 2);
  const std::vector<int64_t> items = f.Items();
  ASSERT_EQ(items.size(), 4u) << "two items of two int64s: none for the missing ones";
  EXPECT_EQ(items[0], 'a');
  EXPECT_EQ(items[2], 'b');
  EXPECT_EQ(f.ragged.rows(1), 2);
  EXPECT_EQ(f.items_row, std::vector<int64_t>(8, -1)) << "the padded row is not written";

  Fixture none({}, 4);
  ASSERT_TRUE(none.Run(op).ok());
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.ragged.rows(1), 0);
}

TEST(ForEachItemOp, ARaggedFieldOfAListGetsOneEntryPerItem) {
  const ForEachItemOp op = MakeOp(4, Layout::kConcatenated, /*ragged=*/true);
  Fixture f({"abc", "z", "hi"}, 4);
  ASSERT_TRUE(f.Run(op).ok());
  const std::span<const uint8_t> rows = f.ragged.bytes(3);
  EXPECT_EQ(std::string(rows.begin(), rows.end()), "abczhi");
  const std::span<const int32_t> lengths = f.ragged.lengths(3);
  EXPECT_EQ(std::vector<int32_t>(lengths.begin(), lengths.end()),
            (std::vector<int32_t>{3, 1, 2}));
}

TEST(ForEachItemOp, RunsItsOpsOncePerItemIntoTheItemsRowsAndZeroFillsTheRest) {
  const ForEachItemOp op = MakeOp(4);
  EXPECT_EQ(op.name(), "views[*]: probe");
  Fixture f({"a", "b"}, 4);
  ASSERT_TRUE(f.Run(op).ok());
  EXPECT_EQ(f.count, 2);
  EXPECT_EQ(f.items_row[0], 'a');
  EXPECT_EQ(f.items_row[2], 'b');
  EXPECT_NE(f.items_row[1], f.items_row[3]) << "each item has its own random stream";
  EXPECT_EQ(std::vector<int64_t>(f.items_row.begin() + 4, f.items_row.end()),
            std::vector<int64_t>(4, 0));
  EXPECT_EQ(f.other_row[0], 7) << "rows of other fields untouched";
  EXPECT_TRUE(std::holds_alternative<std::monostate>(f.values[kSlot])) << "items die with it";
  // The list's images went to the nested arena: the sample's own slots hold nothing.
  EXPECT_GT(f.scratch.capacity(), 0u);
  EXPECT_EQ(f.scratch.Nested().capacity(), f.scratch.capacity());

  // Deterministic per (sample seed, item): the same again; another seed differs.
  Fixture again({"a", "b"}, 4);
  ASSERT_TRUE(again.Run(op).ok());
  EXPECT_EQ(again.items_row, f.items_row);
  Fixture other({"a", "b"}, 4);
  ASSERT_TRUE(other.Run(op, 43).ok());
  EXPECT_NE(other.items_row[1], f.items_row[1]);
}

TEST(ForEachItemOp, ASampleWithNoItemsIsAllZerosAndCountZero) {
  const ForEachItemOp op = MakeOp(3);
  Fixture f({}, 3);
  ASSERT_TRUE(f.Run(op).ok());
  EXPECT_EQ(f.count, 0);
  EXPECT_EQ(f.items_row, std::vector<int64_t>(6, 0));
}

TEST(ForEachItemOp, AFailingItemNamesItsPositionAndUri) {
  const ForEachItemOp op = MakeOp(3);
  Fixture f({"a", "bad", "c"}, 3);
  const Status st = f.Run(op);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData);
  EXPECT_THAT(st.message(), HasSubstr("views[1] item1: not an item"));
}

TEST(ScratchArena, TheNestedArenaCountsAndTrimsWithItsParent) {
  ScratchUsage usage;
  ScratchArena arena;
  arena.Account(&usage);
  ASSERT_NE(arena.Get(0, 1000), nullptr);
  ASSERT_NE(arena.Nested().Get(0, 5000), nullptr);
  EXPECT_EQ(static_cast<size_t>(usage.held()), arena.capacity());
  EXPECT_GE(arena.capacity(), 6000u);
  arena.Trim(2000);  // the nested slot is the largest: it goes first
  EXPECT_EQ(arena.Nested().capacity(), 0u);
  EXPECT_GT(arena.capacity(), 0u);
  EXPECT_EQ(static_cast<size_t>(usage.held()), arena.capacity());
}

// --- planning: what makes an op run over a list's items -------------------------------

PlanState ListAndSingle() {
  PlanState state;
  state.values.push_back(PlanValue{"views", ValueDesc{ValueKind::kEncoded, {}, "", 3},
                                   "the source field 'views'", -1, kListField, false,
                                   kListField});
  state.values.push_back(PlanValue{"image", ValueDesc{ValueKind::kEncoded, {}, ""},
                                   "the source field 'image'", -1, 0, false});
  state.ops.resize(1);
  state.ops[0].key = "ops[0].probe";
  state.list_counts = {"", "views_count"};
  return state;
}

TEST(PlanContext, AnOpReadingAListItemIsMappedAndItsOutputsAreItems) {
  PlanState state = ListAndSingle();
  PlanContext ctx(state, 0);
  ASSERT_TRUE(ctx.Read("views", ValueKind::kEncoded).ok());
  ASSERT_TRUE(ctx.Write("views", ValueDesc{ValueKind::kImage, {8, 8, 3}, "x"}).ok());
  ctx.AddField(FieldSpec{"views", DType::kF32, {3, 8, 8}}, "x");
  ctx.FinishDeclare();
  EXPECT_EQ(state.ops[0].list_field, kListField);
  EXPECT_EQ(state.values[0].desc.items, 3);
  EXPECT_EQ(state.values[0].list_field, kListField);
  // The items concatenated over the batch, each of the op's shape.
  EXPECT_EQ(state.fields[0].layout, FieldLayout::kItems);
  EXPECT_EQ(state.fields[0].sample_shape, (std::vector<int64_t>{3, 8, 8}));
  EXPECT_EQ(state.fields[0].count_field, "views_count");
  EXPECT_EQ(DescribeValue(state.values[0].desc), "a list of up to 3 items, each an image");
}

TEST(PlanContext, APaddedListsFieldsAreMaxItemsPerSample) {
  PlanState state = ListAndSingle();
  state.pad_items = {false, true};  // source field 1, the list, pads its items
  PlanContext ctx(state, 0);
  ASSERT_TRUE(ctx.Read("views", ValueKind::kEncoded).ok());
  ASSERT_TRUE(ctx.Write("views", ValueDesc{ValueKind::kImage, {8, 8, 3}, "x"}).ok());
  ctx.AddField(FieldSpec{"views", DType::kF32, {3, 8, 8}}, "x");
  ctx.FinishDeclare();
  EXPECT_EQ(state.fields[0].layout, FieldLayout::kFixed);
  EXPECT_EQ(state.fields[0].sample_shape, (std::vector<int64_t>{3, 3, 8, 8}));
}

TEST(PlanContext, ARaggedFieldGetsItsLengthsAndStaysRaggedInAList) {
  for (bool pad : {false, true}) {
    PlanState state = ListAndSingle();
    state.pad_items = {false, pad};
    PlanContext ctx(state, 0);
    ASSERT_TRUE(ctx.Read("views", ValueKind::kEncoded).ok());
    ctx.AddField(FieldSpec{"patches", DType::kF32, {12}, FieldLayout::kRagged}, "x");
    ctx.FinishDeclare();
    ASSERT_EQ(state.fields.size(), 2u);
    EXPECT_EQ(state.fields[0].layout, FieldLayout::kRagged);
    EXPECT_EQ(state.fields[0].sample_shape, std::vector<int64_t>{12});
    EXPECT_EQ(state.fields[1].name, "patches_lengths");
    EXPECT_EQ(state.fields[1].layout, FieldLayout::kLengths);
    EXPECT_EQ(state.fields[1].dtype, DType::kI32);
    EXPECT_EQ(state.fields[0].count_field, "views_count");
    EXPECT_EQ(state.fields[1].count_field, "views_count");
    EXPECT_EQ(ctx.row("patches_lengths"), -1) << "the assemble stage writes it, not the op";
  }
}

TEST(PlanContext, AnOpCannotMixAListsItemsWithASingleValue) {
  for (bool list_first : {true, false}) {
    PlanState state = ListAndSingle();
    PlanContext ctx(state, 0);
    const char* first = list_first ? "views" : "image";
    const char* second = list_first ? "image" : "views";
    ASSERT_TRUE(ctx.Read(first, ValueKind::kEncoded).ok());
    const Status st = ctx.Read(second, ValueKind::kEncoded).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("ops[0].probe: reads '" + std::string(second) + "'"));
    EXPECT_THAT(st.message(), HasSubstr("once per item of one list, or once per sample"));
  }
}

TEST(PlanContext, CodeOpsThatTakeEveryImageSkipListItems) {
  PlanState state = ListAndSingle();
  state.values[0].desc.kind = ValueKind::kImage;
  state.values[1].desc.kind = ValueKind::kImage;
  PlanContext ctx(state, 0);
  EXPECT_EQ(ctx.ReadEvery(ValueKind::kImage), std::vector<std::string>{"image"});
  EXPECT_EQ(state.ops[0].list_field, -1);
}

}  // namespace
}  // namespace headrace
