#include "headrace/formats/tar_shard.h"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

// Its own namespace: the folder's tests compile as one unity file (CMakeLists.txt).
namespace headrace::tar_shard_test {
namespace {

namespace fs = std::filesystem;

fs::path TempPath(const std::string& name) {
  const char* env = std::getenv("HEADRACE_TEST_TMP");
  const fs::path dir =
      fs::path(env != nullptr ? env : "/tmp") / ("tar_shard_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

std::vector<uint8_t> ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  const std::string s = out.str();
  return {s.begin(), s.end()};
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

struct NamedData {
  std::string name;
  std::string data;
};

std::vector<uint8_t> WriteTar(const std::string& file, const std::vector<NamedData>& members) {
  const fs::path path = TempPath(file);
  auto writer = TarWriter::Open(path.string());
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  for (const NamedData& m : members) {
    EXPECT_TRUE((*writer)->Add(m.name, Bytes(m.data)).ok());
  }
  auto size = (*writer)->Close();
  EXPECT_TRUE(size.ok()) << size.status().ToString();
  std::vector<uint8_t> bytes = ReadBytes(path);
  EXPECT_EQ(*size, static_cast<int64_t>(bytes.size()));
  return bytes;
}

std::string Slice(const std::vector<uint8_t>& bytes, int64_t offset, int64_t size) {
  return std::string(reinterpret_cast<const char*>(bytes.data()) + offset, size);
}

std::vector<NamedData> Members() {
  return {
      {"000000.jpg", std::string(1000, 'j')},
      {"000000.json", R"({"id":"000000"})"},
      {"000001.jpg", std::string(512, 'k')},  // exactly one block
      {"000001.json", ""},                    // empty member
      // Longer than ustar's 100-character name: libarchive writes a pax header first.
      {std::string(120, 'd') + "/000002.seg.png", std::string(7, 'p')},
  };
}

TEST(ListTarMembers, OffsetsPointAtEachMembersBytes) {
  const std::vector<NamedData> members = Members();
  const std::vector<uint8_t> tar = WriteTar("round_trip.tar", members);
  const TarListing listing = ListTarMembers(tar);
  ASSERT_TRUE(listing.status.ok()) << listing.status.ToString();
  ASSERT_EQ(listing.members.size(), members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const TarMember& m = listing.members[i];
    EXPECT_EQ(m.name, members[i].name);
    EXPECT_EQ(m.size, static_cast<int64_t>(members[i].data.size()));
    EXPECT_EQ(m.offset % 512, 0) << m.name;
    EXPECT_EQ(Slice(tar, m.offset, m.size), members[i].data) << m.name;
  }
}

// An archive as other tools write them: `format` (libarchive's GNU, full pax with times,
// or plain ustar), a folder and a symbolic link before the files.
std::vector<uint8_t> WriteForeignTar(int format, const std::vector<NamedData>& members) {
  std::vector<uint8_t> out(1 << 20);
  size_t used = 0;
  archive* a = archive_write_new();
  EXPECT_EQ(archive_write_set_format(a, format), ARCHIVE_OK);
  EXPECT_EQ(archive_write_open_memory(a, out.data(), out.size(), &used), ARCHIVE_OK);
  const auto header = [&](const std::string& name, int type, int64_t size) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, size);
    archive_entry_set_mtime(e, 1700000000, 123);
    if (type == AE_IFLNK) archive_entry_set_symlink(e, "elsewhere");
    EXPECT_EQ(archive_write_header(a, e), ARCHIVE_OK) << archive_error_string(a);
    archive_entry_free(e);
  };
  header("folder", AE_IFDIR, 0);
  header("link.txt", AE_IFLNK, 0);
  for (const NamedData& m : members) {
    header(m.name, AE_IFREG, static_cast<int64_t>(m.data.size()));
    if (!m.data.empty()) archive_write_data(a, m.data.data(), m.data.size());
  }
  EXPECT_EQ(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
  out.resize(used);
  return out;
}

TEST(ListTarMembers, ReadsGnuPaxAndUstarArchivesSkippingFoldersAndLinks) {
  std::vector<NamedData> members = Members();
  for (const int format :
       {ARCHIVE_FORMAT_TAR_GNUTAR, ARCHIVE_FORMAT_TAR_PAX_INTERCHANGE, ARCHIVE_FORMAT_TAR_USTAR}) {
    SCOPED_TRACE(format);
    // ustar cannot hold the long name: drop it there.
    if (format == ARCHIVE_FORMAT_TAR_USTAR) members.pop_back();
    const std::vector<uint8_t> tar = WriteForeignTar(format, members);
    const TarListing listing = ListTarMembers(tar);
    ASSERT_TRUE(listing.status.ok()) << listing.status.ToString();
    ASSERT_EQ(listing.members.size(), members.size());
    for (size_t i = 0; i < members.size(); ++i) {
      const TarMember& m = listing.members[i];
      EXPECT_EQ(m.name, members[i].name);
      EXPECT_EQ(Slice(tar, m.offset, m.size), members[i].data) << m.name;
    }
  }
}

TEST(TarWriter, SameMembersGiveSameBytes) {
  EXPECT_EQ(WriteTar("a.tar", Members()), WriteTar("b.tar", Members()));
}

TEST(ListTarMembers, TruncatedLastMemberIsNamedAndEarlierMembersKept) {
  std::vector<uint8_t> tar =
      WriteTar("truncated.tar", {{"a.txt", "alpha"}, {"b.bin", std::string(3000, 'b')}});
  const TarListing whole = ListTarMembers(tar);
  ASSERT_TRUE(whole.status.ok());
  tar.resize(whole.members[1].offset + 1000);  // inside b.bin's data
  const TarListing cut = ListTarMembers(tar);
  EXPECT_EQ(cut.status.code(), StatusCode::kCorruptData);
  EXPECT_NE(cut.status.message().find("b.bin"), std::string::npos) << cut.status.ToString();
  EXPECT_NE(cut.status.message().find("header at offset 1024"), std::string::npos)
      << cut.status.ToString();
  ASSERT_EQ(cut.members.size(), 1u);
  EXPECT_EQ(cut.members[0].name, "a.txt");
}

TEST(ListTarMembers, TruncatedHeaderIsCorruptData) {
  std::vector<uint8_t> tar = WriteTar("cut_header.tar", {{"a.txt", "alpha"}, {"b.txt", "beta"}});
  tar.resize(1024 + 100);  // a.txt's header and data, then part of b.txt's header
  const TarListing cut = ListTarMembers(tar);
  EXPECT_EQ(cut.status.code(), StatusCode::kCorruptData) << cut.status.ToString();
  EXPECT_NE(cut.status.message().find("offset 1024, after member 'a.txt'"), std::string::npos)
      << cut.status.ToString();
  ASSERT_EQ(cut.members.size(), 1u);
}

// A ustar header for `name` declaring `size` in GNU's base-256 form (any int64).
std::vector<uint8_t> HeaderDeclaring(const std::string& name, int64_t size) {
  std::vector<uint8_t> h(512, 0);
  std::memcpy(h.data(), name.data(), name.size());
  std::memcpy(h.data() + 100, "0000644", 8);  // mode
  std::memcpy(h.data() + 108, "0000000", 8);  // uid
  std::memcpy(h.data() + 116, "0000000", 8);  // gid
  h[124] = 0x80;                              // size, base-256, big-endian
  for (int i = 0; i < 8; ++i) h[135 - i] = static_cast<uint8_t>(size >> (8 * i));
  std::memcpy(h.data() + 136, "00000000000", 12);  // mtime
  h[156] = '0';                                    // regular file
  std::memcpy(h.data() + 257, "ustar", 6);
  std::memcpy(h.data() + 263, "00", 2);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (uint8_t c : h) sum += c;
  std::snprintf(reinterpret_cast<char*>(h.data()) + 148, 8, "%06o", sum);
  return h;
}

TEST(ListTarMembers, HugeDeclaredSizeIsTruncationNotOverflow) {
  for (const int64_t size : {int64_t{1} << 40, INT64_MAX}) {
    std::vector<uint8_t> tar = HeaderDeclaring("big.bin", size);
    tar.resize(tar.size() + 2048, 'x');
    const TarListing listing = ListTarMembers(tar);
    EXPECT_EQ(listing.status.code(), StatusCode::kCorruptData) << listing.status.ToString();
    // libarchive rejects INT64_MAX itself; smaller sizes reach the range check.
    if (size != INT64_MAX) {
      EXPECT_NE(listing.status.message().find("'big.bin'"), std::string::npos)
          << listing.status.ToString();
    }
    EXPECT_TRUE(listing.members.empty());
  }
}

TEST(ListTarMembers, NonTarInputIsAStatus) {
  const std::string text(4096, 'x');
  const TarListing listing = ListTarMembers(Bytes(text));
  EXPECT_EQ(listing.status.code(), StatusCode::kUnsupportedFormat) << listing.status.ToString();
  EXPECT_TRUE(listing.members.empty());
  const TarListing empty = ListTarMembers({});
  EXPECT_TRUE(empty.members.empty());
}

std::vector<TarMember> Named(std::initializer_list<const char*> names) {
  std::vector<TarMember> members;
  int64_t offset = 512;
  for (const char* name : names) {
    members.push_back({name, offset, 10});
    offset += 1024;
  }
  return members;
}

TEST(GroupSamples, GroupsConsecutiveMembersByKeyKeepingTheFolder) {
  const auto samples = GroupSamples(
      Named({"a/000017.jpg", "a/000017.json", "a/000017.seg.png", "b/000017.jpg", "x.y/1.txt"}));
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].key, "a/000017");
  ASSERT_EQ(samples[0].fields.size(), 3u);
  EXPECT_EQ(samples[0].fields[0].name, "jpg");
  EXPECT_EQ(samples[0].fields[2].name, "seg.png");
  EXPECT_EQ(samples[0].fields[2].offset, 512 + 2 * 1024);
  EXPECT_EQ(samples[1].key, "b/000017");
  EXPECT_EQ(samples[2].key, "x.y/1");  // a dot in the folder is not the key's end
  EXPECT_EQ(samples[2].fields[0].name, "txt");
  for (const TarSample& s : samples) EXPECT_TRUE(s.status.ok()) << s.status.ToString();
}

TEST(GroupSamples, KeySeenAgainLaterMarksOnlyThatSample) {
  const auto samples = GroupSamples(Named({"1.jpg", "2.jpg", "1.json", "3.jpg"}));
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_TRUE(samples[0].status.ok());
  EXPECT_TRUE(samples[1].status.ok());
  EXPECT_EQ(samples[2].status.code(), StatusCode::kBadRecord);
  EXPECT_NE(samples[2].status.message().find("1.json"), std::string::npos);
  EXPECT_TRUE(samples[3].status.ok());
}

TEST(GroupSamples, DuplicateFieldAndMissingFieldAreNamed) {
  const std::vector<std::string> required = {"jpg", "json"};
  const auto samples = GroupSamples(
      Named({"1.jpg", "1.json", "1.jpg", "2.jpg", "3.json", "3.jpg", "4", ".json"}), required);
  ASSERT_EQ(samples.size(), 5u);
  EXPECT_EQ(samples[0].status.code(), StatusCode::kBadRecord);
  EXPECT_NE(samples[0].status.message().find("field 'jpg' appears twice"), std::string::npos);
  EXPECT_EQ(samples[1].status.code(), StatusCode::kMissingField);  // 2.jpg has no partner
  EXPECT_NE(samples[1].status.message().find("'json'"), std::string::npos);
  EXPECT_TRUE(samples[2].status.ok());                          // field order does not matter
  EXPECT_EQ(samples[3].status.code(), StatusCode::kBadRecord);  // "4": no field
  EXPECT_EQ(samples[4].status.code(), StatusCode::kBadRecord);  // ".json": no key
}

// Tar names are bytes; keys and fields go to the index (JSON) and to Python as text. A
// sample with a name that is not UTF-8 is its error, and the index of the others parses
// (found by make fuzz-smoke's tar target: the index written did not parse back).
TEST(GroupSamples, ANameThatIsNotUtf8IsItsSamplesErrorAndTheIndexStillParses) {
  const auto samples =
      GroupSamples(Named({"1.jpg", "\xff\xfe.jpg", "3.jp\xc3", "4/\xc3\xa9t\xc3\xa9.jpg"}));
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_TRUE(samples[0].status.ok());
  EXPECT_EQ(samples[1].status.code(), StatusCode::kBadRecord);
  EXPECT_NE(samples[1].status.message().find("not UTF-8"), std::string::npos);
  // Its key, which names it in its error's URI, the report and Python, is UTF-8: each
  // invalid byte is U+FFFD (Loader.__next__ raised UnicodeDecodeError on the raw bytes).
  EXPECT_EQ(samples[1].key, "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(samples[2].status.code(), StatusCode::kBadRecord);  // a field cut mid-character
  EXPECT_TRUE(samples[3].status.ok()) << samples[3].status.ToString();  // UTF-8: fine
  const Result<ShardIndex> parsed =
      ParseShardIndex(ShardIndexToJson(MakeShardIndex("s.tar", 1 << 20, samples)));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->samples.size(), 2u);
  EXPECT_EQ(parsed->samples[1].key, "4/\xc3\xa9t\xc3\xa9");
}

TEST(ShardIndex, JsonRoundTripKeepsSamplesAndFieldOrder) {
  const auto samples = GroupSamples(Named({"1.jpg", "1.json", "2.jpg", "2.jpg", "3.txt"}));
  const ShardIndex index = MakeShardIndex("shard-000000.tar", 10000, samples);
  ASSERT_EQ(index.samples.size(), 2u);  // sample 2 has a duplicate field
  const std::string json = ShardIndexToJson(index);
  auto parsed = ParseShardIndex(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->shard, "shard-000000.tar");
  EXPECT_EQ(parsed->bytes, 10000);
  ASSERT_EQ(parsed->samples.size(), 2u);
  EXPECT_EQ(parsed->samples[0].key, "1");
  ASSERT_EQ(parsed->samples[0].fields.size(), 2u);
  EXPECT_EQ(parsed->samples[0].fields[1].name, "json");
  EXPECT_EQ(parsed->samples[0].fields[1].offset, 512 + 1024);
  EXPECT_EQ(parsed->samples[0].fields[1].size, 10);
  EXPECT_EQ(parsed->samples[1].key, "3");
  EXPECT_EQ(ShardIndexToJson(*parsed), json);
}

TEST(ListTarMembers, ADamagedHeaderNamesTheMemberItBelongsTo) {
  std::vector<uint8_t> tar = WriteTar(
      "damaged_header.tar", {{"a.jpg", "A"}, {"a.json", "{}"}, {"b.jpg", "B"}, {"b.json", "{}"}});
  const TarListing whole = ListTarMembers(tar);
  ASSERT_TRUE(whole.status.ok());
  const int64_t b_header = whole.members[2].offset - 512;
  tar[static_cast<size_t>(b_header) + 148] ^= 0x7;  // its checksum field: the header fails
  const TarListing damaged = ListTarMembers(tar);
  ASSERT_EQ(damaged.status.code(), StatusCode::kCorruptData) << damaged.status.ToString();
  ASSERT_EQ(damaged.members.size(), 2u);
  EXPECT_EQ(damaged.damaged_member, "b.jpg");
  EXPECT_EQ(damaged.damaged_offset, b_header);
  EXPECT_EQ(TarSampleKey(damaged.damaged_member), "b");
  EXPECT_EQ(TarSampleKey("a/000017.seg.png"), "a/000017");
}

// An index as MakeShardIndex writes it for a shard of `bytes` bytes, with `samples`
// samples whose one field is (offset, size).
std::string IndexOf(int64_t bytes, const std::vector<std::pair<int64_t, int64_t>>& fields) {
  ShardIndex index;
  index.shard = "s.tar";
  index.bytes = bytes;
  for (size_t i = 0; i < fields.size(); ++i) {
    index.samples.push_back(
        {std::to_string(i), {TarField{"jpg", fields[i].first, fields[i].second}}});
  }
  return ShardIndexToJson(index);
}

TEST(ShardIndex, IsCheckedAgainstTheShardsRealSize) {
  const std::string good = IndexOf(4096, {{512, 10}, {1536, 600}});
  EXPECT_TRUE(ParseShardIndex(good, 4096).ok()) << ParseShardIndex(good, 4096).status().ToString();
  // Another size than the shard's (a stale index, or one that lies about its shard).
  for (int64_t real : {4095, 4097, 1 << 20}) {
    const auto parsed = ParseShardIndex(good, real);
    ASSERT_EQ(parsed.status().code(), StatusCode::kBadRecord);
    EXPECT_NE(parsed.status().message().find("the shard has " + std::to_string(real)),
              std::string::npos)
        << parsed.status().ToString();
  }
  // Fields where no tar member's data can be: off a block, before a header's room, out of
  // archive order or overlapping the previous member.
  for (const auto& fields : std::vector<std::vector<std::pair<int64_t, int64_t>>>{
           {{0, 10}}, {{513, 10}}, {{1536, 10}, {512, 10}}, {{512, 600}, {1024, 10}}}) {
    const auto parsed = ParseShardIndex(IndexOf(4096, fields), 4096);
    EXPECT_EQ(parsed.status().code(), StatusCode::kBadRecord) << IndexOf(4096, fields);
  }
  // A sample without fields holds no member.
  EXPECT_EQ(ParseShardIndex(R"({"format":"headrace.shard_index","version":1,"shard":"s",)"
                            R"("bytes":4096,"samples":[{"key":"1","fields":{}}]})",
                            4096)
                .status()
                .code(),
            StatusCode::kBadRecord);
  // Without the shard's size the old rules only (what the fuzz target checks).
  EXPECT_TRUE(ParseShardIndex(IndexOf(4096, {{0, 10}})).ok());
}

TEST(ShardIndex, ListingNoSamplesForAShardWithMembersIsALie) {
  // An empty tar is 1024 bytes, or 10240 padded to GNU tar's record: no samples is true.
  for (int64_t bytes : {1024, 10240}) {
    EXPECT_TRUE(ParseShardIndex(IndexOf(bytes, {}), bytes).ok()) << bytes;
  }
  const auto parsed = ParseShardIndex(IndexOf(1 << 20, {}), 1 << 20);
  ASSERT_EQ(parsed.status().code(), StatusCode::kBadRecord);
  EXPECT_NE(parsed.status().message().find("lists no samples, but its shard holds 1048576"),
            std::string::npos)
      << parsed.status().ToString();
}

TEST(ShardIndex, AMillionEntriesForASmallShardStopAtTheFirstThatCannotFit) {
  // Every entry inside the claimed bytes, so only the shard's real size refuses them; the
  // walk stops at the entry past the shard's end.
  std::vector<std::pair<int64_t, int64_t>> fields;
  for (int64_t i = 0; i < 1'000'000; ++i) fields.emplace_back(512 + i * 1024, 1);
  const std::string lying = IndexOf(int64_t{1} << 40, fields);
  const auto parsed = ParseShardIndex(lying, 20480);
  ASSERT_EQ(parsed.status().code(), StatusCode::kBadRecord);
  EXPECT_NE(parsed.status().message().find("'bytes' is 1099511627776"), std::string::npos)
      << parsed.status().ToString();
  EXPECT_GT(static_cast<int64_t>(lying.size()), MaxShardIndexBytes(20480));
  EXPECT_EQ(MaxShardIndexBytes(20480), 2 * 20480 + 65536);
}

TEST(ShardIndex, RejectsMalformedIndexes) {
  for (const char* bad : {
           "not json",
           R"({"format":"other","version":1,"shard":"s","bytes":10,"samples":[]})",
           R"({"format":"headrace.shard_index","version":2,"shard":"s","bytes":10,"samples":[]})",
           R"({"format":"headrace.shard_index","version":1,"bytes":10,"samples":[]})",
           R"({"format":"headrace.shard_index","version":1,"shard":"s","bytes":10,)"
           R"("samples":[{"key":"1","fields":{"jpg":[8,5]}}]})",
           R"({"format":"headrace.shard_index","version":1,"shard":"s","bytes":10,)"
           R"("samples":[{"key":"1","fields":{"jpg":[-1,5]}}]})",
           R"({"format":"headrace.shard_index","version":1,"shard":"s","bytes":10,)"
           R"("samples":[{"fields":{}}]})",
       }) {
    auto parsed = ParseShardIndex(bad);
    EXPECT_EQ(parsed.status().code(), StatusCode::kBadRecord) << bad;
  }
}

}  // namespace
}  // namespace headrace::tar_shard_test
