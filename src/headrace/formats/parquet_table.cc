#include "headrace/formats/parquet_table.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "headrace/formats/arrow_bridge.h"

// The engine's half of the Parquet reader: the tail and the selection are checked here,
// Arrow's reader runs in the bridge (formats/arrow_bridge/bridge.cc) behind a C ABI, and
// its normalized cells become ParquetValues here. No Arrow header is included: the engine
// builds and runs with whichever pyarrow the user has (formats/arrow_bridge.h).

namespace headrace {

// The parsed footer, held by the bridge that parsed it.
struct ParquetFooter {
  ParquetFooter(const HrArrowBridge* b, HrBridgeFooter* f) : bridge(b), footer(f) {}
  ~ParquetFooter() { bridge->free_footer(footer); }
  ParquetFooter(const ParquetFooter&) = delete;
  ParquetFooter& operator=(const ParquetFooter&) = delete;

  const HrArrowBridge* const bridge;
  HrBridgeFooter* const footer;
  int num_columns = 0;
  // [row_group * num_columns + column]: a top-level column's uncompressed bytes.
  std::vector<int64_t> column_uncompressed;
};

namespace {

constexpr std::string_view kMagic = "PAR1";
constexpr std::string_view kEncryptedMagic = "PARE";

StatusCode FromBridgeCode(int32_t code) {
  switch (code) {
    case HR_BRIDGE_INVALID_ARGUMENT: return StatusCode::kInvalidArgument;
    case HR_BRIDGE_UNSUPPORTED: return StatusCode::kUnsupportedFormat;
    case HR_BRIDGE_CORRUPT: return StatusCode::kCorruptData;
    case HR_BRIDGE_RESOURCE_EXHAUSTED:
    case HR_BRIDGE_DECODE_CAP: return StatusCode::kResourceExhausted;
    default: return StatusCode::kInternal;
  }
}

// The bridge's failure → a Status; frees its message.
Status FromBridge(const HrArrowBridge& bridge, int32_t code, char* message) {
  std::string text = message != nullptr ? message : "the Arrow bridge gave no message";
  if (message != nullptr) bridge.free_message(message);
  return Status(FromBridgeCode(code), std::move(text));
}

std::string RowGroupContext(int row_group) { return "row group " + std::to_string(row_group); }

std::string ColumnNames(const ParquetLayout& layout) {
  std::string names;
  for (const ParquetColumn& c : layout.columns) {
    if (!names.empty()) names += ", ";
    names += c.name;
  }
  return names.empty() ? "none" : names;
}

Result<ParquetLayout> ParseFooter(int64_t file_size, const uint8_t* footer, uint32_t footer_len) {
  HR_ASSIGN_OR_RETURN(const HrArrowBridge* bridge, LoadArrowBridge());
  HrBridgeFooter* handle = nullptr;
  HrBridgeLayout parsed{};
  char* message = nullptr;
  const int32_t code =
      bridge->parse_footer(file_size, footer, footer_len, &handle, &parsed, &message);
  if (code != HR_BRIDGE_OK) return FromBridge(*bridge, code, message);
  auto held = std::make_shared<ParquetFooter>(bridge, handle);

  ParquetLayout layout;
  layout.file_size = file_size;
  layout.footer_bytes = static_cast<int64_t>(footer_len) + 8;
  layout.rows = parsed.rows;
  for (int32_t c = 0; c < parsed.num_columns; ++c) {
    const HrBridgeColumnInfo& info = parsed.columns[c];
    layout.columns.push_back({info.name, static_cast<ParquetColumnKind>(info.kind),
                              info.list != 0, info.arrow_type});
  }
  for (int32_t g = 0; g < parsed.num_row_groups; ++g) {
    const HrBridgeRowGroupInfo& info = parsed.row_groups[g];
    layout.row_groups.push_back(
        {info.first_row, info.rows, info.offset, info.length, info.uncompressed_bytes});
  }
  held->num_columns = parsed.num_columns;
  held->column_uncompressed.assign(
      parsed.column_uncompressed,
      parsed.column_uncompressed +
          static_cast<size_t>(parsed.num_columns) * static_cast<size_t>(parsed.num_row_groups));
  layout.footer = std::move(held);
  return layout;
}

// Bytes cells, copied into one Buffer per column; each cell is a slice of it.
//
// Why a copy: headrace::Buffer cannot adopt memory it did not allocate (core/buffer.h
// has no foreign-owner constructor), and a zero-copy view would keep the whole Arrow
// chunk — offsets, validity, and for a dictionary column the dictionary — alive as long
// as any one sample's bytes. One memcpy per column is small next to decoding the images
// in it, and the copy is exactly what `decoded_bytes` counts.
Result<std::vector<std::optional<Buffer>>> CopyBytes(const HrBridgeCells& cells,
                                                     int64_t& decoded) {
  const auto n = static_cast<size_t>(cells.length);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (cells.is_null[i] == 0) total += static_cast<size_t>(cells.sizes[i]);
  }
  HR_ASSIGN_OR_RETURN(Buffer block, Buffer::Allocate(total));
  decoded += static_cast<int64_t>(total);
  std::vector<std::optional<Buffer>> out(n);
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    if (cells.is_null[i] != 0) continue;
    const auto size = static_cast<size_t>(cells.sizes[i]);
    if (size > 0) std::memcpy(block.mutable_data() + at, cells.data[i], size);
    out[i] = block.Slice(at, size);
    at += size;
  }
  return out;
}

