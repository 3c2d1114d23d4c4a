#include "headrace/formats/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

namespace headrace {
namespace {

using ::testing::HasSubstr;

Buffer BytesOf(std::string_view text) {
  Result<Buffer> b = Buffer::CopyOf(text.data(), text.size());
  EXPECT_TRUE(b.ok());
  return *b;
}

SourceSpec Spec() {
  SourceSpec spec;
  spec.manifest = "/data/set/manifest.jsonl";
  return spec;
}

Manifest ParseOk(std::string_view text, const SourceSpec& spec = Spec()) {
  Result<Manifest> m = ParseManifest(BytesOf(text), spec.manifest, spec);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : Manifest{};
}

constexpr std::string_view kGood =
    R"({"id": "a1", "image": "images/a1.jpg", "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A cat."}]})";

// --- ResolveMediaPath -----------------------------------------------------------------

struct ResolveCase {
  std::string root;
  std::string relative;
  bool allow_absolute;
  std::string expected;  // empty: expect an error
  StatusCode code = StatusCode::kOk;
};

TEST(ResolveMediaPath, ResolvesAndRejectsLexically) {
  const ResolveCase cases[] = {
      {"/data", "x.jpg", false, "/data/x.jpg"},
      {"/data/", "images/x.jpg", false, "/data/images/x.jpg"},
      {"/data", "./images//x.jpg", false, "/data/images/x.jpg"},
      {"/data", "images/./a/../x.jpg", false, "/data/images/x.jpg"},
      {"/data/./set/../set", "x.jpg", false, "/data/set/x.jpg"},
      {"/", "x.jpg", false, "/x.jpg"},
      {"data/set", "x.jpg", false, "data/set/x.jpg"},
      {"", "x.jpg", false, "x.jpg"},
      {"../up", "x.jpg", false, "../up/x.jpg"},
      {"/data", "images/", false, "/data/images"},
      {"/data", "...", false, "/data/..."},
      {"/data", "..x/y", false, "/data/..x/y"},
      {"/data", "../x.jpg", false, "", StatusCode::kPathEscape},
      {"/data", "images/../../x.jpg", false, "", StatusCode::kPathEscape},
      {"/data", "../data/x.jpg", false, "", StatusCode::kPathEscape},
      {"/data", "..", false, "", StatusCode::kPathEscape},
      {"", "../x.jpg", false, "", StatusCode::kPathEscape},
      {"/data", "", false, "", StatusCode::kMissingField},
      // Absolute paths.
      {"/data", "/data/x.jpg", false, "", StatusCode::kPathEscape},
      {"/data", "/data/x.jpg", true, "/data/x.jpg"},
      {"/data", "/data/a/../x.jpg", true, "/data/x.jpg"},
      {"/data", "/database/x.jpg", true, "", StatusCode::kPathEscape},
      {"/data", "/etc/passwd", true, "", StatusCode::kPathEscape},
      {"/data", "/data/../etc/passwd", true, "", StatusCode::kPathEscape},
      {"/", "/etc/passwd", true, "/etc/passwd"},
      {"data", "/data/x.jpg", true, "", StatusCode::kPathEscape},
      // URIs: the scheme and authority are never climbed out of.
      {"s3://bucket/set", "images/x.jpg", false, "s3://bucket/set/images/x.jpg"},
      {"s3://bucket", "x.jpg", false, "s3://bucket/x.jpg"},
      {"s3://bucket/", "x.jpg", false, "s3://bucket/x.jpg"},
      {"https://host:8080/a/b", "../c.jpg", false, "", StatusCode::kPathEscape},
      {"s3://bucket", "../other/x.jpg", false, "", StatusCode::kPathEscape},
      {"s3://bucket/set", "s3://bucket/set/x.jpg", false, "", StatusCode::kPathEscape},
      {"s3://bucket/set", "s3://bucket/set/x.jpg", true, "s3://bucket/set/x.jpg"},
      {"s3://bucket/set", "s3://other/set/x.jpg", true, "", StatusCode::kPathEscape},
      {"s3://bucket/set", "/set/x.jpg", true, "", StatusCode::kPathEscape},
      {"/data", "s3://bucket/x.jpg", true, "", StatusCode::kPathEscape},
      // Manifest paths are literal object names: on http(s) every segment is
      // percent-encoded, so a server that decodes the URL cannot be led out of the root.
      {"http://h/set", "%2e%2e/secret.jpg", false, "http://h/set/%252e%252e/secret.jpg"},
      {"http://h/set", "..%2fsecret.jpg", false, "http://h/set/..%252fsecret.jpg"},
      {"http://h/set", "images/..%2F..%2Fprivate%2Fsecret2.jpg", false,
       "http://h/set/images/..%252F..%252Fprivate%252Fsecret2.jpg"},
      {"https://h/set", "images/a#b.jpg", false, "https://h/set/images/a%23b.jpg"},
      {"https://h/set", "images/a?x.jpg", false, "https://h/set/images/a%3Fx.jpg"},
      {"http://h/set", "a b~-_.JPG", false, "http://h/set/a%20b~-_.JPG"},
      {"http://h/set", "%2e%2e/../x.jpg", false, "http://h/set/x.jpg"},
      {"http://h/set", "%2e%2e/../../x.jpg", false, "", StatusCode::kPathEscape},
      // ... an absolute http(s) URL is a URL: a step in disguise is an escape.
      {"http://h/set", "http://h/set/a%20b.jpg", true, "http://h/set/a%20b.jpg"},
      {"http://h/set", "http://h/set/%2e%2e/x.jpg", true, "", StatusCode::kPathEscape},
      {"http://h/set", "http://h/set/a%2F..%2F..%2Fx.jpg", true, "", StatusCode::kPathEscape},
      // ... S3 keys and local names are kept byte for byte (the S3 backend encodes keys).
      {"s3://bucket/set", "%2e%2e/x.jpg", false, "s3://bucket/set/%2e%2e/x.jpg"},
      {"/data", "%2e%2e/x.jpg", false, "/data/%2e%2e/x.jpg"},
      // Not URIs: no "://", or an invalid scheme.
      {"/data", "c:/x.jpg", false, "/data/c:/x.jpg"},
      {"/data", "1a://x.jpg", false, "/data/1a:/x.jpg"},
  };
  for (const ResolveCase& c : cases) {
    SCOPED_TRACE("root='" + c.root + "' relative='" + c.relative + "'");
    Result<std::string> r = ResolveMediaPath(c.root, c.relative, c.allow_absolute);
    if (c.expected.empty()) {
      ASSERT_FALSE(r.ok()) << *r;
      EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
      if (!c.relative.empty()) {
        EXPECT_THAT(r.status().message(), HasSubstr(c.relative));
      }
    } else {
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(*r, c.expected);
    }
  }
}

TEST(ResolveMediaPath, NulInThePathIsABadRecord) {
  // open() would stop at the NUL and read "/data/a.jpg" instead.
  const std::string path("a.jpg\0../../etc/passwd", 22);
  Result<std::string> r = ResolveMediaPath("/data", path, false);
  ASSERT_FALSE(r.ok()) << *r;
  EXPECT_EQ(r.status().code(), StatusCode::kBadRecord);
  EXPECT_THAT(r.status().message(), HasSubstr("NUL"));
  EXPECT_THAT(r.status().message(), HasSubstr("'a.jpg\\x00../../etc/passwd'"));
}

TEST(ResolveMediaPath, ErrorQuotesAtMostAShortPrefixOfAHugePath) {
  const std::string huge = "../" + std::string(1 << 20, 'a');
  Result<std::string> r = ResolveMediaPath("/data", huge, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPathEscape);
  EXPECT_LT(r.status().message().size(), 600u);
  EXPECT_THAT(r.status().message(), HasSubstr("(1048579 bytes)"));
}

TEST(ResolveMediaPath, DisallowedAbsolutePathNamesTheSetting) {
  Result<std::string> r = ResolveMediaPath("/data", "/etc/passwd", false);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("source.allow_absolute_paths"));
}

// --- ParseManifest --------------------------------------------------------------------

TEST(ParseManifest, ParsesGoodLine) {
  Manifest m = ParseOk(std::string(kGood) + "\n");
  EXPECT_EQ(m.path, "/data/set/manifest.jsonl");
  EXPECT_EQ(m.root, "/data/set");
  EXPECT_EQ(m.bad_lines, 0);
  ASSERT_EQ(m.records.size(), 1u);
  const SampleRecord& r = m.records[0];
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.line, 1);
  EXPECT_EQ(r.id, "a1");
  EXPECT_EQ(r.uri(), "/data/set/images/a1.jpg");
  ASSERT_EQ(r.turns.size(), 2u);
  EXPECT_EQ(r.turns[0].role, Role::kUser);
  EXPECT_EQ(r.turns[0].text, "<image>\nWhat?");
  EXPECT_EQ(r.turns[1].role, Role::kAssistant);
  EXPECT_EQ(r.turns[1].text, "A cat.");
}

