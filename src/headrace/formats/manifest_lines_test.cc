#include "headrace/formats/manifest_lines.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "headrace/formats/record_test_util.h"

namespace headrace {
namespace manifest_lines_test {

using ::testing::HasSubstr;

constexpr std::string_view kLine =
    R"({"id": "a1", "image": "images/a1.jpg", "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A cat."}]})";

std::filesystem::path TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  auto dir = std::filesystem::path(tmp ? tmp : "/tmp") /
             ("manifest_lines_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = (TempDir() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

SourceSpec SpecFor(const std::string& manifest) {
  SourceSpec spec;
  spec.manifest = manifest;
  spec.fields = {
      {"image", FieldKind::kImage, "", 0, false},
      {"views", FieldKind::kImage, "more", 3, false},
      {"label", FieldKind::kInt, "", 0, false},
      {"caption", FieldKind::kText, "", 0, false},
      {"chat", FieldKind::kConversation, "conversations", 0, false},
  };
  return spec;
}

// A manifest with every shape a line can take: a byte-order mark, CRLF endings, runs of
// blank lines (first, middle, last), bad lines of each kind, list and scalar fields, and
// a last line without a newline that ends within simdjson's padding of the buffer's end.
std::string HostileManifest() {
  std::string t = "\xEF\xBB\xBF";
  t += "\n  \n";  // two blank lines first
  t += R"({"id": 1, "image": "a.jpg", "more": ["b.jpg", "c/d.png"], "label": 7, "caption": "x",)"
       R"( "conversations": [{"from": "human", "value": "hi"}]})"
       "\r\n";
  t += "not json\n";
  t += "\t\r\n";
  t += R"({"id": "x", "image": "../escape.jpg"})"
       "\n";
  t += R"({"image": "no-id.jpg"})"
       "\n";
  for (int i = 0; i < 2100; ++i) {  // more than one block of 1024 offsets
    t += R"({"id": "r)" + std::to_string(i) + R"(", "image": "img/)" + std::to_string(i) +
         R"(.jpg", "label": )" + std::to_string(i) + "}\n";
    if (i % 700 == 3) t += "\n\n\n";
  }
  t += R"({"id": "bad-list", "more": ["a", "b", "c", "d"]})"
       "\n";
  t += "\n";
  t += R"({"id": "last"})";  // no newline: the store must copy it to a padded scratch
  return t;
}

using headrace::testing::ExpectSameRecord;

TEST(ManifestLines, EveryRecordEqualsTheParsedManifestsBadLinesAndLineNumbersIncluded) {
  const std::string text = HostileManifest();
  const std::string path = WriteFile("hostile.jsonl", text);
  const SourceSpec spec = SpecFor(path);
  Result<Buffer> bytes = Buffer::CopyOf(text.data(), text.size());
  ASSERT_TRUE(bytes.ok());
  Result<Manifest> parsed = ParseManifest(*bytes, path, spec);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_GT(parsed->bad_lines, 3);

  auto storage = MakeLocalStorage();
  Result<std::shared_ptr<const ManifestLines>> mapped = ManifestLines::Load(*storage, spec);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_TRUE((*mapped)->mapped());
  Result<std::shared_ptr<const ManifestLines>> read =
      ManifestLines::FromBuffer(*bytes, path, spec);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_FALSE((*read)->mapped());

  for (const auto& store : {*mapped, *read}) {
    EXPECT_EQ(store->root(), parsed->root);
    ASSERT_EQ(store->size(), static_cast<int64_t>(parsed->records.size()));
    SampleRecord scratch;
    for (int64_t i = 0; i < store->size(); ++i) {
      SCOPED_TRACE("record " + std::to_string(i));
      ExpectSameRecord(store->Get(i, scratch), parsed->records[static_cast<size_t>(i)]);
    }
    // Out of order and again: each Get stands alone.
    for (int64_t i : {store->size() - 1, int64_t{0}, int64_t{1500}, store->size() - 1}) {
      ExpectSameRecord(store->Get(i, scratch), parsed->records[static_cast<size_t>(i)]);
    }
  }
  // The last record has no newline and sits at the very end of the mapping.
  SampleRecord last;
  EXPECT_EQ((*mapped)->Get((*mapped)->size() - 1, last).id, "last");
}