std::vector<std::optional<std::string>> CopyStrings(const HrBridgeCells& cells, int64_t& decoded) {
  const auto n = static_cast<size_t>(cells.length);
  std::vector<std::optional<std::string>> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (cells.is_null[i] != 0) continue;
    std::string& cell = out[i].emplace(reinterpret_cast<const char*>(cells.data[i]),
                                       static_cast<size_t>(cells.sizes[i]));
    // Heap bytes beyond the small-string buffer.
    if (cell.capacity() > 15) decoded += static_cast<int64_t>(cell.capacity()) + 1;
  }
  return out;
}

template <typename T>
void MoveCells(std::vector<std::optional<T>>& cells, std::vector<ParquetValue>& out) {
  for (std::optional<T>& cell : cells) {
    if (cell) {
      out.emplace_back(std::move(*cell));
    } else {
      out.emplace_back(std::monostate());
    }
  }
}

// One column's cells (not a list's) appended to `out` as values of its kind.
Status AppendCells(const HrBridgeCells& cells, std::vector<ParquetValue>& out, int64_t& decoded) {
  const auto n = static_cast<size_t>(cells.length);
  switch (static_cast<ParquetColumnKind>(cells.kind)) {
    case ParquetColumnKind::kBytes: {
      HR_ASSIGN_OR_RETURN(auto bytes, CopyBytes(cells, decoded));
      MoveCells(bytes, out);
      return Status::Ok();
    }
    case ParquetColumnKind::kString: {
      auto strings = CopyStrings(cells, decoded);
      MoveCells(strings, out);
      return Status::Ok();
    }
    case ParquetColumnKind::kInt64:
    case ParquetColumnKind::kBool:
      for (size_t i = 0; i < n; ++i) {
        if (cells.is_null[i] != 0) {
          out.emplace_back(std::monostate());
        } else {
          out.emplace_back(cells.ints[i]);
        }
      }
      return Status::Ok();
    case ParquetColumnKind::kDouble:
      for (size_t i = 0; i < n; ++i) {
        if (cells.is_null[i] != 0) {
          out.emplace_back(std::monostate());
        } else {
          out.emplace_back(cells.doubles[i]);
        }
      }
      return Status::Ok();
    case ParquetColumnKind::kBytesWithPath: {
      if (cells.media_bytes == nullptr || cells.media_path == nullptr ||
          cells.media_bytes->length != cells.length || cells.media_path->length != cells.length) {
        return Status::Internal("the bridge's struct<bytes, path> cells do not match its rows");
      }
      HR_ASSIGN_OR_RETURN(auto bytes, CopyBytes(*cells.media_bytes, decoded));
      auto paths = CopyStrings(*cells.media_path, decoded);
      for (size_t i = 0; i < n; ++i) {
        if (cells.is_null[i] != 0) {
          out.emplace_back(std::monostate());
        } else {
          out.emplace_back(ParquetMedia{std::move(bytes[i]), std::move(paths[i])});
        }
      }
      return Status::Ok();
    }
    case ParquetColumnKind::kUnsupported: break;
  }
  return Status::Internal("no conversion for cells of kind " + std::to_string(cells.kind));
}

