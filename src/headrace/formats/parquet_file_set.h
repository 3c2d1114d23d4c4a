// The Parquet source: Parquet files (`source.parquet`) turned into SampleRecords without
// reading their rows (Hugging Face datasets, LAION-style tables).
//
//   "s3://b/train/part-{00000..00099}.parquet"  ──ExpandShardPattern──▶ file URIs, in order
//        │ per file, concurrently: its size, then one ranged read of its tail
//        │ (ReadParquetTail; a second, larger one when the footer is longer)
//        ▼
//   ParquetLayout per file ──ResolveParquetFields──▶ fields (source.fields or defaults)
//        ▼
//   records: files in pattern order, rows in file order; record i has dataset index i,
//   id and location "<file URI>#row N" (N: the row in its file), and one MediaRef
//   (field kRowGroupField) to its row group's byte range: every sample of a row group
//   names the same range, which ParquetRowGroupCache (parquet_row_groups.h) reads once
//   and decodes once. The cells themselves (bytes, strings, numbers, conversations) are
//   put into the Sample at run time by the source's Fill.
//
// Path/URL columns (a media field whose column holds strings) are the exception: their
// paths are needed to read the media, so they are read at load time, one ranged read
// per row group, decoding that column only, and become ordinary MediaRefs resolved
// against `source.root` (default: the file's folder), exactly as a manifest's paths.
//
// Fields. `source.fields` maps columns: a field's key is its column. Kinds and the
// columns they accept:
//   image, video, audio, pointcloud, bytes: a binary column (the bytes are the media), a
//       struct<bytes, path> column (Hugging Face Image/Audio: its bytes), or a string
//       column (a path or URL, see above)
//   conversation: a string column holding JSON, an array of turns or an object with
//       `source.conversations_field` (turn keys: role_field, text_field)
//   text, string: a string column; int: an integer or bool column; float: a float or
//       integer column
// A list field (max_items > 0) takes a list column (list<T> or large_list<T>) whose items
// T are what a single field of its kind takes: list<binary> and list<struct<bytes,
// path>> (Hugging Face Sequence(Image())) give a media list, one Sample::parsed_media
// entry per item in list order; list<string> of a media field gives paths, read at load
// time like a path column (one MediaRef per item); list<int64|int32|bool>,
// list<double|float> and list<string> give int, float and text/string lists, one
// Attribute per item. A null list is an empty list. A list column needs a list field
// and a list field a list column (kInvalidArgument otherwise). Defaults never read a
// list column.
// Defaults (no source.fields), from the first file's columns:
//   image:        the first of the columns `image`, `jpg`, `jpeg`, `png`, `webp`, `img`
//                 (binary or struct<bytes, path>; a string one is a path/URL)
//   conversation: `conversations`, `conversation` or `messages` (a JSON string column)
//   text:         `text`, `caption`, `txt` (string columns, each a text field by its name)
//   scalars:      every other int/bool (int), float (float) and string (string) column,
//                 by its name, except `id` and `index` (the engine's own batch fields)
// Other binary and unsupported columns are not read. `image` and `conversation` are
// always fields 0 and 1 (as the manifest source has them), absent or not.
//
// Errors. Load-time: a pattern that matches nothing or a file that does not exist
// (kNotFound naming it), every file unreadable (the first one's error), a field's column
// missing from a file (kNotFound naming the column, the file and the
// columns there are) or of a kind the field cannot take (kInvalidArgument). Skipped whole
// (bad_files below; source.h BadShard): a file that is not Parquet or whose footer does
// not parse or fit the file. Per sample
// (named "<file>#row N"): a null cell in a required field, a path-only struct<bytes,
// path> cell, a conversation that does not parse; for a list: more items than
// max_items (kBadRecord, "column 'views' has 5 items, more than its max_items 4"), a
// null item ("column 'views' item 2 is null"), no items in a required field
// (kMissingField); the row group's own errors (see
// parquet_row_groups.h) fail every sample of that group.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/formats/parquet_table.h"
#include "headrace/formats/source.h"
#include "headrace/formats/source_spec.h"
#include "headrace/io/storage.h"