TEST(ManifestLines, AMappedManifestHoldsFourBytesARecordOfHeapAndSharesItsBytes) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += std::string(kLine) + "\n";
  const std::string path = WriteFile("big.jsonl", text);
  auto storage = MakeLocalStorage();
  SourceSpec spec;
  spec.manifest = path;
  Result<std::shared_ptr<const ManifestLines>> lines = ManifestLines::Load(*storage, spec);
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  const RecordStoreMemory memory = (*lines)->Memory();
  EXPECT_EQ(memory.mapped_bytes, static_cast<int64_t>(text.size()));
  EXPECT_LT(memory.heap_bytes, 20000 * 5);  // 4 B a record, 8 B per 1024, the object
  EXPECT_GE(memory.heap_bytes, 20000 * 4);

  // The same manifest parsed: ~2x its text, each record's strings on the heap.
  Result<Manifest> parsed = LoadManifest(*storage, spec);
  ASSERT_TRUE(parsed.ok());
  EXPECT_GT(static_cast<int64_t>(ManifestMemoryBytes(*parsed)),
            static_cast<int64_t>(text.size()));

  // Read through the storage instead (a URI's case), the bytes are this process's own.
  Result<std::shared_ptr<const ManifestLines>> read =
      ManifestLines::FromBuffer(*Buffer::CopyOf(text.data(), text.size()), path, spec);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ((*read)->Memory().mapped_bytes, 0);
  EXPECT_GE((*read)->Memory().heap_bytes, static_cast<int64_t>(text.size()));
}

TEST(ManifestLines, ThreadsParseRecordsConcurrentlyEachWithItsOwnParser) {
  const std::string text = HostileManifest();
  const std::string path = WriteFile("threads.jsonl", text);
  const SourceSpec spec = SpecFor(path);
  auto storage = MakeLocalStorage();
  Result<std::shared_ptr<const ManifestLines>> lines = ManifestLines::Load(*storage, spec);
  ASSERT_TRUE(lines.ok());
  Result<Manifest> parsed = LoadManifest(*storage, spec);
  ASSERT_TRUE(parsed.ok());
  const ManifestLines& store = **lines;
  std::vector<int64_t> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      SampleRecord scratch;
      for (int round = 0; round < 3; ++round) {
        for (int64_t i = t; i < store.size(); i += 3) {
          const SampleRecord& r = store.Get(i, scratch);
          const SampleRecord& want = parsed->records[static_cast<size_t>(i)];
          if (r.id != want.id || r.line != want.line || r.media.size() != want.media.size() ||
              r.status.message() != want.status.message()) {
            ++mismatches[static_cast<size_t>(t)];
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int64_t>(4, 0));
}

TEST(ManifestLines, AManifestWithoutRecordsAndAMissingOneFailAsWhenParsed) {
  auto storage = MakeLocalStorage();
  SourceSpec spec;
  spec.manifest = WriteFile("blank.jsonl", "\n \n\t\n");
  Result<std::shared_ptr<const ManifestLines>> blank = ManifestLines::Load(*storage, spec);
  ASSERT_FALSE(blank.ok());
  EXPECT_EQ(blank.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(blank.status().message(), HasSubstr("has no records (3 lines, all blank)"));

  spec.manifest = WriteFile("empty.jsonl", "");
  EXPECT_EQ(ManifestLines::Load(*storage, spec).status().code(), StatusCode::kInvalidArgument);

  spec.manifest = (TempDir() / "missing.jsonl").string();
  Result<std::shared_ptr<const ManifestLines>> missing = ManifestLines::Load(*storage, spec);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("reading manifest"));
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.jsonl"));
}

// HostileManifest's records as one pretty-printed JSON array: elements over several
// lines, whitespace and CRLF between them, a missing value, strings holding brackets.
std::string HostileArray() {
  std::string t = "\xEF\xBB\xBF\n[\n";
  t += R"({"id": 1, "image": "a.jpg", "more": ["b.jpg", "c/d.png"], "label": 7,)"
       "\r\n"
       R"(  "caption": "x ] }, {", "conversations": [{"from": "human", "value": "hi"}]})"
       " ,\r\n";
  t += "  not json ,\n";
  t += R"({"id": "x", "image": "../escape.jpg"}, , {"image": "no-id.jpg"},)";
  for (int i = 0; i < 2100; ++i) {  // more than one block of 1024 offsets
    t += R"({"id": "r)" + std::to_string(i) + R"(", "image": "img/)" + std::to_string(i) +
         R"(.jpg", "label": )" + std::to_string(i) + "},";
    if (i % 700 == 3) t += "\n\n\n";
  }
  t += R"({"id": "bad-list", "more": ["a", "b", "c", "d"]},)"
       "\n";
  t += R"(  {"id": "last"}  )";
  t += "\n]";  // the ']' last: the store's last element ends near the buffer's end
  return t;
}

