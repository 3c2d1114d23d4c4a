#include "headrace/pipeline/plan.h"

#include "headrace/pipeline/config.h"
#include "headrace/ops/for_each_item.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace headrace {
namespace {

using ::testing::HasSubstr;

// Serves objects from memory and records what was asked of it.
class MapStorage final : public Storage {
 public:
  void ReadAsync(std::string uri, ReadCallback done) override {
    {
      std::lock_guard lock(mu_);
      asked_.push_back(uri);
    }
    auto it = objects_.find(uri);
    if (it == objects_.end()) return done(Status::NotFound("no such object: " + uri));
    if (it->second == "<io error>") return done(Status::IoError("GET " + uri + ": HTTP 503"));
    done(*Buffer::CopyOf(it->second.data(), it->second.size()));
  }
  std::string_view name() const override { return "map"; }

  std::map<std::string, std::string> objects_;
  std::mutex mu_;
  std::vector<std::string> asked_;  // guarded by mu_
};

PipelineSpec TokenizeOnly(const std::string& model) {
  PipelineSpec spec;
  spec.source.manifest = "s3://b/m.jsonl";
  TokenizeSpec tokenize;
  tokenize.model = model;
  spec.ops = {tokenize};
  return spec;
}

TEST(PlanPipeline, ReadsTheTokenizerModelThroughTheStorage) {
  MapStorage storage;
  storage.objects_["s3://b/tok.model"] = "not a model proto";
  Result<PipelinePlan> plan = PlanPipeline(TokenizeOnly("s3://b/tok.model"), storage);
  EXPECT_EQ(storage.asked_, std::vector<std::string>{"s3://b/tok.model"});
  // The bytes arrived and were parsed: SentencePiece rejects them, naming key and URI.
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("ops[0]"));
  EXPECT_THAT(plan.status().message(), HasSubstr("text.tokenize.model"));
  EXPECT_THAT(plan.status().message(), HasSubstr("s3://b/tok.model"));
}

TEST(PlanPipeline, AMissingModelIsAConfigErrorNamingTheKeyAndUri) {
  MapStorage storage;
  Result<PipelinePlan> plan = PlanPipeline(TokenizeOnly("s3://b/none.model"), storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("ops[0]: text.tokenize.model: cannot read 's3://b/none.model'"));
}

TEST(PlanPipeline, AModelThatCannotBeFetchedKeepsItsIoError) {
  MapStorage storage;
  storage.objects_["https://h/tok.model"] = "<io error>";
  Result<PipelinePlan> plan = PlanPipeline(TokenizeOnly("https://h/tok.model"), storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kIoError);
  EXPECT_THAT(plan.status().message(), HasSubstr("text.tokenize.model"));
  EXPECT_THAT(plan.status().message(), HasSubstr("HTTP 503"));
}

// --- the declaration passes -------------------------------------------------------------

PipelineSpec ImageSpec(std::vector<OpSpec> ops) {
  PipelineSpec spec;
  spec.source.manifest = "m.jsonl";
  spec.ops = std::move(ops);
  return spec;
}

const DecodeOp& DecodeAt(const PipelinePlan& plan, size_t i) {
  const auto* decode = dynamic_cast<const DecodeOp*>(plan.chains.at(0).ops.at(i).get());
  EXPECT_NE(decode, nullptr);
  return *decode;
}