TEST(ParseManifest, LastLineWithoutNewline) {
  Manifest m = ParseOk(std::string(kGood) + "\n" + std::string(kGood));
  ASSERT_EQ(m.records.size(), 2u);
  EXPECT_TRUE(m.records[1].status.ok()) << m.records[1].status.ToString();
  EXPECT_EQ(m.records[1].line, 2);
}

TEST(ParseManifest, SkipsBlankLinesButKeepsLineNumbers) {
  const std::string text = "\n" + std::string(kGood) + "\n  \t\n\n" + std::string(kGood) + "\n\n";
  Manifest m = ParseOk(text);
  ASSERT_EQ(m.records.size(), 2u);
  EXPECT_EQ(m.records[0].line, 2);
  EXPECT_EQ(m.records[1].line, 5);
}

TEST(ParseManifest, AcceptsCrlfAndByteOrderMark) {
  const std::string text =
      "\xEF\xBB\xBF" + std::string(kGood) + "\r\n\r\n" + std::string(kGood) + "\r\n";
  Manifest m = ParseOk(text);
  ASSERT_EQ(m.records.size(), 2u);
  EXPECT_EQ(m.bad_lines, 0);
  EXPECT_EQ(m.records[0].line, 1);
  EXPECT_EQ(m.records[1].line, 3);
  EXPECT_EQ(m.records[1].turns[1].text, "A cat.");
}