TEST(ManifestLines, AJsonArrayKeptAsElementsEqualsItParsedBadElementsIncluded) {
  const std::string text = HostileArray();
  const std::string path = WriteFile("hostile.json", text);
  const SourceSpec spec = SpecFor(path);
  Result<Buffer> bytes = Buffer::CopyOf(text.data(), text.size());
  ASSERT_TRUE(bytes.ok());
  Result<Manifest> parsed = ParseManifest(*bytes, path, spec);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->records.size(), 2107u);
  EXPECT_EQ(parsed->bad_lines, 5);
  EXPECT_EQ(parsed->records[0].attributes.size(), 2u);
  EXPECT_THAT(parsed->records[3].status.message(), HasSubstr("element 3: no value"));

  auto storage = MakeLocalStorage();
  Result<std::shared_ptr<const ManifestLines>> mapped = ManifestLines::Load(*storage, spec);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  Result<std::shared_ptr<const ManifestLines>> read = ManifestLines::FromBuffer(*bytes, path, spec);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  for (const auto& store : {*mapped, *read}) {
    ASSERT_EQ(store->size(), static_cast<int64_t>(parsed->records.size()));
    SampleRecord scratch;
    for (int64_t i = 0; i < store->size(); ++i) {
      SCOPED_TRACE("element " + std::to_string(i));
      ExpectSameRecord(store->Get(i, scratch), parsed->records[static_cast<size_t>(i)]);
    }
    for (int64_t i : {store->size() - 1, int64_t{0}, int64_t{1500}, int64_t{3}}) {
      ExpectSameRecord(store->Get(i, scratch), parsed->records[static_cast<size_t>(i)]);
    }
  }
  SampleRecord last;
  EXPECT_EQ((*mapped)->Get((*mapped)->size() - 1, last).id, "last");
  EXPECT_TRUE(last.status.ok());
}

TEST(ManifestLines, AMappedJsonArrayHoldsFourBytesAnElementOfHeap) {
  // A large-ish array (~30 MB): its index is what a JSONL manifest's is, 4 bytes a
  // record, whatever the array's size; the bytes stay in the page cache, shared.
  constexpr int kRecords = 100000;
  std::string text = "[";
  for (int i = 0; i < kRecords; ++i) {
    if (i > 0) text += ",\n ";
    text += kLine;
  }
  text += "]\n";
  const std::string path = WriteFile("big.json", text);
  auto storage = MakeLocalStorage();
  SourceSpec spec;
  spec.manifest = path;
  spec.records = ManifestRecordsForm::kLines;
  Result<ManifestRecords> records = LoadManifestRecords(*storage, spec);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  EXPECT_EQ(records->records->size(), kRecords);
  EXPECT_EQ(records->mapped_bytes, static_cast<int64_t>(text.size()));
  EXPECT_LT(records->heap_bytes, kRecords * 5);  // 4 B an element, 8 B per 1024, the object
  EXPECT_GE(records->heap_bytes, kRecords * 4);
  SampleRecord scratch;
  const SampleRecord& r = records->records->Get(kRecords - 1, scratch);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.id, "a1");
  EXPECT_EQ(r.turns.size(), 2u);
  std::filesystem::remove(path);
}