// A list column: its items converted as a column of the list's kind, then moved into one
// ParquetList per row (the bridge checked each range against the items).
Status AppendListCells(const HrBridgeCells& cells, std::vector<ParquetValue>& out,
                       int64_t& decoded) {
  if (cells.items == nullptr) return Status::Internal("the bridge's list cells have no items");
  std::vector<ParquetValue> items;
  items.reserve(static_cast<size_t>(cells.items->length));
  HR_RETURN_IF_ERROR(AppendCells(*cells.items, items, decoded));
  decoded += static_cast<int64_t>(items.size() * sizeof(ParquetValue));
  for (size_t i = 0; i < static_cast<size_t>(cells.length); ++i) {
    if (cells.is_null[i] != 0) {
      out.emplace_back(std::monostate());
      continue;
    }
    const int64_t begin = cells.list_begin[i];
    const int64_t length = cells.list_length[i];
    if (begin < 0 || length < 0 || begin > static_cast<int64_t>(items.size()) ||
        length > static_cast<int64_t>(items.size()) - begin) {
      return Status::Internal("the bridge's list range [" + std::to_string(begin) + ", +" +
                              std::to_string(length) + ") is outside its " +
                              std::to_string(items.size()) + " items");
    }
    ParquetList cell;
    cell.items.reserve(static_cast<size_t>(length));
    for (int64_t k = begin; k < begin + length; ++k) {
      cell.items.push_back(std::move(items[static_cast<size_t>(k)]));
    }
    out.emplace_back(std::move(cell));
  }
  return Status::Ok();
}

// A decode's cells, freed by the bridge that made them.
struct DecodedDeleter {
  const HrArrowBridge* bridge;
  void operator()(HrBridgeDecoded* decoded) const { bridge->free_decoded(decoded); }
};

