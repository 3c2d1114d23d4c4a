// Sample: one record of a dataset as it moves through the engine.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {

// Who speaks a conversation turn.
enum class Role {
  kSystem,     // instructions before the conversation; never trained on
  kUser,       // the human turn ("from": "human"/"user")
  kAssistant,  // the model's turn ("from": "gpt"/"assistant"): the SFT loss covers these
};

struct Turn {
  Role role = Role::kUser;
  std::string text;
};

// What a source field holds. Media kinds are read from storage as encoded bytes before
// the chain runs; the others are values the source parses itself.
enum class FieldKind {
  kImage,
  kVideo,
  kAudio,
  kPointCloud,
  kBytes,         // media of no particular kind: the bytes as they are
  kText,          // a string the chain reads (a caption, a document)
  kConversation,  // chat turns (SampleRecord::turns)
  kInt,           // scalars: passed through to the batch
  kFloat,
  kString,
};

// Whether fields of `kind` are fetched from storage (MediaRef) rather than parsed inline.
constexpr bool IsMediaKind(FieldKind kind) {
  return kind == FieldKind::kImage || kind == FieldKind::kVideo || kind == FieldKind::kAudio ||
         kind == FieldKind::kPointCloud || kind == FieldKind::kBytes;
}

// One named field a source declares: what it holds and how many items a sample has.
struct SourceField {
  std::string name;  // the value's name in the chain ("image", "frames", "conversation")
  FieldKind kind = FieldKind::kImage;
  // 0: one item (or none, when the record lacks it); N > 0: a list of up to N items.
  int max_items = 0;
};

// Where the bytes of one media item are: a whole object, or a byte range of one (a
// member of a tar shard).
struct MediaRef {
  int field = 0;        // index into the source's fields
  std::string uri;      // resolved location: a local path or a URI
  int64_t offset = 0;   // first byte within the object
  int64_t length = -1;  // bytes from offset; -1: the whole object
};

// A value the source parsed inline for a non-media field (text, string, int, float).
// A list field has one entry per item, in list order.
struct Attribute {
  int field = 0;  // index into the source's fields
  std::variant<int64_t, double, std::string> value;
};

// A parsed record of a source. Immutable after the source is loaded; shared by all
// epochs.
struct SampleRecord {
  std::string id;
  // The media items to read before the chain runs, grouped by field in the source's
  // field order; a list field has its items in list order. Empty for a text-only record.
  std::vector<MediaRef> media;
  std::vector<Turn> turns;
  // Values of the text and scalar fields, grouped by field in the source's order.
  std::vector<Attribute> attributes;
  // Not ok when the manifest line could not be parsed or resolved; the sample then fails
  // with this status whenever an epoch reaches it, so errors keep their (epoch, index).
  Status status;
  // 1-based line number in the manifest, for messages.
  int64_t line = 0;
  // Where the record is, for messages, when its first media URI does not say (a sample
  // of a tar shard: "s3://b/shard-000003.tar#000017"); empty for a manifest's records.
  std::string location;

  // The URI that names this record in messages: its location when set, else its first
  // media item's, else empty.
  const std::string& uri() const;
};

// One sample in flight: which record, in which epoch, with its fetched bytes.
struct Sample {
  int64_t epoch = 0;
  int64_t index = 0;  // position in the dataset (the manifest line order), not in the epoch
  const SampleRecord* record = nullptr;
  // Encoded bytes as read from storage, one per record->media item (same order);
  // decoders read them in place.
  std::vector<Buffer> media;
  // The conversation, when the source parses it at run time (a shard's .json member)
  // rather than holding it in the record; see Conversation().
  std::vector<Turn> turns;
  bool has_parsed_turns = false;
  // The text and scalar values, when the source reads them at run time (the cells of a
  // Parquet row group) rather than holding them in the record; see Attributes().
  std::vector<Attribute> attributes;
  bool has_parsed_attributes = false;
  // Media the source puts in place at run time, by source field (the bytes cells of a
  // Parquet row group, slices of the decoded column); MediaOf() looks here first.
  struct FieldMedia {
    int field = 0;
    Buffer bytes;
  };
  std::vector<FieldMedia> parsed_media;

  // The sample's conversation: the parsed one when there is one, else the record's.
  const std::vector<Turn>& Conversation() const {
    return has_parsed_turns || record == nullptr ? turns : record->turns;
  }
  // The sample's text and scalar values: the parsed ones when there are, else the
  // record's.
  const std::vector<Attribute>& Attributes() const {
    return has_parsed_attributes || record == nullptr ? attributes : record->attributes;
  }
  // The bytes of the first media item of source field `field`: a parsed one, else the
  // record's; null when there is none.
  const Buffer* MediaOf(int field) const;
  // Calls f(const Buffer& bytes, const std::string& uri) for each media item of source
  // field `field`, in list order: the parsed ones when there are, else the record's.
  // The URI is the item's own, or the record's for a parsed item.
  template <typename F>
  void ForEachMedia(int field, F&& f) const {
    static const std::string kNone;
    bool parsed = false;
    for (const FieldMedia& m : parsed_media) {
      if (m.field != field) continue;
      parsed = true;
      f(m.bytes, record != nullptr ? record->uri() : kNone);
    }
    if (parsed || record == nullptr) return;
    const size_t n = media.size() < record->media.size() ? media.size() : record->media.size();
    for (size_t i = 0; i < n; ++i) {
      if (record->media[i].field == field) f(media[i], record->media[i].uri);
    }
  }
};

// A sample that was skipped, with enough to find it again.
struct SampleError {
  int64_t epoch = 0;
  int64_t index = 0;
  std::string uri;
  Status status;  // status.code() names the kind

  // "epoch 0, index 17, /data/images/000017.jpg: corrupt_data: ..."
  std::string ToString() const;
};

}  // namespace headrace