TEST(PlanPipeline, ResizeTellsDecodeItsSizeThroughAFlip) {
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(
      ImageSpec({DecodeSpec{}, FlipSpec{}, ResizeSpec{.shorter_side = 64},
                 CenterCropSpec{.width = 56, .height = 56}, NormalizeSpec{}}),
      *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(DecodeAt(*plan, 0).target().min_shorter_side, 64);
  EXPECT_TRUE(plan->reads_media);
  ASSERT_EQ(plan->fields.size(), 1u);
  EXPECT_EQ(plan->fields[0].name, "image");
  EXPECT_EQ(plan->fields[0].sample_shape, (std::vector<int64_t>{3, 56, 56}));
  EXPECT_EQ(plan->field_sources[0], "ops[3].image.center_crop.size 56");
  // The engine fills the image's encoded bytes, in the slot the ops use.
  ASSERT_EQ(plan->chains.at(0).source_values.size(), 1u);
  EXPECT_EQ(plan->chains.at(0).source_values[0].from, SourceValue::From::kMedia);
  EXPECT_EQ(plan->chains.at(0).num_values, 2);  // image, conversation
}

TEST(PlanPipeline, ExactResizeSetsTheHintAndTheFieldShape) {
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(
      ImageSpec({DecodeSpec{}, ResizeSpec{.width = 300, .height = 200},
                 NormalizeSpec{.layout = Layout::kHWC}}),
      *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(DecodeAt(*plan, 0).target().min_width, 300);
  EXPECT_EQ(DecodeAt(*plan, 0).target().min_height, 200);
  EXPECT_EQ(plan->fields[0].sample_shape, (std::vector<int64_t>{200, 300, 3}));
  EXPECT_EQ(plan->field_sources[0], "ops[1].image.resize.width 300, height 200");
}

TEST(PlanPipeline, AnOpThatNeedsNativePixelsStopsTheHint) {
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(
      ImageSpec({DecodeSpec{}, CenterCropSpec{.width = 100, .height = 100},
                 ResizeSpec{.width = 50, .height = 50}, NormalizeSpec{}}),
      *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_FALSE(DecodeAt(*plan, 0).target().any());
}

TEST(PlanPipeline, NormalizeNeedsAFixedSizeAndNamesWhatIsMissing) {
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(
      ImageSpec({DecodeSpec{}, ResizeSpec{.shorter_side = 64}, NormalizeSpec{}}), *storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("ops[2].image.normalize: the image size is not fixed here "
                        "(ops[1].image.resize.shorter_side 64 (keeps each image's aspect "
                        "ratio)): add image.center_crop, image.random_resized_crop or an "
                        "exact image.resize before it"));
}

TEST(PlanPipeline, AnImageIsReadableAfterNormalize) {
  std::vector<std::pair<std::string, int>> seen;
  UserOpSpec user;
  user.name = "test.reads_image";
  user.fields = {FieldSpec{"extra", DType::kU8, {1}}};
  user.make = [&seen](const UserOpBinding& at) -> Result<std::unique_ptr<Op>> {
    seen = at.images;
    return std::unique_ptr<Op>();  // refused below: the binding is what this test wants
  };
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(
      ImageSpec({DecodeSpec{}, CenterCropSpec{.width = 8, .height = 8}, NormalizeSpec{}, user}),
      *storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("ops[3].user: the op factory returned no op"));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, "image");
}

TEST(PlanPipeline, AnOutputThatNoOpReadsIsThrownAwayWork) {
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(
      ImageSpec({DecodeSpec{}, CenterCropSpec{.width = 8, .height = 8}, NormalizeSpec{},
                 FlipSpec{}}),
      *storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("ops[3].image.flip: writes 'image', which no later op reads"));
  // A decode whose image nothing turns into a batch field.
  plan = PlanPipeline(ImageSpec({DecodeSpec{}, TokenizeSpec{.model = "m"}}), *storage);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("ops[0].image.decode: writes 'image', which no later op reads"));
}

TEST(CheckOpChain, TwoTokenizeOpsNeedDistinctFieldNames) {
  PipelineSpec spec = ImageSpec({TokenizeSpec{.model = "m"}, TokenizeSpec{.model = "m"}});
  const Status clash = CheckOpChain(spec);
  EXPECT_THAT(clash.message(),
              HasSubstr("ops[1].text.tokenize: writes the field 'input_ids', which "
                        "ops[0].text.tokenize writes too"));
  std::get<TokenizeSpec>(spec.ops[1]).output_prefix = "b_";
  EXPECT_TRUE(CheckOpChain(spec).ok()) << CheckOpChain(spec).ToString();
}

// A source with two image fields: two chains, each from its own field, plan side by side;
// the engine fills both.
TEST(PlanPipeline, TwoChainsOverTwoSourceFields) {
  PipelineSpec spec = ImageSpec({
      DecodeSpec{},
      DecodeSpec{.field = "depth"},
      CenterCropSpec{.width = 24, .height = 24},
      ResizeSpec{.width = 16, .height = 16, .field = "depth"},
      NormalizeSpec{},
      NormalizeSpec{.field = "depth"},
  });
  spec.source.fields = {SourceFieldSpec{.name = "image", .kind = FieldKind::kImage},
                        SourceFieldSpec{.name = "depth", .kind = FieldKind::kImage},
                        SourceFieldSpec{.name = "conversation", .kind = FieldKind::kConversation,
                                        .key = "conversations"}};
  ASSERT_TRUE(ValidatePipelineSpec(spec).ok()) << ValidatePipelineSpec(spec).ToString();
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(spec, *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->chains.at(0).source_values.size(), 2u);  // no op reads the conversation
  EXPECT_EQ(plan->chains.at(0).source_values[0].field, 0);
  EXPECT_EQ(plan->chains.at(0).source_values[1].field, 1);
  EXPECT_NE(plan->chains.at(0).source_values[0].slot, plan->chains.at(0).source_values[1].slot);
  EXPECT_TRUE(plan->reads_media);
  EXPECT_EQ(DecodeAt(*plan, 1).target().min_width, 16);
  EXPECT_FALSE(DecodeAt(*plan, 0).target().any());
  // Normalizing 'depth' before it is decoded names what is there.
  std::swap(spec.ops[1], spec.ops[5]);
  const Status early = ValidatePipelineSpec(spec);
  EXPECT_THAT(early.message(),
              HasSubstr("ops[1].image.normalize: reads 'depth' as an image, but at this point "
                        "'depth' is encoded bytes (from the source field 'depth'): add "
                        "image.decode before it"));
}

// A list of media: the ops over its items become one ForEachItemOp at the place of the
// last of them, its fields [max_items, ...] plus `<list>_count`; the resize still tells
// the decode of each item its size; the single image's chain is planned as before.
TEST(PlanPipeline, OpsOverAListOfMediaRunPerItemWithListShapedFields) {
  PipelineSpec spec = ImageSpec({
      DecodeSpec{.field = "views"},
      DecodeSpec{},
      ResizeSpec{.width = 16, .height = 16, .field = "views"},
      CenterCropSpec{.width = 24, .height = 24},
      NormalizeSpec{.field = "views"},
      NormalizeSpec{},
  });
  spec.source.fields = {SourceFieldSpec{.name = "image", .kind = FieldKind::kImage},
                        SourceFieldSpec{.name = "views", .kind = FieldKind::kImage,
                                        .max_items = 3}};
  ASSERT_TRUE(ValidatePipelineSpec(spec).ok()) << ValidatePipelineSpec(spec).ToString();
  auto storage = MakeLocalStorage();
  Result<PipelinePlan> plan = PlanPipeline(spec, *storage);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->chains.at(0).ops.size(), 4u);  // decode(image), center_crop, [views ops], normalize
  EXPECT_EQ(plan->chains.at(0).ops[2]->name(), "views[*]: image.decode, image.resize, image.normalize");
  const auto& each = dynamic_cast<const ForEachItemOp&>(*plan->chains.at(0).ops[2]);
  EXPECT_EQ(dynamic_cast<const DecodeOp&>(*each.ops()[0]).target().min_width, 16);
  EXPECT_FALSE(DecodeAt(*plan, 0).target().any());
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, FieldLayout> layouts;
  for (const FieldSpec& f : plan->fields) {
    shapes[f.name] = f.sample_shape;
    layouts[f.name] = f.layout;
  }
  // The list's items are concatenated over the batch; its count says whose they are.
  EXPECT_EQ(shapes["views"], (std::vector<int64_t>{3, 16, 16}));
  EXPECT_EQ(layouts["views"], FieldLayout::kItems);
  EXPECT_EQ(shapes["image"], (std::vector<int64_t>{3, 24, 24}));
  EXPECT_EQ(layouts["image"], FieldLayout::kFixed);
  ASSERT_TRUE(shapes.count("views_count"));
  EXPECT_EQ(shapes["views_count"], std::vector<int64_t>{});
  EXPECT_TRUE(plan->reads_media);
  ASSERT_EQ(plan->chains.at(0).source_values.size(), 1u) << "the list's items are filled per item";

  // pad_items: [max_items, ...] per sample, as a fixed field.
  spec.source.fields[1].pad_items = true;
  Result<PipelinePlan> padded = PlanPipeline(spec, *storage);
  ASSERT_TRUE(padded.ok()) << padded.status().ToString();
  for (const FieldSpec& f : padded->fields) {
    if (f.name != "views") continue;
    EXPECT_EQ(f.sample_shape, (std::vector<int64_t>{3, 3, 16, 16}));
    EXPECT_EQ(f.layout, FieldLayout::kFixed);
  }
  spec.source.fields[0].pad_items = true;  // not a list
  EXPECT_THAT(ValidatePipelineSpec(spec).message(),
              HasSubstr("source.fields[0].pad_items: pads a media list"));
  spec.source.fields[0].pad_items = false;
  spec.source.fields[1].pad_items = false;

  // Normalizing the list before its items have a fixed size says so, naming the list.
  spec.ops = {DecodeSpec{.field = "views"}, NormalizeSpec{.field = "views"}};
  EXPECT_THAT(ValidatePipelineSpec(spec).message(),
              HasSubstr("ops[1].image.normalize: the image size is not fixed here"));
  // Reading the list as an image before decoding it names it as a list.
  spec.ops = {NormalizeSpec{.field = "views"}};
  EXPECT_THAT(ValidatePipelineSpec(spec).message(),
              HasSubstr("'views' is a list of up to 3 items, each encoded bytes"));
}