Result<ParquetRowGroupData> Decode(const ParquetLayout& layout, int row_group, const Buffer& bytes,
                                   std::span<const std::string> columns,
                                   const ParquetDecodeOptions& options) {
  const std::string context = RowGroupContext(row_group);
  if (layout.footer == nullptr) {
    return Status::InvalidArgument(context +
                                   ": the layout has no footer (not from ReadParquetTail)");
  }
  if (row_group < 0 || static_cast<size_t>(row_group) >= layout.row_groups.size()) {
    return Status::InvalidArgument(context + ": the file has " +
                                   std::to_string(layout.row_groups.size()) + " row groups");
  }
  const ParquetRowGroup& group = layout.row_groups[static_cast<size_t>(row_group)];
  if (static_cast<int64_t>(bytes.size()) != group.length) {
    return Status::InvalidArgument(context + ": got " + std::to_string(bytes.size()) +
                                   " bytes, its range [" + std::to_string(group.offset) + ", " +
                                   std::to_string(group.offset + group.length) + ") has " +
                                   std::to_string(group.length));
  }

  // The selection, as layout indices.
  std::vector<int32_t> selected;
  if (columns.empty()) {
    for (size_t i = 0; i < layout.columns.size(); ++i) selected.push_back(static_cast<int32_t>(i));
  }
  for (const std::string& name : columns) {
    const ParquetColumn* column = layout.FindColumn(name);
    if (column == nullptr) {
      return Status::NotFound(context + ": no column '" + name +
                              "' in the file (columns: " + ColumnNames(layout) + ")");
    }
    const auto index = static_cast<int32_t>(column - layout.columns.data());
    if (std::find(selected.begin(), selected.end(), index) != selected.end()) {
      return Status::InvalidArgument(context + ": column '" + name + "' selected twice");
    }
    selected.push_back(index);
  }
  const ParquetFooter& footer = *layout.footer;
  int64_t uncompressed = 0;
  for (int32_t index : selected) {
    const ParquetColumn& column = layout.columns[static_cast<size_t>(index)];
    if (column.kind == ParquetColumnKind::kUnsupported) {
      return Status::UnsupportedFormat(
          context + ": column '" + column.name + "' is " + column.arrow_type +
          ", which is not read (readable: binary, string, integers up to int64, bool, "
          "float, double, struct<bytes: binary, path: string>, and lists of these)");
    }
    // The footer's sizes of what will be decoded (each checked by the bridge).
    uncompressed += footer.column_uncompressed[static_cast<size_t>(row_group) *
                                                   static_cast<size_t>(footer.num_columns) +
                                               static_cast<size_t>(index)];
  }

  // The memory check, before anything is read.
  if (options.max_uncompressed_bytes > 0 && uncompressed > options.max_uncompressed_bytes) {
    return Status::ResourceExhausted(
        context + ": the selected columns are " + std::to_string(uncompressed) +
        " bytes uncompressed (footer), over the limit of " +
        std::to_string(options.max_uncompressed_bytes) + " (max_uncompressed_bytes)");
  }
  int64_t cap = options.max_decode_bytes;
  if (cap == 0 && options.max_uncompressed_bytes > 0 &&
      options.max_uncompressed_bytes <= std::numeric_limits<int64_t>::max() / 4) {
    cap = 4 * options.max_uncompressed_bytes;
  }

  ParquetRowGroupData data;
  data.row_group = row_group;
  data.first_row = group.first_row;
  data.rows = group.rows;
  if (group.rows == 0) {
    for (int32_t index : selected) {
      const ParquetColumn& column = layout.columns[static_cast<size_t>(index)];
      data.columns.push_back({column.name, column.kind, column.list, {}});
    }
    return data;
  }

  const HrArrowBridge& bridge = *footer.bridge;
  HrBridgeDecoded* handle = nullptr;
  HrBridgeDecodedInfo info{};
  char* message = nullptr;
  const int32_t code = bridge.decode(footer.footer, row_group, group.offset, bytes.data(),
                                     static_cast<int64_t>(bytes.size()), selected.data(),
                                     static_cast<int32_t>(selected.size()), cap, &handle, &info,
                                     &message);
  if (code == HR_BRIDGE_DECODE_CAP) {
    if (message != nullptr) bridge.free_message(message);
    return Status::ResourceExhausted(context + ": decoding needs more than " +
                                     std::to_string(cap) + " bytes (max_decode_bytes; " +
                                     std::to_string(uncompressed) +
                                     " bytes uncompressed in the footer)");
  }
  if (code != HR_BRIDGE_OK) return FromBridge(bridge, code, message);
  // `bytes` outlives the cells, which may point into it.
  const std::unique_ptr<HrBridgeDecoded, DecodedDeleter> decoded(handle, DecodedDeleter{&bridge});
  if (info.rows != group.rows) {
    return Status::CorruptData(context + ": decoded " + std::to_string(info.rows) +
                               " rows, the footer says " + std::to_string(group.rows));
  }

  for (size_t k = 0; k < selected.size(); ++k) {
    const ParquetColumn& column = layout.columns[static_cast<size_t>(selected[k])];
    const HrBridgeCells& cells = info.cells[k];
    ParquetColumnValues& values = data.columns.emplace_back();
    values.name = column.name;
    values.kind = column.kind;
    values.list = column.list;
    values.values.reserve(static_cast<size_t>(group.rows));
    const Status status = column.list
                              ? AppendListCells(cells, values.values, data.decoded_bytes)
                              : AppendCells(cells, values.values, data.decoded_bytes);
    if (!status.ok()) return status.WithContext(context + ", column '" + column.name + "'");
    if (static_cast<int64_t>(values.values.size()) != group.rows) {
      return Status::CorruptData(context + ", column '" + column.name +
                                 "': " + std::to_string(values.values.size()) + " values for " +
                                 std::to_string(group.rows) + " rows");
    }
    data.decoded_bytes += static_cast<int64_t>(values.values.size() * sizeof(ParquetValue));
  }
  data.peak_decode_bytes = info.peak_bytes;
  return data;
}

}  // namespace

std::string_view ParquetColumnKindName(ParquetColumnKind kind) {
  switch (kind) {
    case ParquetColumnKind::kBytes: return "bytes";
    case ParquetColumnKind::kString: return "string";
    case ParquetColumnKind::kInt64: return "int64";
    case ParquetColumnKind::kBool: return "bool";
    case ParquetColumnKind::kDouble: return "double";
    case ParquetColumnKind::kBytesWithPath: return "bytes_with_path";
    case ParquetColumnKind::kUnsupported: return "unsupported";
  }
  return "unsupported";
}

