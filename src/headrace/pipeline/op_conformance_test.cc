// The operator conformance battery: every op of ops/all_ops.h, built from its own
// ExampleSpec the way the planner builds it (the values it reads are made up to match
// its declaration), must
//   - be deterministic per sample key: the same sample and seed give the same bytes in
//     every batch row and written value, in another context, after other samples, on
//     another thread;
//   - answer bad input with a non-ok Status, never a crash: a value it reads that the
//     sample lacks, encoded bytes that are corrupt, truncated or empty (and survive odd
//     images and an empty conversation);
//   - write nothing outside its batch rows (guard bytes on both sides of each row,
//     poisoned under ASan so that the write itself is caught) and nothing into its
//     inputs.
// A new op is covered as soon as it is in the list.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <mutex>
#include <sentencepiece_trainer.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "headrace/ops/all_ops.h"
#include "headrace/ops/chain_runner.h"
#include "headrace/ops/image/image_test_util.h"
#include "headrace/pipeline/op_types.h"
#include "headrace/pipeline/plan.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define HR_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define HR_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define HR_POISON(p, n) ((void)(p), (void)(n))
#define HR_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace headrace {
namespace {

using Bytes = testing::Bytes;

// The model file ExampleSpecs may name ("example.model"): a small chat tokenizer.
const std::string& ExampleModel() {
  static const std::string model = [] {
    class Sentences : public sentencepiece::SentenceIterator {
     public:
      bool done() const override { return i_ >= 60; }
      void Next() override { ++i_; }
      const std::string& value() const override {
        value_ = "what is in picture " + std::to_string(i_) + "? a red square and a blue " +
                 "circle, next to " + std::to_string(i_ * 7) + " green dots.";
        return value_;
      }
      sentencepiece::util::Status status() const override { return {}; }

     private:
      int i_ = 0;
      mutable std::string value_;
    } sentences;
    std::string serialized;
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        {{"model_type", "bpe"},
         {"vocab_size", "120"},
         {"hard_vocab_limit", "false"},
         {"character_coverage", "1.0"},
         {"user_defined_symbols", "<|system|>,<|user|>,<|assistant|>"},
         {"unk_id", "0"},
         {"bos_id", "1"},
         {"eos_id", "2"},
         {"pad_id", "3"},
         {"add_dummy_prefix", "false"},
         {"remove_extra_whitespaces", "false"},
         {"minloglevel", "2"},
         {"num_threads", "1"}},
        &sentences, &serialized);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return serialized;
  }();
  return model;
}

// One op planned alone, with the inputs it declared.
struct Planned {
  PlanState state;
  std::vector<std::unique_ptr<Op>> ops;
  // The op's own encoded input (T::ExampleInput: a video for video.decode), if it has
  // one; else encoded inputs are JPEGs.
  std::function<Bytes(int index)> example_input;
  const PlanOpRecord& record() const { return state.ops.at(0); }
};

template <typename T>
std::unique_ptr<Planned> PlanAlone() {
  auto planned = std::make_unique<Planned>();
  planned->state.synthesize_inputs = true;
  planned->state.read_file = [](const std::string& uri) -> Result<Buffer> {
    if (uri != "example.model") return Status::NotFound("no such file: " + uri);
    return Buffer::CopyOf(ExampleModel().data(), ExampleModel().size());
  };
  const Status status =
      internal::PlanOps({OpSpec(T::ExampleSpec())}, planned->state, &planned->ops);
  EXPECT_TRUE(status.ok()) << T::kName << ": " << status.ToString();
  if (!status.ok()) return nullptr;
  EXPECT_EQ(planned->ops.size(), 1u);
  EXPECT_EQ(planned->ops[0]->name(), T::kName);
  if constexpr (requires { T::ExampleInput(0); }) {
    planned->example_input = [](int index) {
      static std::mutex mu;
      static std::map<int, Bytes> made;  // encoding is slow next to the op: once per index
      std::lock_guard lock(mu);
      auto it = made.find(index);
      if (it == made.end()) {
        const auto bytes = T::ExampleInput(index);
        it = made.emplace(index, Bytes(bytes.begin(), bytes.end())).first;
      }
      return it->second;
    };
  }
  return planned;
}

