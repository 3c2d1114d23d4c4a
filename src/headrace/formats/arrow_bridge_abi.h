// The Arrow bridge's ABI: plain C between the engine and a bridge compiled against one
// pyarrow's Arrow/Parquet C++ (formats/arrow_bridge/, loaded by formats/arrow_bridge.h).
//
// Why a bridge: Arrow's C++ ABI changes with every release (libarrow.so.NNNN, NNNN =
// major * 100 + minor), so a binary that links one libarrow installs beside one pyarrow
// only. The engine holds no Arrow type; each bridge (a few hundred KB) is compiled against
// one pyarrow's headers and links that pyarrow's libarrow/libparquet, and at run time the
// engine loads the bridge that matches the pyarrow installed beside it. What crosses here
// is C: integers, pointers to bytes, and the POD structs below; no C++ type of Arrow or of
// the standard library, so a bridge may even use another std::string ABI than the engine.
//
// Contract:
// - One entry point, `headrace_arrow_bridge_v1` (kHrArrowBridgeEntry), returns a pointer to
//   a static HrArrowBridge; the engine checks abi_version, struct_size and
//   arrow_so_version before calling anything.
// - Every function is reentrant and may be called from any thread; nothing throws across
//   it (the bridge turns Arrow's exceptions and arrow::Status into a code and a message).
// - A function returning a code other than HR_BRIDGE_OK sets *message to a NUL-terminated
//   string the caller frees with free_message, and sets no other output.
// - Memory the bridge hands out lives until the matching free_* call: a layout's arrays
//   until free_footer, a decode's cells until free_decoded. The bytes given to decode
//   must outlive the HrBridgeDecoded (cells may point into them).
// - Adding a function: append it to HrArrowBridge (struct_size grows, older engines keep
//   working); changing one: a new abi_version and entry point.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HR_ARROW_BRIDGE_ABI 1

// Result codes (the engine maps them to its StatusCode).
enum {
  HR_BRIDGE_OK = 0,
  HR_BRIDGE_INVALID_ARGUMENT = 1,
  HR_BRIDGE_UNSUPPORTED = 2,         // kUnsupportedFormat
  HR_BRIDGE_CORRUPT = 3,             // kCorruptData
  HR_BRIDGE_RESOURCE_EXHAUSTED = 4,  // out of memory
  HR_BRIDGE_DECODE_CAP = 5,          // decode: the allocation cap (max_decode_bytes) refused
  HR_BRIDGE_INTERNAL = 6,
};

// A column's kind: the same values as headrace::ParquetColumnKind (parquet_table.h).
enum {
  HR_BRIDGE_BYTES = 0,
  HR_BRIDGE_STRING = 1,
  HR_BRIDGE_INT64 = 2,
  HR_BRIDGE_BOOL = 3,
  HR_BRIDGE_DOUBLE = 4,
  HR_BRIDGE_BYTES_WITH_PATH = 5,
  HR_BRIDGE_UNSUPPORTED_KIND = 6,
};

typedef struct HrBridgeFooter HrBridgeFooter;    // a parsed footer (opaque)
typedef struct HrBridgeDecoded HrBridgeDecoded;  // one decoded row group (opaque)

typedef struct HrBridgeColumnInfo {
  const char* name;
  const char* arrow_type;  // Arrow's spelling, for messages
  int32_t kind;            // HR_BRIDGE_*; a list column: its items' kind
  int32_t list;            // nonzero: list<kind> or large_list<kind>
} HrBridgeColumnInfo;

typedef struct HrBridgeRowGroupInfo {
  int64_t first_row;
  int64_t rows;
  int64_t offset;  // [offset, offset + length): every byte of its column chunks
  int64_t length;
  int64_t uncompressed_bytes;
} HrBridgeRowGroupInfo;