TEST(ParseManifest, IntegerIdsBecomeText) {
  Manifest m = ParseOk(R"({"id": 42, "conversations": []})"
                       "\n"
                       R"({"id": -7, "conversations": []})"
                       "\n"
                       R"({"id": 18446744073709551615, "conversations": []})"
                       "\n");
  ASSERT_EQ(m.records.size(), 3u);
  EXPECT_EQ(m.records[0].id, "42");
  EXPECT_EQ(m.records[1].id, "-7");
  EXPECT_EQ(m.records[2].id, "18446744073709551615");
  EXPECT_EQ(m.bad_lines, 0);
}

TEST(ParseManifest, RecordWithoutImageIsTextOnly) {
  Manifest m = ParseOk(R"({"id": "t", "conversations": [{"from": "user", "value": "hi"}]})"
                       "\n"
                       R"({"id": "n", "image": null, "conversations": []})");
  ASSERT_EQ(m.records.size(), 2u);
  EXPECT_TRUE(m.records[0].status.ok());
  EXPECT_EQ(m.records[0].uri(), "");
  EXPECT_TRUE(m.records[1].status.ok());
  EXPECT_EQ(m.records[1].uri(), "");
}

TEST(ParseManifest, KeepsUnicodeText) {
  Manifest m = ParseOk(
      R"({"id": "日本", "image": "画像/猫.jpg", "conversations": [{"from": "human", "value": "これは何？ \u00e9\ud83d\ude00"}, {"from": "gpt", "value": "猫 🐱"}]})");
  ASSERT_EQ(m.records.size(), 1u);
  const SampleRecord& r = m.records[0];
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.id, "日本");
  EXPECT_EQ(r.uri(), "/data/set/画像/猫.jpg");
  EXPECT_EQ(r.turns[0].text, "これは何？ é😀");
  EXPECT_EQ(r.turns[1].text, "猫 🐱");
}

TEST(ParseManifest, MapsRoles) {
  Manifest m = ParseOk(
      R"({"id": 1, "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "h"}, {"from": "user", "value": "u"}, {"from": "gpt", "value": "g"}, {"from": "assistant", "value": "a"}, {"from": "model", "value": "m"}]})");
  ASSERT_EQ(m.records.size(), 1u);
  const auto& t = m.records[0].turns;
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].role, Role::kSystem);
  EXPECT_EQ(t[1].role, Role::kUser);
  EXPECT_EQ(t[2].role, Role::kUser);
  EXPECT_EQ(t[3].role, Role::kAssistant);
  EXPECT_EQ(t[4].role, Role::kAssistant);
  EXPECT_EQ(t[5].role, Role::kAssistant);
}

struct BadLine {
  std::string json;
  StatusCode code;
  std::vector<std::string> mentions;  // substrings the message must contain
};

TEST(ParseManifest, BadLinesKeepTheirIndexAndName) {
  const BadLine bad[] = {
      {R"({"id": "x", "conversations": [})", StatusCode::kBadRecord, {"invalid JSON"}},
      {R"(not json)", StatusCode::kBadRecord, {"invalid JSON"}},
      {R"({"id": "x", "conversations": []} trailing)", StatusCode::kBadRecord, {"invalid JSON"}},
      {"{\"id\": \"\xff\", \"conversations\": []}", StatusCode::kBadRecord, {"invalid JSON"}},
      {R"([1, 2])", StatusCode::kBadRecord, {"object", "array"}},
      {R"("str")", StatusCode::kBadRecord, {"object"}},
      {R"({"conversations": []})", StatusCode::kMissingField, {"'id'"}},
      {R"({"id": 1.5, "conversations": []})", StatusCode::kMissingField, {"'id'", "integer"}},
      {R"({"id": ["a"], "conversations": []})", StatusCode::kMissingField, {"'id'"}},
      {R"({"id": "x", "image": 3, "conversations": []})",
       StatusCode::kMissingField,
       {"'image'", "string"}},
      {R"({"id": "x", "image": "", "conversations": []})",
       StatusCode::kMissingField,
       {"'image'", "empty"}},
      {R"({"id": "x", "image": "a.jpg"})", StatusCode::kMissingField, {"'conversations'"}},
      {R"({"id": "x", "conversations": {"from": "human"}})",
       StatusCode::kMissingField,
       {"'conversations'", "array"}},
      {R"({"id": "x", "conversations": ["hi"]})",
       StatusCode::kMissingField,
       {"conversations[0]", "object"}},
      {R"({"id": "x", "conversations": [{"from": "human", "value": "a"}, {"value": "b"}]})",
       StatusCode::kMissingField,
       {"conversations[1].from"}},
      {R"({"id": "x", "conversations": [{"from": "human", "value": 5}]})",
       StatusCode::kMissingField,
       {"conversations[0].value"}},
      {R"({"id": "x", "conversations": [{"from": "bot", "value": "b"}]})",
       StatusCode::kBadRecord,
       {"conversations[0].from", "'bot'", "human", "assistant"}},
      {R"({"id": "x", "image": "../x.jpg", "conversations": []})",
       StatusCode::kPathEscape,
       {"image", "../x.jpg"}},
      {R"({"id": "x", "image": "images/../../x.jpg", "conversations": []})",
       StatusCode::kPathEscape,
       {"images/../../x.jpg"}},
      {R"({"id": "x", "image": "images/a.jpg\u0000.png", "conversations": []})",
       StatusCode::kBadRecord,
       {"image", "NUL", "'images/a.jpg\\x00.png'"}},
      {R"({"id": "x", "image": "/etc/passwd", "conversations": []})",
       StatusCode::kPathEscape,
       {"/etc/passwd", "allow_absolute_paths"}},
  };
  // good, bad[0], good, bad[1], ... so that each bad line sits at an odd index.
  std::string text;
  for (const BadLine& b : bad) {
    text += std::string(kGood) + "\n" + b.json + "\n";
  }
  Manifest m = ParseOk(text);
  ASSERT_EQ(m.records.size(), 2 * std::size(bad));
  EXPECT_EQ(m.bad_lines, static_cast<int64_t>(std::size(bad)));
  for (size_t i = 0; i < std::size(bad); ++i) {
    SCOPED_TRACE(bad[i].json);
    EXPECT_TRUE(m.records[2 * i].status.ok()) << m.records[2 * i].status.ToString();
    const SampleRecord& r = m.records[2 * i + 1];
    const int64_t line = static_cast<int64_t>(2 * i + 2);
    EXPECT_EQ(r.line, line);
    EXPECT_EQ(r.status.code(), bad[i].code) << r.status.ToString();
    EXPECT_THAT(r.status.message(), HasSubstr("line " + std::to_string(line) + ":"));
    for (const std::string& s : bad[i].mentions) {
      EXPECT_THAT(r.status.message(), HasSubstr(s));
    }
    EXPECT_TRUE(r.turns.empty());
    EXPECT_TRUE(r.uri().empty());
  }
}