namespace headrace {

// MediaRef::field of a record's row group: not a source field (Sample::MediaOf never
// finds it); the source's Fill replaces it with the cells.
inline constexpr int kRowGroupField = -1;

// A column read from each row group at run time, and the field it feeds.
struct ParquetFieldColumn {
  std::string column;
  int field = 0;  // index into ParquetFileSet::fields
  FieldKind kind = FieldKind::kImage;
  ParquetColumnKind column_kind = ParquetColumnKind::kBytes;  // of its items, for a list
  bool list = false;   // a list column, feeding a list field
  int max_items = 0;   // the list field's
  bool required = false;
};

struct ParquetFileSet {
  std::vector<std::string> files;      // URIs, in dataset order
  std::vector<ParquetLayout> layouts;  // per file
  // The resolved fields (defaults filled in, key = column): what the planner sees.
  std::vector<SourceFieldSpec> fields;
  // The columns decoded from each row group at run time, in this order.
  std::vector<ParquetFieldColumn> columns;
  // Every row group of every file, in dataset order: EpochOrder's groups.
  struct Group {
    int file = 0;
    int row_group = 0;
    int64_t first_record = 0;
  };
  std::vector<Group> groups;
  std::vector<int64_t> group_rows;  // rows per group, same order
  // Every row's record; or, when loaded compact, only the bad ones, by index:
  // ParquetRecords (parquet_records.h) makes the rest from `groups` and the path media
  // below when a sample needs one.
  std::vector<SampleRecord> records;
  std::vector<std::pair<int64_t, SampleRecord>> irregular;
  int64_t num_rows = 0;
  // Loaded compact with path columns: each good row's path media (field and resolved
  // URI, in record order), the URIs back to back in `path_uris`; `path_item_end[i]` ends
  // row i's items (a bad row has none). Empty without path columns.
  struct PathItem {
    int32_t field = 0;
    uint64_t uri_end = 0;  // where its URI ends in path_uris (it starts where the last ended)
  };
  std::string path_uris;
  std::vector<PathItem> path_items;
  std::vector<uint64_t> path_item_end;
  int64_t bad_records = 0;
  // Files skipped whole (no row groups, no rows; source.h): a footer that does not parse
  // or does not fit the file (lengths, page offsets, row counts that add up to more than
  // the column chunks hold), a row group whose declared rows could never be decoded
  // within the cache (LoadParquetFileSet's max_group_bytes), a path column that does not
  // decode.
  std::vector<BadShard> bad_files;
  // Load-time reads: footers (tail reads, size probes included) and row groups read for
  // path columns.
  int64_t load_reads = 0;

  // The group of record `index` (a dataset index).
  size_t GroupOf(int64_t index) const;
  // The largest row group: its byte range, and its uncompressed bytes in the footer.
  int64_t LargestRowGroupBytes() const;
  int64_t LargestRowGroupUncompressedBytes() const;
};

// The fields `spec.fields` names, or the defaults above, checked against `layout` (the
// first file's): kNotFound / kInvalidArgument as above.
Result<std::vector<SourceFieldSpec>> ResolveParquetFields(const SourceSpec& spec,
                                                          const ParquetLayout& layout);

// Loads spec.parquet (see the header comment). `compact`: keep only the irregular
// records (`records` stays empty). `max_group_bytes` > 0: the most a decoded row group
// may hold (the row-group cache's bound); a file with a row group whose declared rows'
// cells alone exceed it is skipped (bad_files) before anything is sized by them.
Result<ParquetFileSet> LoadParquetFileSet(Storage& storage, const SourceSpec& spec,
                                        bool compact = false, int64_t max_group_bytes = 0);

// The record of row `index` as the loader makes it before its path media: id and
// location "<file>#row N", line N + 1, and the row group's range as its first media
// item when the source decodes columns from it. `with_paths`: then the row's path media
// kept compact (path_items), as a good row's record has them after.
void MakeParquetRecord(const ParquetFileSet& source, int64_t index, SampleRecord& record,
                       bool with_paths = false);

// A file's layout from its tail: its size (a gated read refused at the size), then one
// ranged read of kParquetDefaultTailBytes, another when the footer is longer. `reads`
// counts the requests.
Result<ParquetLayout> ReadParquetFooter(Storage& storage, const std::string& uri,
                                        int64_t* reads = nullptr);

// Puts row `row` of `data` (a row group decoded with source.columns, in that order) into
// `sample`: media cells into its media items, text and scalars into its attributes, a
// conversation into its turns (owned by sample.parsed). Per-sample errors as above, naming the
// record's location.
Status FillSampleFromRowGroup(const ParquetFileSet& source, const SourceSpec& spec,
                              const ParquetRowGroupData& data, int64_t row, Sample& sample);

// Parses a conversation cell: a JSON array of turns, or an object holding one under
// spec.conversations_field.
Result<std::vector<Turn>> ParseConversationCell(std::string_view json, const SourceSpec& spec);

// The bytes the source's records hold, for the run report (as ManifestMemoryBytes).
size_t ParquetFileSetMemoryBytes(const ParquetFileSet& source);

}  // namespace headrace