// What an input value holds for one sample, owned here.
struct Input {
  ValueKind kind;
  Bytes encoded;
  Image image;
  std::vector<Turn> turns;
  std::vector<float> samples;  // audio: planar; points: kPointChannels per point
  int channels = 0;
  int rate = 0;

  Value AsValue() const {
    switch (kind) {
      case ValueKind::kEncoded: return EncodedBytes{encoded.data(), encoded.size()};
      case ValueKind::kImage: return image.view();
      case ValueKind::kConversation: return TurnsView{turns};
      case ValueKind::kAudio:
        return AudioView{samples.data(), channels,
                         channels > 0 ? static_cast<int64_t>(samples.size()) / channels : 0, rate};
      case ValueKind::kPoints:
        return PointsView{samples.data(), static_cast<int64_t>(samples.size()) / kPointChannels,
                          kPointChannels};
    }
    return {};
  }
  // Its content, to check that the op left it alone.
  Bytes Content() const {
    switch (kind) {
      case ValueKind::kEncoded: return encoded;
      case ValueKind::kImage: return testing::PixelsOf(image.view());
      case ValueKind::kConversation: {
        Bytes out;
        for (const Turn& t : turns) out.insert(out.end(), t.text.begin(), t.text.end());
        return out;
      }
      case ValueKind::kAudio:
      case ValueKind::kPoints: {
        const auto* p = reinterpret_cast<const uint8_t*>(samples.data());
        return Bytes(p, p + samples.size() * sizeof(float));
      }
    }
    return {};
  }
};

// A well-formed input of `kind` for sample `index` (content differs per sample).
Input GoodInput(ValueKind kind, int index, const Planned& planned) {
  Input in{kind, {}, {}, {}};
  const auto pixel = [index](int x, int y, int c) {
    return static_cast<uint8_t>((x * 7 + y * 13 + c * 50 + index * 31) & 0xFF);
  };
  switch (kind) {
    case ValueKind::kEncoded:
      in.encoded = planned.example_input
                       ? planned.example_input(index)
                       : testing::EncodeJpegRgb(kSynthImageWidth, kSynthImageHeight, pixel);
      break;
    case ValueKind::kImage: {
      in.image = *Image::Allocate(kSynthImageWidth, kSynthImageHeight, 4);
      const MutableImageView v = in.image.mutable_view();
      for (int y = 0; y < v.height; ++y) {
        for (int x = 0; x < v.width; ++x) {
          for (int c = 0; c < 4; ++c) v.row(y)[x * 4 + c] = pixel(x, y, c);
        }
      }
      break;
    }
    case ValueKind::kConversation:
      in.turns = {Turn{Role::kUser, "what is in picture " + std::to_string(index) + "?"},
                  Turn{Role::kAssistant, "a red square and " + std::to_string(index) + " dots."}};
      break;
    case ValueKind::kAudio:  // a quarter second of a tone at the rate the op was planned for
      in.channels = 1;
      in.rate = kSynthAudioRate;
      for (int i = 0; i < kSynthAudioRate / 4; ++i) {
        in.samples.push_back(static_cast<float>(std::sin(0.05 * (index + 1) * i)));
      }
      break;
    case ValueKind::kPoints:  // 300 points on a spiral, some outside any sensible range
      for (int i = 0; i < 300; ++i) {
        const double r = 0.2 * i, a = 0.1 * i + index;
        in.samples.insert(in.samples.end(),
                          {static_cast<float>(r * std::cos(a)), static_cast<float>(r * std::sin(a)),
                           static_cast<float>(-2 + 0.01 * i), static_cast<float>(i % 7) / 7});
      }
      break;
  }
  return in;
}

constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;