TEST(ParseManifest, UsesConfiguredFieldNames) {
  SourceSpec spec = Spec();
  spec.id_field = "uid";
  spec.image_field = "img";
  spec.conversations_field = "messages";
  spec.role_field = "role";
  spec.text_field = "content";
  Manifest m =
      ParseOk(R"({"uid": 3, "img": "x.png", "messages": [{"role": "user", "content": "q"}]})"
              "\n"
              R"({"uid": 4, "messages": [{"role": "user"}]})",
              spec);
  ASSERT_EQ(m.records.size(), 2u);
  EXPECT_EQ(m.records[0].id, "3");
  EXPECT_EQ(m.records[0].uri(), "/data/set/x.png");
  EXPECT_EQ(m.records[0].turns[0].text, "q");
  EXPECT_EQ(m.records[1].status.code(), StatusCode::kMissingField);
  EXPECT_THAT(m.records[1].status.message(), HasSubstr("messages[0].content"));
}

TEST(ParseManifest, ExplicitRootWinsOverManifestFolder) {
  SourceSpec spec = Spec();
  spec.root = "/media/coco/";
  Manifest m = ParseOk(kGood, spec);
  EXPECT_EQ(m.root, "/media/coco");
  EXPECT_EQ(m.records[0].uri(), "/media/coco/images/a1.jpg");
}

TEST(ParseManifest, RelativeManifestResolvesAgainstCurrentDirectory) {
  SourceSpec spec = Spec();
  spec.manifest = "sub/./m.jsonl";
  Manifest m = ParseOk(kGood, spec);
  const std::string cwd = std::filesystem::current_path().lexically_normal().string();
  EXPECT_EQ(m.root, (cwd == "/" ? "" : cwd) + "/sub");
  EXPECT_EQ(m.records[0].uri(), m.root + "/images/a1.jpg");
}

TEST(ParseManifest, UriManifestResolvesAgainstItsPrefix) {
  SourceSpec spec = Spec();
  spec.manifest = "s3://bucket/sets/a/manifest.jsonl";
  Manifest m = ParseOk(kGood, spec);
  EXPECT_EQ(m.root, "s3://bucket/sets/a");
  EXPECT_EQ(m.records[0].uri(), "s3://bucket/sets/a/images/a1.jpg");
}

TEST(ParseManifest, AbsolutePathsInsideRootWhenAllowed) {
  SourceSpec spec = Spec();
  spec.allow_absolute_paths = true;
  Manifest m = ParseOk(R"({"id": 1, "image": "/data/set/a.jpg", "conversations": []})"
                       "\n"
                       R"({"id": 2, "image": "/elsewhere/b.jpg", "conversations": []})",
                       spec);
  EXPECT_EQ(m.records[0].uri(), "/data/set/a.jpg");
  EXPECT_EQ(m.records[1].status.code(), StatusCode::kPathEscape);
  EXPECT_THAT(m.records[1].status.message(), HasSubstr("line 2:"));
}

TEST(ParseManifest, FailsWhenNoRecords) {
  for (std::string_view text : {"", "\n\n  \n", "\r\n"}) {
    Result<Manifest> m = ParseManifest(BytesOf(text), "/d/m.jsonl", Spec());
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(m.status().message(), HasSubstr("/d/m.jsonl"));
  }
}

