// Parquet files read one row group at a time, from bytes the caller fetched itself.
//
// The engine does its own I/O (io/storage.h): it reads a file's tail, asks
// ReadParquetLayout what the file holds and where each row group's bytes lie, then
// fetches one row group with one ranged read and hands those bytes to
// DecodeParquetRowGroup. Nothing here opens a file or a connection. Parsing and decoding
// are Apache Arrow's Parquet reader, that of the pyarrow installed beside Headrace, reached
// through an Arrow bridge (formats/arrow_bridge.h; loaded by the first footer read, whose
// error says what is missing when no pyarrow fits); this file turns what the bridge gives
// into Headrace's types: Status codes, headrace::Buffer for bytes.
//
//   tail bytes ──> ReadParquetLayout ──> need more tail bytes? read them, call again
//                        │
//                        ▼
//   ParquetLayout { columns (name, kind), rows, row groups: rows + byte range }
//                        │  ranged read of row_groups[i].offset, .length
//                        ▼
//   DecodeParquetRowGroup(layout, i, those bytes, columns) ──> ParquetRowGroupData
//                                                              (one value per row and column)
//
// Threads: every function is reentrant; a ParquetLayout is immutable and may be shared by
// threads decoding different (or the same) row groups at once. Nothing here starts a
// thread: Arrow's reader runs on the caller's thread (use_threads and pre_buffer off).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {

// What a top-level column holds, as the engine sees it.
enum class ParquetColumnKind {
  kBytes,          // binary, large_binary, fixed_size_binary, binary_view: a Buffer per row
  kString,         // string, large_string, string_view (UTF-8): a std::string per row
  kInt64,          // int8..int64, uint8..uint32: an int64_t per row
  kBool,           // bool: an int64_t per row, 0 or 1
  kDouble,         // float16, float, double: a double per row
  kBytesWithPath,  // struct<bytes: binary, path: string>, as Hugging Face `datasets` writes
                   // Image and Audio features: a ParquetMedia per row
  kUnsupported,    // anything else (maps, other structs, lists of lists, timestamps,
                   // decimals, ...): listed in the layout, but selecting it is
                   // kUnsupportedFormat
};

// "bytes", "string", "int64", "bool", "double", "bytes_with_path", "unsupported".
std::string_view ParquetColumnKindName(ParquetColumnKind kind);

struct ParquetColumn {
  std::string name;
  // A list column (list<T>, large_list<T>): the kind of its items T, one of the kinds
  // above but kUnsupported; each cell is then a ParquetList.
  ParquetColumnKind kind = ParquetColumnKind::kUnsupported;
  bool list = false;
  std::string arrow_type;  // Arrow's spelling, for messages: "struct<bytes: binary, path: string>"
};

// One row group: its rows and the bytes [offset, offset + length) of the file that hold
// all its column chunks (dictionary pages included). Row groups may be read in any order.
struct ParquetRowGroup {
  int64_t first_row = 0;  // the file's row index of its first row
  int64_t rows = 0;
  int64_t offset = 0;
  int64_t length = 0;
  // The column chunks' uncompressed (decompressed, still encoded) size, from the footer.
  int64_t uncompressed_bytes = 0;
};

struct ParquetFooter;  // the parsed footer, opaque (held by the bridge that parsed it)

struct ParquetLayout {
  int64_t file_size = 0;
  int64_t rows = 0;
  std::vector<ParquetColumn> columns;  // top-level columns in file order
  std::vector<ParquetRowGroup> row_groups;
  int64_t footer_bytes = 0;  // the footer, its length and the magic: the tail it came from
  std::shared_ptr<const ParquetFooter> footer;  // what DecodeParquetRowGroup decodes with

  // The column named `name`, or null.
  const ParquetColumn* FindColumn(std::string_view name) const;
};

// Reading the footer needs the file's last 8 bytes (footer length + "PAR1") and the
// footer before them. A first ranged read of this many tail bytes holds the whole
// footer of most files.
inline constexpr int64_t kParquetDefaultTailBytes = 64 * 1024;

// What a tail held: either the layout, or how many tail bytes to read instead.
struct ParquetTailProbe {
  // > 0: the tail was too short; read the file's last `tail_bytes_needed` bytes and call
  // again. 0: `layout` is set.
  int64_t tail_bytes_needed = 0;
  std::optional<ParquetLayout> layout;
};

