// The source conformance battery: every source kind, given the same data, yields the same
// samples as the manifest (the same media bytes in each field, the same turns), declares
// its order shape, and names its bad records by where they are. A new kind is added to
// Kinds() below. (A materialization holds finished batch rows, not the manifest's
// samples: the run battery's equivalent is tests/test_materialize.py, batches
// byte-identical to the pipeline's.)
#include "headrace/formats/source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "headrace/formats/parquet_test_util.h"
#include "headrace/formats/tar_shard.h"

namespace headrace {
namespace source_conformance_test {
namespace fs = std::filesystem;

constexpr int kSamples = 7;
constexpr int kBad = 4;  // the sample every form holds damaged: no image where one is required

fs::path Dir() {
  const fs::path dir = fs::temp_directory_path() / ("source_conformance_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The data, as parquet_test::MakeRows makes it: image bytes and a conversation per row.
const std::vector<parquet_test::Row>& Rows() {
  static const std::vector<parquet_test::Row> rows = parquet_test::MakeRows(kSamples);
  return rows;
}

// A field list every form reads the same way: a required image, a conversation.
std::vector<SourceFieldSpec> Fields(const std::string& image_key) {
  return {SourceFieldSpec{"image", FieldKind::kImage, image_key, 0, true},
          SourceFieldSpec{"conversation", FieldKind::kConversation, "conversations", 0, false}};
}

SourceSpec ManifestForm(ManifestRecordsForm form) {
  const fs::path dir = Dir() / "manifest";
  fs::create_directories(dir);
  std::ofstream manifest(dir / "manifest.jsonl");
  for (int i = 0; i < kSamples; ++i) {
    const std::string name = "img" + std::to_string(i) + ".jpg";
    std::ofstream(dir / name, std::ios::binary) << *Rows()[i].image;
    manifest << R"({"id": "id-)" << i << '"';
    if (i != kBad) manifest << R"(, "image": ")" << name << '"';
    manifest << R"(, "conversations": )" << Rows()[i].conversations << "}\n";
  }
  SourceSpec spec;
  spec.manifest = (dir / "manifest.jsonl").string();
  spec.fields = Fields("image");
  spec.records = form;
  return spec;
}

SourceSpec ShardForm() {
  const fs::path dir = Dir() / "shards";
  fs::create_directories(dir);
  for (int shard = 0; shard < 2; ++shard) {
    const fs::path path = dir / ("shard-00" + std::to_string(shard) + ".tar");
    auto writer = TarWriter::Open(path.string());
    EXPECT_TRUE(writer.ok());
    for (int i = shard * 4; i < std::min(kSamples, shard * 4 + 4); ++i) {
      const std::string key = "k" + std::to_string(i);
      if (i != kBad) EXPECT_TRUE((*writer)->Add(key + ".jpg", Bytes(*Rows()[i].image)).ok());
      const std::string json = R"({"conversations": )" + Rows()[i].conversations + "}";
      EXPECT_TRUE((*writer)->Add(key + ".json", Bytes(json)).ok());
    }
    EXPECT_TRUE((*writer)->Close().ok());
  }
  SourceSpec spec;
  spec.shards = (dir / "shard-{000..001}.tar").string();
  spec.fields = Fields("jpg");
  spec.fields[1].key = "json";
  return spec;
}

SourceSpec ParquetForm() {
  const fs::path dir = Dir() / "parquet";
  fs::create_directories(dir);
  std::vector<parquet_test::Row> rows = Rows();
  rows[kBad].image.reset();  // a null cell of a required column
  const Buffer bytes = parquet_test::WriteParquet(rows, 3);
  std::ofstream(dir / "part-0.parquet", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  SourceSpec spec;
  spec.parquet = (dir / "part-0.parquet").string();
  spec.fields = Fields("image");
  return spec;
}

// A blend entry named `name` over `source`, weight 1.
MixEntrySpec Entry(std::string name, SourceSpec source = {}) {
  MixEntrySpec e;
  e.name = std::move(name);
  e.source = std::move(source);
  return e;
}

// A blend of two entries over the same data: a manifest of the first four samples, tar
// shards of the rest (the damaged one among them). Its index i is the manifest's i.
SourceSpec MixForm() {
  const fs::path dir = Dir() / "mix";
  fs::create_directories(dir);
  constexpr int kFirst = 4;  // entry 0's samples; entry 1 holds the rest
  std::ofstream manifest(dir / "a.jsonl");
  for (int i = 0; i < kFirst; ++i) {
    const std::string name = "img" + std::to_string(i) + ".jpg";
    std::ofstream(dir / name, std::ios::binary) << *Rows()[i].image;
    manifest << R"({"id": "id-)" << i << R"(", "image": ")" << name
             << R"(", "conversations": )" << Rows()[i].conversations << "}\n";
  }
  auto writer = TarWriter::Open((dir / "b.tar").string());
  EXPECT_TRUE(writer.ok());
  for (int i = kFirst; i < kSamples; ++i) {
    const std::string key = "k" + std::to_string(i);
    if (i != kBad) {
      EXPECT_TRUE((*writer)->Add(key + ".jpg", Bytes(*Rows()[i].image)).ok());
    }
    const std::string json = R"({"conversations": )" + Rows()[i].conversations + "}";
    EXPECT_TRUE((*writer)->Add(key + ".json", Bytes(json)).ok());
  }
  EXPECT_TRUE((*writer)->Close().ok());
  SourceSpec a;
  a.manifest = (dir / "a.jsonl").string();
  a.fields = Fields("image");
  SourceSpec b;
  b.shards = (dir / "b.tar").string();
  b.fields = Fields("jpg");
  b.fields[1].key = "json";
  SourceSpec spec;
  spec.mix = {Entry("a", a), Entry("b", b)};
  return spec;
}