TEST(ParseManifest, AllBadLinesStillLoad) {
  Result<Manifest> m = ParseManifest(BytesOf("x\ny\n"), "/d/m.jsonl", Spec());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->bad_lines, 2);
}

// Most lines of a large file are parsed in place; those near the end through the
// padded scratch copy. Both must give the same records.
TEST(ParseManifest, ManyLinesInPlaceAndNearTheEnd) {
  std::string text;
  const int n = 5000;
  for (int i = 0; i < n; ++i) {
    text += R"({"id": )" + std::to_string(i) + R"(, "image": "i/)" + std::to_string(i) +
            R"(.jpg", "conversations": [{"from": "human", "value": "q"}, )" +
            R"({"from": "gpt", "value": ")" + std::string(i % 7, 'a') + "\"}]}\n";
  }
  Manifest m = ParseOk(text);
  ASSERT_EQ(m.records.size(), static_cast<size_t>(n));
  EXPECT_EQ(m.bad_lines, 0);
  for (int i = 0; i < n; ++i) {
    const SampleRecord& r = m.records[i];
    ASSERT_TRUE(r.status.ok()) << i << ": " << r.status.ToString();
    ASSERT_EQ(r.id, std::to_string(i));
    ASSERT_EQ(r.line, i + 1);
    ASSERT_EQ(r.uri(), "/data/set/i/" + std::to_string(i) + ".jpg");
    ASSERT_EQ(r.turns[1].text, std::string(i % 7, 'a'));
  }
}

// A truncated final line must not be completed by whatever follows it in memory.
TEST(ParseManifest, TruncatedLastLineIsBad) {
  const std::string full = std::string(kGood) + "\n" + std::string(kGood);
  Buffer whole = BytesOf(full);
  Manifest m = ParseOk(std::string_view(full).substr(0, full.size() - 1));
  ASSERT_EQ(m.records.size(), 2u);
  EXPECT_EQ(m.records[1].status.code(), StatusCode::kBadRecord);

  // The same through a slice of a longer buffer: the bytes after it are readable.
  Result<Manifest> sliced =
      ParseManifest(whole.Slice(0, kGood.size() - 1), "/data/set/m.jsonl", Spec());
  ASSERT_TRUE(sliced.ok());
  EXPECT_EQ(sliced->records[0].status.code(), StatusCode::kBadRecord);
}

// --- LoadManifest ---------------------------------------------------------------------

class MapStorage final : public Storage {
 public:
  std::map<std::string, std::string> files;
  void ReadAsync(std::string uri, ReadCallback done) override {
    auto it = files.find(uri);
    if (it == files.end()) return done(Status::NotFound("no such file: " + uri));
    done(BytesOf(it->second));
  }
  std::string_view name() const override { return "map"; }
};

TEST(ManifestMemoryBytes, CountsEveryRecordsStringsAndGrowsWithTheManifest) {
  auto manifest_of = [](int lines, const std::string& text) {
    std::string jsonl;
    for (int i = 0; i < lines; ++i) {
      jsonl += R"({"id": "record-with-a-long-id-)" + std::to_string(i) +
               R"(", "image": "images/some/deeper/folder/)" + std::to_string(i) +
               R"(.jpg", "conversations": [{"from": "human", "value": ")" + text +
               R"("}, {"from": "gpt", "value": "A cat."}]})" + "\n";
    }
    return ParseOk(jsonl);
  };
  const std::string text(200, 'x');
  const Manifest small = manifest_of(100, text);
  const Manifest large = manifest_of(1000, text);
  const size_t small_bytes = ManifestMemoryBytes(small);
  const size_t large_bytes = ManifestMemoryBytes(large);

  // At least what the containers hold: the records, and per record its id, path,
  // two turns and the long turn's text (with its terminating zero).
  size_t floor = 0;
  for (const SampleRecord& r : large.records) {
    floor += sizeof(SampleRecord) + r.id.size() + 1 + sizeof(MediaRef) + r.uri().size() + 1 +
             2 * sizeof(Turn) + text.size() + 1;
  }
  EXPECT_GE(large_bytes, floor);
  // And not wildly more: the heap's headers and rounding.
  EXPECT_LE(large_bytes, floor + 1000 * 5 * 32 + 4096);
  // Ten times the lines, about ten times the bytes.
  EXPECT_GT(large_bytes, 9 * small_bytes);
  EXPECT_LT(large_bytes, 11 * small_bytes);
}

TEST(LoadManifest, ReadsThroughStorage) {
  MapStorage storage;
  storage.files["/d/m.jsonl"] = std::string(kGood) + "\n";
  SourceSpec spec;
  spec.manifest = "/d/m.jsonl";
  Result<Manifest> m = LoadManifest(storage, spec);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->records.size(), 1u);
  EXPECT_EQ(m->records[0].uri(), "/d/images/a1.jpg");
}

TEST(LoadManifest, MissingFileIsNotFound) {
  MapStorage storage;
  SourceSpec spec;
  spec.manifest = "/d/missing.jsonl";
  Result<Manifest> m = LoadManifest(storage, spec);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("/d/missing.jsonl"));
}