const ParquetColumn* ParquetLayout::FindColumn(std::string_view name) const {
  for (const ParquetColumn& c : columns) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Result<ParquetTailProbe> ReadParquetTail(int64_t file_size, const Buffer& tail) {
  const int64_t have = static_cast<int64_t>(tail.size());
  if (file_size < 0 || have > file_size) {
    return Status::InvalidArgument("a tail of " + std::to_string(have) + " bytes for a file of " +
                                   std::to_string(file_size));
  }
  ParquetTailProbe probe;
  if (have < 8 && have < file_size) {
    probe.tail_bytes_needed = std::min<int64_t>(8, file_size);
    return probe;
  }
  const uint8_t* end = tail.data() + have;
  if (have < 4 || std::memcmp(end - 4, kEncryptedMagic.data(), 4) == 0) {
    if (have >= 4)
      return Status::UnsupportedFormat("encrypted Parquet file (its footer ends in PARE)");
    return Status::UnsupportedFormat("not a Parquet file: " + std::to_string(file_size) + " bytes");
  }
  if (std::memcmp(end - 4, kMagic.data(), 4) != 0) {
    // With the whole file at hand, a Parquet head tells a cut file from other bytes.
    if (have == file_size && have >= 4 && std::memcmp(tail.data(), kMagic.data(), 4) == 0) {
      return Status::CorruptData("truncated Parquet file: " + std::to_string(file_size) +
                                 " bytes that start with PAR1 but do not end in it");
    }
    return Status::UnsupportedFormat("not a Parquet file: it does not end in PAR1");
  }
  if (file_size < 12) {
    return Status::CorruptData("truncated Parquet file: " + std::to_string(file_size) +
                               " bytes, less than its magic and footer length");
  }
  if (have < 8) {
    probe.tail_bytes_needed = 8;
    return probe;
  }
  uint32_t footer_len = 0;
  std::memcpy(&footer_len, end - 8, 4);  // little-endian, as the hosts we build for
  const int64_t needed = static_cast<int64_t>(footer_len) + 8;
  if (needed + 4 > file_size) {
    return Status::CorruptData("truncated Parquet file: its footer length says " +
                               std::to_string(footer_len) + " bytes, the file has " +
                               std::to_string(file_size) +
                               " (with the 12 bytes of magic and length)");
  }
  if (have < needed) {
    probe.tail_bytes_needed = needed;
    return probe;
  }
  Result<ParquetLayout> layout = ParseFooter(file_size, end - needed, footer_len);
  if (!layout.ok()) {
    const Status& s = layout.status();
    // Everything that fails in the footer is the footer's fault, except what it asks for.
    if (s.code() == StatusCode::kUnsupportedFormat || s.code() == StatusCode::kResourceExhausted) {
      return s;
    }
    if (s.message().starts_with("Parquet footer")) return Status::CorruptData(s.message());
    return Status::CorruptData("Parquet footer: " + s.message());
  }
  probe.layout = std::move(layout).value();
  return probe;
}

Result<ParquetLayout> ReadParquetLayout(const Buffer& file) {
  HR_ASSIGN_OR_RETURN(ParquetTailProbe probe,
                      ReadParquetTail(static_cast<int64_t>(file.size()), file));
  if (!probe.layout) {
    return Status::CorruptData("truncated Parquet file: the footer needs " +
                               std::to_string(probe.tail_bytes_needed) + " bytes, the file has " +
                               std::to_string(file.size()));
  }
  return std::move(*probe.layout);
}

Result<ParquetRowGroupData> DecodeParquetRowGroup(const ParquetLayout& layout, int row_group,
                                                  const Buffer& bytes,
                                                  std::span<const std::string> columns,
                                                  const ParquetDecodeOptions& options) {
  // The conversion allocates a value per cell: running out is the decode's failure, not
  // the process's (the bridge reports Arrow's own allocations the same way).
  try {
    return Decode(layout, row_group, bytes, columns, options);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(RowGroupContext(row_group) + ": out of memory");
  }
}

}  // namespace headrace