// A sample's batch rows, each with guard bytes on both sides.
class GuardedRows {
 public:
  explicit GuardedRows(const std::vector<FieldSpec>& fields) {
    for (const FieldSpec& f : fields) {
      auto& block = blocks_.emplace_back(kGuard + f.sample_bytes() + kGuard, kGuardByte);
      sizes_.push_back(f.sample_bytes());
      rows_.push_back(block.data() + kGuard);
      HR_POISON(block.data(), kGuard);
      HR_POISON(block.data() + kGuard + f.sample_bytes(), kGuard);
    }
  }
  ~GuardedRows() {
    for (auto& block : blocks_) HR_UNPOISON(block.data(), block.size());
  }
  uint8_t* const* rows() const { return rows_.data(); }

  // Whether every guard byte is untouched; the rows' contents.
  bool GuardsIntact() {
    bool intact = true;
    for (size_t r = 0; r < blocks_.size(); ++r) {
      auto& block = blocks_[r];
      HR_UNPOISON(block.data(), block.size());
      for (size_t i = 0; i < kGuard; ++i) {
        intact &= block[i] == kGuardByte && block[kGuard + sizes_[r] + i] == kGuardByte;
      }
      HR_POISON(block.data(), kGuard);
      HR_POISON(block.data() + kGuard + sizes_[r], kGuard);
    }
    return intact;
  }
  std::vector<Bytes> Contents() const {
    std::vector<Bytes> out;
    for (size_t r = 0; r < rows_.size(); ++r) out.emplace_back(rows_[r], rows_[r] + sizes_[r]);
    return out;
  }

 private:
  std::vector<std::vector<uint8_t>> blocks_;
  std::vector<size_t> sizes_;
  std::vector<uint8_t*> rows_;
};

// What one run produced: its status, its rows, the values it wrote.
struct Output {
  Status status;
  std::vector<Bytes> rows;
  std::vector<Bytes> written;
  // With RunSample's `size_pass`: whether the op's Predict told, what it told (rows per
  // batch field, image sizes per value slot), and what its Run then appended and wrote.
  bool told = false;
  std::vector<int64_t> told_rows, appended_rows;
  std::vector<SizePass::Size> told_images, written_images;

  bool operator==(const Output& o) const {
    return status.code() == o.status.code() && rows == o.rows && written == o.written;
  }
};

Bytes ValueBytes(const Value& v) {
  if (const auto* image = std::get_if<ImageView>(&v)) return testing::PixelsOf(*image);
  if (const auto* bytes = std::get_if<EncodedBytes>(&v)) {
    return Bytes(bytes->data, bytes->data + bytes->size);
  }
  if (const auto* points = std::get_if<PointsView>(&v)) {
    const auto* p = reinterpret_cast<const uint8_t*>(points->data);
    return Bytes(p, p + points->count * points->channels * sizeof(float));
  }
  return {};
}