TEST(LoadManifest, EmptyManifestPathIsInvalid) {
  MapStorage storage;
  Result<Manifest> m = LoadManifest(storage, SourceSpec{});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("source.manifest"));
}

// --- source.fields ----------------------------------------------------------------------

SourceSpec SpecWithFields() {
  SourceSpec spec;
  spec.manifest = "/data/set/manifest.jsonl";
  spec.fields = {
      {"image", FieldKind::kImage, "", 0, true},
      {"views", FieldKind::kImage, "more", 3, false},
      {"label", FieldKind::kInt, "", 0, false},
      {"score", FieldKind::kFloat, "", 0, false},
      {"caption", FieldKind::kText, "", 0, false},
      {"tags", FieldKind::kString, "", 2, false},
      {"chat", FieldKind::kConversation, "conversations", 0, false},
  };
  return spec;
}

Manifest ParseWith(const SourceSpec& spec, const std::string& text) {
  Result<Manifest> m = ParseManifest(*Buffer::CopyOf(text.data(), text.size()), spec.manifest, spec);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *std::move(m) : Manifest{};
}

TEST(ParseManifest, DeclaredFieldsFeedMediaListsScalarsAndText) {
  const Manifest m = ParseWith(
      SpecWithFields(),
      R"({"id": 1, "image": "a.jpg", "more": ["b.jpg", "c/d.png"], "label": 7, "score": 2,)"
      R"( "caption": "a cat", "tags": ["x", "y"],)"
      R"( "conversations": [{"from": "human", "value": "hi"}]})"
      "\n"
      R"({"id": 2, "image": "e.jpg", "more": [], "label": null})"
      "\n");
  ASSERT_EQ(m.records.size(), 2u);
  const SampleRecord& r = m.records[0];
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_EQ(r.media.size(), 3u);
  EXPECT_EQ(r.media[0].field, 0);
  EXPECT_EQ(r.media[0].uri, "/data/set/a.jpg");
  EXPECT_EQ(r.media[1].field, 1);
  EXPECT_EQ(r.media[1].uri, "/data/set/b.jpg");
  EXPECT_EQ(r.media[2].field, 1);
  EXPECT_EQ(r.media[2].uri, "/data/set/c/d.png");
  ASSERT_EQ(r.attributes.size(), 5u);
  EXPECT_EQ(r.attributes[0].field, 2);
  EXPECT_EQ(std::get<int64_t>(r.attributes[0].value), 7);
  EXPECT_EQ(r.attributes[1].field, 3);
  EXPECT_EQ(std::get<double>(r.attributes[1].value), 2.0);  // an integer reads as a float
  EXPECT_EQ(std::get<std::string>(r.attributes[2].value), "a cat");
  EXPECT_EQ(std::get<std::string>(r.attributes[3].value), "x");
  EXPECT_EQ(std::get<std::string>(r.attributes[4].value), "y");
  ASSERT_EQ(r.turns.size(), 1u);
  // Optional fields may be absent or null; an empty list is no items.
  const SampleRecord& r2 = m.records[1];
  ASSERT_TRUE(r2.status.ok()) << r2.status.ToString();
  EXPECT_EQ(r2.media.size(), 1u);
  EXPECT_TRUE(r2.attributes.empty());
  EXPECT_TRUE(r2.turns.empty());
}

TEST(ParseManifest, OneValueWhereAListIsDeclaredIsAListOfOne) {
  // LLaVA-style data: "image": "a.jpg" for one, a list for several, in one file.
  const Manifest m = ParseWith(SpecWithFields(),
                               R"({"id": 1, "image": "a.jpg", "more": "b.jpg", "tags": "x"})"
                               "\n"
                               R"({"id": 2, "image": "a.jpg", "more": ["b.jpg", "c.jpg"]})"
                               "\n");
  ASSERT_EQ(m.records.size(), 2u);
  const SampleRecord& one = m.records[0];
  ASSERT_TRUE(one.status.ok()) << one.status.ToString();
  ASSERT_EQ(one.media.size(), 2u);
  EXPECT_EQ(one.media[1].field, 1);
  EXPECT_EQ(one.media[1].uri, "/data/set/b.jpg");
  ASSERT_EQ(one.attributes.size(), 1u);
  EXPECT_EQ(std::get<std::string>(one.attributes[0].value), "x");
  EXPECT_EQ(m.records[1].media.size(), 3u);
}