struct Kind {
  std::string name;
  std::function<SourceSpec()> spec;
  std::vector<int64_t> shard_samples;  // the order shape it declares
};

std::vector<Kind> Kinds() {
  return {
      {"manifest_parsed", [] { return ManifestForm(ManifestRecordsForm::kParsed); }, {}},
      {"manifest_lines", [] { return ManifestForm(ManifestRecordsForm::kLines); }, {}},
      {"shards", ShardForm, {4, 3}},
      {"parquet", ParquetForm, {3, 3, 1}},
      // Its order is the blend's (order().blend), not groups of its own.
      {"mix", MixForm, {}},
  };
}

// Reads a record's media as the engine does: whole objects or byte ranges, gated.
std::vector<Buffer> ReadMedia(Storage& storage, const SampleRecord& record) {
  std::vector<Buffer> out;
  for (const MediaRef& ref : record.media) {
    std::promise<Result<Buffer>> got;
    auto done = [&](Result<Buffer> bytes) { got.set_value(std::move(bytes)); };
    auto gate = [](int64_t) { return true; };
    if (ref.offset == 0 && ref.length < 0) {
      storage.ReadAsyncGated(ref.uri, done, gate);
    } else {
      storage.ReadRangeAsyncGated(ref.uri, ref.offset, ref.length, done, gate);
    }
    Result<Buffer> bytes = got.get_future().get();
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    out.push_back(bytes.ok() ? *std::move(bytes) : Buffer());
  }
  return out;
}

// What the chain would see of sample `index`: its image's bytes and its turns, or the
// record's error.
struct Seen {
  Status status;
  std::string image;
  std::vector<std::pair<Role, std::string>> turns;
};

Seen See(const Source& source, int64_t index) {
  SampleRecord scratch;
  const SampleRecord& record = source.records(0).Get(index, scratch);
  Seen seen;
  seen.status = record.status;
  if (!record.status.ok()) return seen;
  Sample sample;
  sample.index = index;
  sample.record = &record;
  seen.status = source.Fill(ReadMedia(*source.storage(), record), sample);
  if (const Buffer* image = sample.MediaOf(0)) {
    seen.image.assign(reinterpret_cast<const char*>(image->data()), image->size());
  }
  for (const Turn& t : sample.turns) seen.turns.emplace_back(t.role, t.text);
  return seen;
}

std::shared_ptr<const Source> Open(const SourceSpec& spec) {
  SourceOptions options;
  options.memory_budget_bytes = int64_t{256} << 20;
  options.samples_in_flight = 8;
  auto source = OpenSource(spec, options, MakeLocalStorage());
  EXPECT_TRUE(source.ok()) << source.status().ToString();
  return source.ok() ? *source : nullptr;
}

class SourceConformance : public ::testing::TestWithParam<Kind> {};

TEST_P(SourceConformance, YieldsTheManifestsSamplesAndNamesItsBadRecord) {
  const auto manifest = Open(ManifestForm(ManifestRecordsForm::kParsed));
  const auto source = Open(GetParam().spec());
  ASSERT_NE(manifest, nullptr);
  ASSERT_NE(source, nullptr);
  ASSERT_EQ(source->size(), kSamples);
  EXPECT_EQ(source->order().shard_samples, GetParam().shard_samples);
  EXPECT_FALSE(source->info().description.empty());
  for (int64_t i = 0; i < kSamples; ++i) {
    const Seen want = See(*manifest, i);
    const Seen got = See(*source, i);
    if (i == kBad) {
      EXPECT_FALSE(want.status.ok());
      EXPECT_FALSE(got.status.ok()) << GetParam().name << ": the damaged sample passed";
      continue;
    }
    ASSERT_TRUE(got.status.ok()) << GetParam().name << " " << i << ": " << got.status.ToString();
    EXPECT_EQ(got.image, want.image) << GetParam().name << " " << i;
    EXPECT_EQ(got.turns, want.turns) << GetParam().name << " " << i;
  }
  // The bad record is named by where it is, whatever the form.
  SampleRecord scratch;
  const SampleRecord& bad = source->records(0).Get(kBad, scratch);
  if (!bad.status.ok()) {
    EXPECT_FALSE(bad.uri().empty() && bad.line == 0) << GetParam().name;
  }
}

TEST_P(SourceConformance, IsThreadSafeAfterOpen) {
  const auto source = Open(GetParam().spec());
  ASSERT_NE(source, nullptr);
  std::vector<std::vector<std::string>> images(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t i = kSamples - 1; i >= 0; --i) images[t].push_back(See(*source, i).image);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(images[t], images[0]);
}

INSTANTIATE_TEST_SUITE_P(Kinds, SourceConformance, ::testing::ValuesIn(Kinds()),
                         [](const auto& info) { return info.param.name; });

}  // namespace source_conformance_test
}  // namespace headrace