// Runs the op on one sample in `scratch` (a thread's arena, reused across samples as the
// executor does). `inputs` replace the good inputs of sample `index` where set (absent:
// the value is missing). Checks the guards and that no input changed.
Output RunSample(const Planned& planned, ScratchArena& scratch, int index, uint64_t seed,
                 const std::vector<std::optional<Input>>* inputs = nullptr,
                 bool size_pass = false) {
  const PlanOpRecord& record = planned.record();
  std::vector<std::optional<Input>> own;
  if (inputs == nullptr) {
    for (size_t i = 0; i < record.reads.size(); ++i) {
      own.emplace_back(GoodInput(record.inputs[i].kind, index, planned));
    }
    inputs = &own;
  }
  std::vector<Value> values(planned.state.values.size());
  std::vector<Bytes> before;
  for (size_t i = 0; i < record.reads.size(); ++i) {
    const auto& in = (*inputs)[i];
    if (in) values[static_cast<size_t>(record.reads[i].second)] = in->AsValue();
    before.push_back(in ? in->Content() : Bytes{});
  }
  SampleRecord sample_record;
  Sample sample;
  sample.index = index;
  sample.record = &sample_record;
  GuardedRows rows(planned.state.fields);
  // The rows of ragged fields (vision.patchify's pixel_values, text.tokenize pad: false).
  RaggedRows ragged(planned.state.fields,
                    std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {}));
  SampleContext ctx;
  ctx.sample = &sample;
  ctx.sample_seed = SampleSeed(seed, 0, index);
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows.rows();
  ctx.ragged = RaggedRows::Needed(planned.state.fields) ? &ragged : nullptr;
  Output out;
  if (size_pass) {
    // The sizes an earlier op would have told of the images it made: the inputs'.
    out.told_images.resize(values.size());
    for (size_t v = 0; v < values.size(); ++v) {
      if (const auto* image = std::get_if<ImageView>(&values[v])) {
        out.told_images[v] = {image->width, image->height};
      }
    }
    out.told_rows.assign(planned.state.fields.size(), 0);
    std::vector<std::vector<int64_t>> grids(planned.state.fields.size());
    SizePass pass{&ctx, out.told_images, out.told_rows, grids};
    out.told = planned.ops[0]->Predict(pass);
  }
  out.status = planned.ops[0]->Run(ctx);
  EXPECT_TRUE(rows.GuardsIntact()) << planned.ops[0]->name() << ": wrote outside its row";
  for (size_t i = 0; i < record.reads.size(); ++i) {
    const auto& in = (*inputs)[i];
    EXPECT_EQ(in ? in->Content() : Bytes{}, before[i])
        << planned.ops[0]->name() << ": changed its input '" << record.reads[i].first << "'";
  }
  if (out.status.ok()) {
    out.rows = rows.Contents();
    for (size_t f = 0; f < planned.state.fields.size(); ++f) {
      const FieldLayout layout = planned.state.fields[f].layout;
      if (layout != FieldLayout::kRagged && layout != FieldLayout::kItems) continue;
      const auto bytes = ragged.bytes(static_cast<int>(f));
      const auto lengths = ragged.lengths(static_cast<int>(f));
      out.rows.emplace_back(bytes.begin(), bytes.end());
      const auto* l = reinterpret_cast<const uint8_t*>(lengths.data());
      out.rows.emplace_back(l, l + lengths.size_bytes());
    }
    for (const auto& [name, slot] : record.writes) {
      out.written.push_back(ValueBytes(values[static_cast<size_t>(slot)]));
    }
    out.appended_rows.assign(planned.state.fields.size(), 0);
    for (size_t f = 0; f < planned.state.fields.size(); ++f) {
      const FieldSpec& field = planned.state.fields[f];
      if (field.layout != FieldLayout::kRagged || field.sample_bytes() == 0) continue;
      out.appended_rows[f] = static_cast<int64_t>(ragged.bytes(static_cast<int>(f)).size() /
                                                  field.sample_bytes());
    }
    out.written_images.resize(values.size());
    for (size_t v = 0; v < values.size(); ++v) {
      if (const auto* image = std::get_if<ImageView>(&values[v])) {
        out.written_images[v] = {image->width, image->height};
      }
    }
  }
  return out;
}

template <typename OpList>
struct TypesOf;
template <typename... Ops>
struct TypesOf<OpList<Ops...>> {
  using type = ::testing::Types<Ops...>;
};

struct OpTypeName {
  template <typename T>
  static std::string GetName(int) {
    std::string name(T::kName);
    for (char& c : name) {
      if (c == '.') c = '_';
    }
    return name;
  }
};

template <typename T>
class OpConformance : public ::testing::Test {};
TYPED_TEST_SUITE(OpConformance, TypesOf<AllOps>::type, OpTypeName);

TYPED_TEST(OpConformance, DeclaresWhatItReadsAndItsExampleRuns) {
  const auto planned = PlanAlone<TypeParam>();
  ASSERT_NE(planned, nullptr);
  // A value, or a batch field of an earlier op (vision.rope_index reads text.tokenize's
  // input_ids and vision.patchify's grids; here made up, with no rows).
  EXPECT_FALSE(planned->record().reads.empty() && planned->record().field_reads.empty())
      << "an op reads at least one value or batch field";
  EXPECT_TRUE(!planned->record().writes.empty() || !planned->state.fields.empty())
      << "an op writes a value or a batch field";
  EXPECT_TRUE(TypeParam::Validate(TypeParam::ExampleSpec(), std::string(TypeParam::kName)).ok());
  ScratchArena scratch;
  const Output out = RunSample(*planned, scratch, 0, 1);
  EXPECT_TRUE(out.status.ok()) << out.status.ToString();
}