TEST(ParseManifest, DeclaredFieldErrorsAreNamedPerRecord) {
  const Manifest m = ParseWith(SpecWithFields(),
                               R"({"id": 1, "more": []})"
                               "\n"
                               R"({"id": 2, "image": "a.jpg", "label": "seven"})"
                               "\n"
                               R"({"id": 3, "image": "a.jpg", "more": ["1", "2", "3", "4"]})"
                               "\n"
                               R"({"id": 4, "image": "a.jpg", "more": 7})"
                               "\n"
                               R"({"id": 5, "image": "a.jpg", "tags": ["x", 3]})"
                               "\n"
                               R"({"id": 6, "image": "a.jpg", "more": ["../../x.jpg"]})"
                               "\n");
  ASSERT_EQ(m.records.size(), 6u);
  EXPECT_EQ(m.bad_lines, 6);
  EXPECT_EQ(m.records[0].status.code(), StatusCode::kMissingField);
  EXPECT_THAT(m.records[0].status.message(), HasSubstr("missing field 'image'"));
  EXPECT_EQ(m.records[1].status.code(), StatusCode::kMissingField);
  EXPECT_THAT(m.records[1].status.message(), HasSubstr("'label' must be an integer"));
  EXPECT_EQ(m.records[2].status.code(), StatusCode::kBadRecord);
  EXPECT_THAT(m.records[2].status.message(), HasSubstr("4 items, more than its max_items 3"));
  // One value where a list is declared is a list of one; a value of the wrong kind is
  // still refused.
  EXPECT_THAT(m.records[3].status.message(), HasSubstr("'more' must be a string"));
  EXPECT_THAT(m.records[4].status.message(), HasSubstr("'tags[1]' must be a string"));
  EXPECT_EQ(m.records[5].status.code(), StatusCode::kPathEscape);
  for (const SampleRecord& r : m.records) {
    EXPECT_TRUE(r.media.empty() && r.attributes.empty() && r.turns.empty());
  }
}

TEST(ParseManifest, AFieldWithSeveralKeysReadsWhicheverARecordHolds) {
  // LLaVA data as it comes: "image" for one, "images" for several, neither for text only.
  SourceSpec spec;
  spec.manifest = "/data/set/manifest.jsonl";
  spec.fields = {{"images", FieldKind::kImage, "images,image", 4, false},
                 {"conversation", FieldKind::kConversation, "conversations", 0, true}};
  const std::string turns = R"("conversations": [{"from": "human", "value": "hi"}])";
  const Manifest m = ParseWith(
      spec, R"({"id": 1, "image": "a.jpg", )" + turns + "}\n" +
                R"({"id": 2, "images": ["b.jpg", "c.jpg"], )" + turns + "}\n" +
                R"({"id": 3, )" + turns + "}\n" +
                R"({"id": 4, "image": null, "images": ["d.jpg"], )" + turns + "}\n" +
                R"({"id": 5, "image": "a.jpg", "images": ["b.jpg"], )" + turns + "}\n" +
                R"({"id": 6, "image": "a.jpg"})" + "\n");
  ASSERT_EQ(m.records.size(), 6u);
  for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(m.records[i].status.ok()) << i;
  ASSERT_EQ(m.records[0].media.size(), 1u);
  EXPECT_EQ(m.records[0].media[0].uri, "/data/set/a.jpg");
  EXPECT_EQ(m.records[0].media[0].field, 0);
  ASSERT_EQ(m.records[1].media.size(), 2u);
  EXPECT_EQ(m.records[1].media[1].uri, "/data/set/c.jpg");
  EXPECT_TRUE(m.records[2].media.empty());  // text only: no items, no error
  EXPECT_EQ(m.records[2].turns.size(), 1u);
  ASSERT_EQ(m.records[3].media.size(), 1u);  // a null key counts as absent
  EXPECT_EQ(m.records[4].status.code(), StatusCode::kBadRecord);
  EXPECT_THAT(m.records[4].status.message(),
              HasSubstr("line 5: fields 'images' and 'image' are both present; field 'images' "
                        "reads one of them"));
  EXPECT_EQ(m.records[5].status.code(), StatusCode::kMissingField);
  EXPECT_THAT(m.records[5].status.message(), HasSubstr("missing field 'conversations'"));

  spec.fields[0].required = true;
  const Manifest required = ParseWith(spec, R"({"id": 3, )" + turns + "}\n");
  EXPECT_THAT(required.records[0].status.message(),
              HasSubstr("missing field 'images' or 'image'"));
}

// --- a manifest that is one JSON array ------------------------------------------------

// `n` LLaVA-style records whose strings hold what a naive scan would take for structure
// (brackets, commas, escaped quotes and backslashes), some of them bad.
std::vector<std::string> TrickyRecords(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    const std::string id = std::to_string(i);
    switch (i % 7) {
      case 3:
        out.push_back(R"({"id": ")" + id + R"(", "conversations": "not a list"})");
        break;
      case 5:
        out.push_back(R"({"id": ")" + id + R"(", "image": "../x.jpg", "conversations": []})");
        break;
      default:
        out.push_back(R"({"id": ")" + id + R"(", "image": "i/)" + id +
                      R"(.jpg", "conversations": [{"from": "human", "value": "<image>\n] }, {\"q\\\": [)" +
                      id + R"("}, {"from": "gpt", "value": "\\"}]})");
    }
  }
  return out;
}

std::string AsArray(const std::vector<std::string>& records, bool pretty) {
  std::string t = pretty ? "\xEF\xBB\xBF \n[\n  " : "[";
  for (size_t i = 0; i < records.size(); ++i) {
    if (i > 0) t += pretty ? " ,\r\n  " : ",";
    t += records[i];
  }
  return t + (pretty ? "\n]\n" : "]");
}