// Reads the layout from the last `tail.size()` bytes of a file of `file_size` bytes (the
// whole file is a tail too). Errors: kInvalidArgument when the tail is longer than the
// file; kUnsupportedFormat for bytes that do not end in "PAR1" (not Parquet) or end in
// "PARE" (an encrypted footer), a plaintext-footer encrypted file, or a schema Arrow
// cannot represent; kCorruptData for a footer that does not parse or a length, row
// count or column chunk range that does not fit the file. Never reads outside `tail`;
// the layout keeps no reference to it.
Result<ParquetTailProbe> ReadParquetTail(int64_t file_size, const Buffer& tail);

// The same for a whole file held in memory: a probe that needs more bytes than the file
// has is kCorruptData.
Result<ParquetLayout> ReadParquetLayout(const Buffer& file);

struct ParquetDecodeOptions {
  // 0: no limit. Otherwise a row group whose selected columns' uncompressed size in the
  // footer exceeds this is refused with kResourceExhausted, before anything is decoded.
  int64_t max_uncompressed_bytes = 0;
  // Arrow's allocations while decoding (the decoded columns and the reader's scratch) are
  // capped at this; going over is kResourceExhausted. Dictionary-encoded pages decode to
  // far more than their uncompressed size, so the footer check alone does not bound
  // memory. 0: 4 × max_uncompressed_bytes (0 when that is 0: no cap).
  int64_t max_decode_bytes = 0;
};

// A kBytesWithPath cell (Hugging Face Image/Audio): either member may be null (an image
// stored by path only has no bytes).
struct ParquetMedia {
  std::optional<Buffer> bytes;
  std::optional<std::string> path;
};

// One cell. std::monostate is SQL null: a null image is a per-sample error for the
// engine, not a failed row group. Which alternative a non-null cell holds follows the
// column's kind: kBytes → Buffer, kString → std::string, kInt64 and kBool → int64_t,
// kDouble → double, kBytesWithPath → ParquetMedia; a list column's cells are ParquetList.
struct ParquetList;
using ParquetValue =
    std::variant<std::monostate, Buffer, std::string, int64_t, double, ParquetMedia, ParquetList>;

// A cell of a list column: its items in list order, each a ParquetValue of the column's
// item kind (std::monostate for a null item). A null list is std::monostate, not an
// empty ParquetList.
struct ParquetList {
  std::vector<ParquetValue> items;
};

struct ParquetColumnValues {
  std::string name;
  ParquetColumnKind kind = ParquetColumnKind::kUnsupported;  // of the items, for a list
  bool list = false;
  std::vector<ParquetValue> values;  // one per row of the row group
};

struct ParquetRowGroupData {
  int row_group = 0;
  int64_t first_row = 0;
  int64_t rows = 0;
  std::vector<ParquetColumnValues> columns;  // in the order they were asked for
  // What the returned values hold in memory (bytes, strings, the cells themselves): what
  // the engine counts against its budget while the data is alive.
  int64_t decoded_bytes = 0;
  // The most Arrow held at once while decoding (freed before return).
  int64_t peak_decode_bytes = 0;
};

// Decodes row group `row_group` of `layout` from `bytes`, the file's bytes
// [row_groups[row_group].offset, + length) and nothing else (the footer comes from the
// layout). `columns`: the top-level column names to read, in the order wanted; empty
// reads every column. Bytes values are copied out of Arrow into one Buffer per column,
// each row's Buffer a slice of it (see parquet_table.cc for why a copy).
// Errors: kInvalidArgument for a row group index out of range or `bytes` of the wrong
// size; kNotFound for a column the file does not have (naming it and the columns
// there are); kUnsupportedFormat for a column of kind kUnsupported or a codec or
// encoding Arrow does not support; kResourceExhausted over a limit of `options` (naming
// the sizes); kCorruptData for pages that do not decode or a reader that wanted bytes
// outside the row group's range. Messages start with "row group N".
Result<ParquetRowGroupData> DecodeParquetRowGroup(const ParquetLayout& layout, int row_group,
                                                  const Buffer& bytes,
                                                  std::span<const std::string> columns = {},
                                                  const ParquetDecodeOptions& options = {});

}  // namespace headrace