// An op whose size pass tells (Op::Tells) tells exactly what its Run appends to each
// ragged batch field and the sizes of the images it writes: the rows a planned pack and
// ReserveRows count on (exec/pack_planner.h, ops/op.h SizePass).
TYPED_TEST(OpConformance, ItsSizePassTellsWhatItsRunAppends) {
  const auto planned = PlanAlone<TypeParam>();
  ASSERT_NE(planned, nullptr);
  if (planned->ops[0]->Tells() == Telling::kNothing) return;  // no promise to check
  ScratchArena scratch;
  int told = 0;
  for (int index = 0; index < 6; ++index) {
    const Output out = RunSample(*planned, scratch, index, 1, nullptr, /*size_pass=*/true);
    if (!out.status.ok() || !out.told) continue;
    ++told;
    for (size_t f = 0; f < out.told_rows.size(); ++f) {
      if (planned->state.fields[f].layout != FieldLayout::kRagged) continue;
      EXPECT_EQ(out.told_rows[f], out.appended_rows[f])
          << "sample " << index << ", field " << planned->state.fields[f].name;
    }
    for (const auto& [name, slot] : planned->record().writes) {
      const SizePass::Size made = out.written_images[static_cast<size_t>(slot)];
      if (made.width == 0) continue;  // not an image
      const SizePass::Size said = out.told_images[static_cast<size_t>(slot)];
      EXPECT_EQ(said.width, made.width) << "sample " << index << ", value " << name;
      EXPECT_EQ(said.height, made.height) << "sample " << index << ", value " << name;
    }
  }
  EXPECT_GT(told, 0) << "an op that says it tells told none of its example samples";
}

TYPED_TEST(OpConformance, IsDeterministicPerSampleKey) {
  const auto planned = PlanAlone<TypeParam>();
  ASSERT_NE(planned, nullptr);
  for (uint64_t seed : {1u, 2u, 99u}) {
    ScratchArena a;
    const Output first = RunSample(*planned, a, 3, seed);
    ASSERT_TRUE(first.status.ok()) << first.status.ToString();
    // Another context that ran other samples first (scratch slots in another state).
    ScratchArena b;
    for (int other : {7, 11, 2}) RunSample(*planned, b, other, seed);
    EXPECT_EQ(RunSample(*planned, b, 3, seed), first) << "seed " << seed;
    // Another thread.
    Output threaded;
    std::thread([&] {
      ScratchArena c;
      threaded = RunSample(*planned, c, 3, seed);
    }).join();
    EXPECT_EQ(threaded, first) << "seed " << seed;
  }
}

// An op whose output changes with the seed draws randomness, and must say so: a
// forgotten DrawsRandom makes `headrace materialize` write one copy for every epoch.
TYPED_TEST(OpConformance, AnOpWhoseOutputVariesWithTheSeedDeclaresDrawsRandom) {
  const auto planned = PlanAlone<TypeParam>();
  ASSERT_NE(planned, nullptr);
  bool varies = false;
  for (int index : {0, 3, 5, 8}) {
    ScratchArena scratch;
    const Output first = RunSample(*planned, scratch, index, 1);
    for (uint64_t seed : {2u, 99u, 12345u}) {
      varies |= !(RunSample(*planned, scratch, index, seed) == first);
    }
  }
  if (varies) {
    EXPECT_TRUE(OpDrawsRandom(OpSpec(TypeParam::ExampleSpec())))
        << TypeParam::kName << ": its output depends on the seed, but DrawsRandom says no";
  }
}