// Two chains over two media fields plan side by side, each with its own slot, field and
// hint. The source here is built by hand (today's manifest source has one media field).
TEST(PlanOps, TwoChainsOverTwoFields) {
  PlanState state;
  for (const char* name : {"image", "depth"}) {
    state.values.push_back(PlanValue{name, ValueDesc{ValueKind::kEncoded, {}, ""},
                                     std::string("the source field '") + name + "'", -1,
                                     static_cast<int>(state.values.size()), false});
  }
  const std::vector<OpSpec> ops = {
      DecodeSpec{},
      DecodeSpec{.field = "depth"},
      CenterCropSpec{.width = 24, .height = 24},
      ResizeSpec{.width = 16, .height = 16, .field = "depth"},
      NormalizeSpec{},
      NormalizeSpec{.field = "depth"},
  };
  std::vector<std::unique_ptr<Op>> built;
  ASSERT_TRUE(internal::PlanOps(ops, state, &built).ok());
  ASSERT_EQ(built.size(), ops.size());
  ASSERT_EQ(state.fields.size(), 2u);
  EXPECT_EQ(state.fields[0].name, "image");
  EXPECT_EQ(state.fields[0].sample_shape, (std::vector<int64_t>{3, 24, 24}));
  EXPECT_EQ(state.fields[1].name, "depth");
  EXPECT_EQ(state.fields[1].sample_shape, (std::vector<int64_t>{3, 16, 16}));
  EXPECT_FALSE(dynamic_cast<const DecodeOp&>(*built[0]).target().any());
  EXPECT_EQ(dynamic_cast<const DecodeOp&>(*built[1]).target().min_width, 16);
  EXPECT_EQ(state.source_slots, (std::vector<int>{0, 1}));
}

