// Sample: one record of a dataset as it moves through the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/media_reader.h"
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
  // A media list's fixed-shape batch fields are padded to max_items per sample rather
  // than concatenated (SourceFieldSpec::pad_items).
  bool pad_items = false;
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
  // 1-based line number in the manifest (a JSON-array manifest's: element index + 1), for
  // messages.
  int64_t line = 0;
  // Where the record is, for messages, when its first media URI does not say (a sample
  // of a tar shard: "s3://b/shard-000003.tar#000017"); empty for a manifest's records.
  std::string location;

  // The URI that names this record in messages: its location when set, else its first
  // media item's, else empty.
  const std::string& uri() const;
};

// A token sequence a size pass tokenized for a sample before it ran (text.tokenize's
// Predict): the image grids it counted, and its ids and labels. A planned pack's sizer
// (exec/pack_sizer.h) hands it to the sample's run, whose own size pass takes it instead
// of tokenizing again (when the grids the sample made are the same).
struct ToldSequence {
  std::vector<int64_t> grids;
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;
};

// One sample in flight: which record, in which epoch, and its values as its source put
// them in place (formats/source.h, Source::Fill) once its media were read. Readers see
// only these values: no reader looks into the record for turns, attributes or media, so
// every source kind (a manifest's parsed records, a tar shard's members, a Parquet row
// group's cells) looks the same from the chain.
struct Sample {
  // One media item: encoded bytes as read from storage (or as a source's cell holds
  // them), decoded in place.
  struct Item {
    int field = 0;         // the source field it belongs to
    Buffer bytes;
    std::string_view uri;  // the item's own location, for messages (lives with the record)
    // Set instead of `bytes` for an item read in ranges by its op (EngineInputs::
    // ranged_fields): the object, read as the op asks.
    std::shared_ptr<MediaReader> reader;
  };

  Sample() = default;
  // The spans below may point into `parsed`: a copy would point into the original.
  Sample(const Sample&) = delete;
  Sample& operator=(const Sample&) = delete;

  int64_t epoch = 0;
  int64_t index = 0;  // position in the dataset (the manifest line order), not in the epoch
  const SampleRecord* record = nullptr;
  // The media items, grouped by field in the source's field order, a list field's
  // items in list order.
  std::vector<Item> media;
  // The conversation and the text and scalar values: the record's, or `parsed`'s.
  std::span<const Turn> turns;
  std::span<const Attribute> attributes;
  // What the source parsed for this sample at run time (a shard's .json member, a row
  // group's cells), when its record does not hold it; the spans above point here then.
  struct Parsed {
    std::vector<Turn> turns;
    std::vector<Attribute> attributes;
  } parsed;
  // What a size pass before the run tokenized for this sample (ToldSequence), for the
  // chain's op to take; null: nothing was.
  ToldSequence* told = nullptr;

  // The bytes of the first media item of source field `field`; null when there is none.
  const Buffer* MediaOf(int field) const;
  // The first media item of source field `field`; null when there is none.
  const Item* ItemOf(int field) const;
  // Calls f(const Buffer& bytes, std::string_view uri) for each media item of source
  // field `field`, in list order.
  template <typename F>
  void ForEachMedia(int field, F&& f) const {
    for (const Item& item : media) {
      if (item.field == field) f(item.bytes, item.uri);
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