TYPED_TEST(OpConformance, AMissingInputIsAStatusNotACrash) {
  const auto planned = PlanAlone<TypeParam>();
  ASSERT_NE(planned, nullptr);
  const PlanOpRecord& record = planned->record();
  for (size_t missing = 0; missing < record.reads.size(); ++missing) {
    std::vector<std::optional<Input>> inputs;
    for (size_t i = 0; i < record.reads.size(); ++i) {
      if (i != missing) inputs.emplace_back(GoodInput(record.inputs[i].kind, 0, *planned));
      else inputs.emplace_back(std::nullopt);
    }
    ScratchArena scratch;
    const Output out = RunSample(*planned, scratch, 0, 1, &inputs);
    EXPECT_FALSE(out.status.ok()) << "without '" << record.reads[missing].first << "'";
  }
}

TYPED_TEST(OpConformance, BadInputIsAStatusNotACrash) {
  const auto planned = PlanAlone<TypeParam>();
  ASSERT_NE(planned, nullptr);
  const PlanOpRecord& record = planned->record();
  for (size_t bad = 0; bad < record.reads.size(); ++bad) {
    const ValueKind kind = record.inputs[bad].kind;
    // (input, must the op fail?)
    std::vector<std::pair<Input, bool>> cases;
    switch (kind) {
      case ValueKind::kEncoded: {
        const Bytes good = GoodInput(kind, 0, *planned).encoded;
        Input truncated{kind, Bytes(good.begin(), good.begin() + good.size() / 3), {}, {}};
        Input garbage{kind, Bytes(300, 0x5A), {}, {}};
        Input flipped{kind, good, {}, {}};
        for (size_t i = 20; i < flipped.encoded.size(); i += 7) flipped.encoded[i] ^= 0xFF;
        cases = {{Input{kind, {}, {}, {}}, true}, {truncated, true}, {garbage, true},
                 {flipped, false}};
        break;
      }
      case ValueKind::kImage: {
        Input tiny{kind, {}, *Image::Allocate(1, 1, 4), {}};
        Input rgb{kind, {}, *Image::Allocate(kSynthImageWidth, kSynthImageHeight, 3), {}};
        Input tall{kind, {}, *Image::Allocate(3, 500, 4), {}};
        cases = {{tiny, false}, {rgb, false}, {tall, false}};
        break;
      }
      case ValueKind::kConversation: {
        Input empty{kind, {}, {}, {}};
        Input huge{kind, {}, {}, {Turn{Role::kAssistant, std::string(100000, 'a')}}};
        cases = {{empty, false}, {huge, false}};
        break;
      }
      case ValueKind::kAudio: {
        Input none{kind, {}, {}, {}, {}, 1, kSynthAudioRate};
        Input one{kind, {}, {}, {}, {0.5f}, 1, kSynthAudioRate};
        Input loud{kind, {}, {}, {}, std::vector<float>(3 * kSynthAudioRate, 7.0f), 1,
                   kSynthAudioRate};
        cases = {{none, false}, {one, false}, {loud, false}};
        break;
      }
      case ValueKind::kPoints: {
        const float nan = std::nanf("");
        Input none{kind, {}, {}, {}, {}, kPointChannels};
        Input odd{kind, {}, {}, {}, {nan, 1, 2, 3, 1e30f, -1e30f, 0, 1, 0, 0, 0, 0}, kPointChannels};
        Input far{kind, {}, {}, {}, std::vector<float>(4000, 1e9f), kPointChannels};
        cases = {{none, false}, {odd, false}, {far, false}};
        break;
      }
    }
    for (size_t c = 0; c < cases.size(); ++c) {
      std::vector<std::optional<Input>> inputs;
      for (size_t i = 0; i < record.reads.size(); ++i) {
        inputs.emplace_back(i == bad ? cases[c].first
                                     : GoodInput(record.inputs[i].kind, 0, *planned));
      }
      ScratchArena scratch;
      const Output out = RunSample(*planned, scratch, 0, 1, &inputs);
      if (cases[c].second) {
        EXPECT_FALSE(out.status.ok()) << "case " << c << " of '" << record.reads[bad].first << "'";
      }
    }
  }
}

}  // namespace
}  // namespace headrace