typedef struct HrBridgeLayout {
  int64_t rows;
  int32_t num_columns;
  int32_t num_row_groups;
  const HrBridgeColumnInfo* columns;       // top-level columns, file order
  const HrBridgeRowGroupInfo* row_groups;  // file order
  // [row_group * num_columns + column]: the uncompressed bytes of that top-level column's
  // chunks in that row group (the footer's sizes, what a selection will decode).
  const int64_t* column_uncompressed;
} HrBridgeLayout;

// One column's cells, normalized: whatever Arrow type the file holds (binary, large,
// fixed-size, view, dictionary; int8..uint32; float16..double), the engine sees these.
typedef struct HrBridgeCells {
  int32_t kind;  // HR_BRIDGE_*
  int32_t list;  // nonzero: each cell is items[list_begin[i], + list_length[i])
  int64_t length;
  const uint8_t* is_null;  // `length` bytes, 1: null (for a list: a null list)
  // HR_BRIDGE_BYTES and HR_BRIDGE_STRING: each cell's bytes (null cells: length 0).
  const uint8_t* const* data;
  const int64_t* sizes;
  const int64_t* ints;     // HR_BRIDGE_INT64, HR_BRIDGE_BOOL (0 or 1)
  const double* doubles;   // HR_BRIDGE_DOUBLE
  // HR_BRIDGE_BYTES_WITH_PATH: the struct's two members, `length` cells each.
  const struct HrBridgeCells* media_bytes;
  const struct HrBridgeCells* media_path;
  // A list column: the items (a column of `kind`, list 0) and each cell's range of them.
  const struct HrBridgeCells* items;
  const int64_t* list_begin;
  const int64_t* list_length;
} HrBridgeCells;

typedef struct HrBridgeDecodedInfo {
  int64_t rows;                // rows decoded
  int64_t peak_bytes;          // the most Arrow held at once while decoding
  const HrBridgeCells* cells;  // one per requested column, in the requested order
} HrBridgeDecodedInfo;

typedef struct HrArrowBridge {
  uint32_t abi_version;      // HR_ARROW_BRIDGE_ABI
  uint32_t struct_size;      // sizeof(HrArrowBridge) of the bridge
  int32_t arrow_so_version;  // NNNN of the libarrow.so.NNNN it links
  const char* arrow_version; // Arrow's full version it was compiled against, "26.0.1"

  // Parses the footer `footer[0, footer_len)` (the Thrift bytes, without the length and
  // magic) of a file of `file_size` bytes, and checks every row group's byte range
  // against the file. Codes: UNSUPPORTED (encryption, a schema Arrow cannot represent,
  // chunks in another file, duplicate column names), CORRUPT (anything that does not
  // parse or fit), RESOURCE_EXHAUSTED.
  int32_t (*parse_footer)(int64_t file_size, const uint8_t* footer, uint32_t footer_len,
                          HrBridgeFooter** footer_out, HrBridgeLayout* layout, char** message);
  void (*free_footer)(HrBridgeFooter* footer);

  // Decodes `columns[0, num_columns)` (top-level column indices of the layout, each of a
  // readable kind) of row group `row_group` from `bytes[0, size)`, the file's bytes at
  // [offset, offset + size). Arrow allocates from a pool capped at `max_decode_bytes`
  // (0: no cap) and runs on the calling thread. Codes: DECODE_CAP, UNSUPPORTED (a codec
  // or encoding Arrow lacks), CORRUPT, RESOURCE_EXHAUSTED, INTERNAL; messages start with
  // "row group N".
  int32_t (*decode)(const HrBridgeFooter* footer, int32_t row_group, int64_t offset,
                    const uint8_t* bytes, int64_t size, const int32_t* columns,
                    int32_t num_columns, int64_t max_decode_bytes, HrBridgeDecoded** decoded_out,
                    HrBridgeDecodedInfo* info, char** message);
  void (*free_decoded)(HrBridgeDecoded* decoded);

  void (*free_message)(char* message);
} HrArrowBridge;

#define HR_ARROW_BRIDGE_ENTRY "headrace_arrow_bridge_v1"
typedef const HrArrowBridge* (*HrArrowBridgeEntry)(void);

#ifdef __cplusplus
}  // extern "C"
#endif