TEST(ParseManifest, AJsonArrayGivesTheRecordsItsElementsWouldGiveAsLines) {
  const std::vector<std::string> records = TrickyRecords(50);
  std::string jsonl;
  for (const std::string& r : records) jsonl += r + "\n";
  const Manifest lines = ParseOk(jsonl);
  for (const bool pretty : {false, true}) {
    SCOPED_TRACE(pretty ? "pretty" : "compact");
    const Manifest array = ParseOk(AsArray(records, pretty));
    ASSERT_EQ(array.records.size(), lines.records.size());
    EXPECT_EQ(array.bad_lines, lines.bad_lines);
    EXPECT_GT(array.bad_lines, 0);
    for (size_t i = 0; i < records.size(); ++i) {
      const SampleRecord& a = array.records[i];
      const SampleRecord& l = lines.records[i];
      EXPECT_EQ(a.id, l.id);
      EXPECT_EQ(a.uri(), l.uri());
      EXPECT_EQ(a.line, static_cast<int64_t>(i) + 1);
      ASSERT_EQ(a.turns.size(), l.turns.size());
      for (size_t t = 0; t < a.turns.size(); ++t) EXPECT_EQ(a.turns[t].text, l.turns[t].text);
      EXPECT_EQ(a.status.code(), l.status.code());
      if (!a.status.ok()) {
        // The same message, named by the element's index instead of the line.
        const std::string want =
            "element " + std::to_string(i) + l.status.message().substr(l.status.message().find(':'));
        EXPECT_EQ(a.status.message(), want);
      }
    }
  }
  EXPECT_EQ(lines.records[0].turns[0].text, "<image>\n] }, {\"q\\\": [0");
  EXPECT_EQ(lines.records[0].turns[1].text, "\\");
}

TEST(ParseManifest, AMalformedElementIsItsOwnBadRecordNamedByIndex) {
  const Manifest m = ParseOk(std::string("[") + std::string(kGood) + R"(, {"id": "x", "image": } ,)" +
                             R"( 42, , [1, 2], {"id": "y", "conversations": []}, "text")" + "]");
  ASSERT_EQ(m.records.size(), 7u);
  EXPECT_EQ(m.bad_lines, 5);
  EXPECT_TRUE(m.records[0].status.ok());
  EXPECT_EQ(m.records[1].status.code(), StatusCode::kBadRecord);
  EXPECT_THAT(m.records[1].status.message(), HasSubstr("element 1: invalid JSON"));
  EXPECT_THAT(m.records[2].status.message(), HasSubstr("element 2: expected a JSON object"));
  EXPECT_EQ(m.records[3].status.code(), StatusCode::kBadRecord);
  EXPECT_THAT(m.records[3].status.message(), HasSubstr("element 3: no value"));
  EXPECT_THAT(m.records[4].status.message(), HasSubstr("element 4: expected a JSON object, got an array"));
  EXPECT_TRUE(m.records[5].status.ok());
  EXPECT_EQ(m.records[5].id, "y");
  EXPECT_THAT(m.records[6].status.message(), HasSubstr("element 6: expected a JSON object"));
}

TEST(ParseManifest, ATruncatedOrOverlongArrayFailsTheLoadNamingTheByte) {
  const SourceSpec spec = Spec();
  const auto fails = [&](const std::string& text, const std::string& what) {
    SCOPED_TRACE(text);
    Result<Manifest> m = ParseManifest(BytesOf(text), spec.manifest, spec);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kCorruptData);
    EXPECT_THAT(m.status().message(), HasSubstr(what));
  };
  const std::string good(kGood);
  const std::string two = "[" + good + ", " + good;
  fails(two, "byte " + std::to_string(good.size() + 3) + ": the JSON array is not closed: element 1");
  fails(two + ",", "element 2, which starts here, runs to the end of the file");
  fails(two.substr(0, two.size() - 5), "a string of element 1 runs to the end of the file");
  fails("[" + good + "] x", "byte " + std::to_string(good.size() + 3) +
                                ": more after the JSON array's closing ']'");
  fails("[" + good + "]\n[" + good + "]", "more after the JSON array");
  // No element at all is the empty manifest's error.
  Result<Manifest> empty = ParseManifest(BytesOf(" [ \n ] \n"), spec.manifest, spec);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("an empty JSON array"));
}

TEST(ManifestLayoutOf, AnArrayIsAFileWhoseFirstByteIsABracket) {
  EXPECT_EQ(ManifestLayoutOf("[{}]"), ManifestLayout::kArray);
  EXPECT_EQ(ManifestLayoutOf("\xEF\xBB\xBF\n\t [\n"), ManifestLayout::kArray);
  EXPECT_EQ(ManifestLayoutOf(kGood), ManifestLayout::kLines);
  EXPECT_EQ(ManifestLayoutOf(""), ManifestLayout::kLines);
  EXPECT_EQ(ManifestLayoutOf("\n\n"), ManifestLayout::kLines);
}

TEST(ParseManifest, DefaultFieldsAreTheLlavaPair) {
  SourceSpec spec;
  const std::vector<SourceField> fields = SourceFieldsOf(spec);
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[kImageField].name, "image");
  EXPECT_EQ(fields[kImageField].kind, FieldKind::kImage);
  EXPECT_EQ(fields[kConversationField].name, "conversation");
  EXPECT_EQ(fields[kConversationField].kind, FieldKind::kConversation);
}

}  // namespace
}  // namespace headrace