// image.smart_resize asks image.decode for full-resolution pixels and gives it its
// max_aspect_ratio, which the decode applies to the header.
TEST(PlanOps, SmartResizesAspectRatioReachesTheDecode) {
  PlanState state;
  state.values.push_back(PlanValue{"image", ValueDesc{ValueKind::kEncoded, {}, ""},
                                   "the source field 'image'", -1, 0, false});
  const std::vector<OpSpec> ops = {DecodeSpec{},
                                   SmartResizeSpec{.preset = VisionModel::kQwen2Vl,
                                                   .max_aspect_ratio = 150},
                                   PatchifySpec{.preset = VisionModel::kQwen2Vl}};
  std::vector<std::unique_ptr<Op>> built;
  const Status planned = internal::PlanOps(ops, state, &built);
  ASSERT_TRUE(planned.ok()) << planned.ToString();
  const DecodeTarget& target = dynamic_cast<const DecodeOp&>(*built[0]).target();
  EXPECT_EQ(target.max_aspect_ratio, 150);
  EXPECT_FALSE(target.any()) << "full resolution: no DCT scaling";
}

// audio.decode learns the window audio.crop or audio.melspectrogram reads, when that is
// all the later ops read of the audio: it then decodes about that window only.
TEST(PlanOps, AnAudioWindowReadAloneReachesTheDecode) {
  const auto window_of = [](const std::vector<OpSpec>& ops) {
    PlanState state;
    for (const char* name : {"audio", "image"}) {
      state.values.push_back(PlanValue{name, ValueDesc{ValueKind::kEncoded, {}, ""},
                                       std::string("the source field '") + name + "'", -1,
                                       static_cast<int>(state.values.size()), false});
    }
    std::vector<std::unique_ptr<Op>> built;
    const Status planned = internal::PlanOps(ops, state, &built);
    EXPECT_TRUE(planned.ok()) << planned.ToString();
    return planned.ok() ? dynamic_cast<const AudioDecodeOp&>(*built[0]).window()
                        : AudioWindowHint{};
  };
  const AudioDecodeSpec decode{.sample_rate = 16000, .channels = 1};
  AudioWindowHint w = window_of({decode, AudioCropSpec{.seconds = 2}});
  EXPECT_EQ(w.seconds, 2);
  EXPECT_EQ(w.start, ClipStart::kRandom);
  EXPECT_EQ(w.rng_op, 1) << "the crop's random stream places it";
  // Ops on other values between them change nothing.
  w = window_of({decode, DecodeSpec{.field = "image"},
                 CenterCropSpec{.width = 8, .height = 8, .field = "image"},
                 NormalizeSpec{.field = "image"},
                 AudioCropSpec{.seconds = 1.5, .start = ClipStart::kCenter}});
  EXPECT_EQ(w.seconds, 1.5);
  EXPECT_EQ(w.start, ClipStart::kCenter);
  EXPECT_EQ(w.rng_op, 4);
  w = window_of({decode, AudioMelSpectrogramSpec{.seconds = 3}});
  EXPECT_EQ(w.seconds, 3);
  EXPECT_EQ(w.rng_op, 1);
  // Two windows, or a reader of the whole audio after the crop: all of it.
  EXPECT_FALSE(window_of({decode, AudioCropSpec{.seconds = 2},
                          AudioCropSpec{.seconds = 1, .output = "short"}})
                   .any());
  EXPECT_FALSE(window_of({decode, AudioCropSpec{.seconds = 2},
                          AudioResampleSpec{.sample_rate = 8000},
                          AudioCropSpec{.seconds = 1, .output = "low"}})
                   .any());
  // Nor when the rate the window is measured in is not the decode's.
  EXPECT_FALSE(window_of({AudioDecodeSpec{.channels = 1}, AudioResampleSpec{},
                          AudioCropSpec{.seconds = 2}})
                   .any());
}

}  // namespace
}  // namespace headrace