TEST(ManifestLines, ATruncatedJsonArrayFailsTheLoadNamingWhere) {
  const std::string text = "[" + std::string(kLine) + ",\n" + std::string(kLine).substr(0, 40);
  auto storage = MakeLocalStorage();
  SourceSpec spec;
  spec.manifest = WriteFile("truncated.json", text);
  spec.records = ManifestRecordsForm::kLines;
  Result<std::shared_ptr<const ManifestLines>> lines = ManifestLines::Load(*storage, spec);
  ASSERT_FALSE(lines.ok());
  EXPECT_EQ(lines.status().code(), StatusCode::kCorruptData);
  EXPECT_THAT(lines.status().message(), HasSubstr("truncated.json"));
  EXPECT_THAT(lines.status().message(), HasSubstr("the JSON array is not closed"));
  EXPECT_THAT(lines.status().message(), HasSubstr("element 1"));
}

TEST(LoadManifestRecords, RecordsFormPicksParsedOrLinesAndAutoGoesByTheManifestsSize) {
  auto storage = MakeLocalStorage();
  SourceSpec spec;
  spec.manifest = WriteFile("small.jsonl", std::string(kLine) + "\n" + std::string(kLine) + "\n");

  // auto, small: parsed, the records in the manifest.
  Result<ManifestRecords> automatic = LoadManifestRecords(*storage, spec);
  ASSERT_TRUE(automatic.ok()) << automatic.status().ToString();
  EXPECT_EQ(automatic->manifest->records.size(), 2u);
  EXPECT_EQ(automatic->records->size(), 2);
  EXPECT_EQ(automatic->mapped_bytes, 0);
  EXPECT_EQ(automatic->heap_bytes,
            static_cast<int64_t>(ManifestMemoryBytes(*automatic->manifest)));

  spec.records = ManifestRecordsForm::kLines;
  Result<ManifestRecords> lines = LoadManifestRecords(*storage, spec);
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  EXPECT_TRUE(lines->manifest->records.empty());
  EXPECT_EQ(lines->manifest->root, automatic->manifest->root);
  ASSERT_NE(dynamic_cast<const ManifestLines*>(lines->records.get()), nullptr);
  EXPECT_EQ(lines->records->size(), 2);
  EXPECT_GT(lines->mapped_bytes, 0);
  SampleRecord scratch;
  EXPECT_EQ(lines->records->Get(1, scratch).uri(),
            automatic->manifest->records[1].uri());

  // auto, large: lines.
  std::string big;
  while (static_cast<int64_t>(big.size()) < kLinesAutoBytes) big += std::string(kLine) + "\n";
  spec.manifest = WriteFile("auto-big.jsonl", big);
  spec.records = ManifestRecordsForm::kAuto;
  Result<ManifestRecords> large = LoadManifestRecords(*storage, spec);
  ASSERT_TRUE(large.ok()) << large.status().ToString();
  EXPECT_NE(dynamic_cast<const ManifestLines*>(large->records.get()), nullptr);
  EXPECT_EQ(large->mapped_bytes, static_cast<int64_t>(big.size()));
  std::filesystem::remove(spec.manifest);

  spec.records = ManifestRecordsForm::kParsed;
  spec.manifest = (TempDir() / "nope.jsonl").string();
  EXPECT_EQ(LoadManifestRecords(*storage, spec).status().code(), StatusCode::kNotFound);
}

}  // namespace manifest_lines_test
}  // namespace headrace
