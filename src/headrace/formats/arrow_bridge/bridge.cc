// The Arrow bridge: Arrow's Parquet reader behind the C ABI of formats/arrow_bridge_abi.h.
// Compiled once per supported pyarrow (its headers), linking that pyarrow's libarrow and
// libparquet; see this folder's README.md for why and how it is loaded.
//
// Everything that touches an Arrow type is here, and only here: parsing the footer into
// the layout, the reader over one row group's bytes, the capped memory pool, and turning
// Arrow's arrays into the normalized cells of HrBridgeCells. It uses nothing of the
// engine (no headrace::Status, no Buffer), so that its only link to the engine is the ABI.
#include <arrow/api.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/config.h>
#include <arrow/util/float16.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/formats/arrow_bridge_abi.h"

namespace {

// A failure: an HR_BRIDGE_* code and its message. Success is an empty optional<Error>.
struct Error {
  int32_t code = HR_BRIDGE_INTERNAL;
  std::string message;

  Error WithContext(const std::string& context) const { return {code, context + ": " + message}; }
};
using Failure = std::optional<Error>;

Error Corrupt(std::string message) { return {HR_BRIDGE_CORRUPT, std::move(message)}; }
Error Unsupported(std::string message) { return {HR_BRIDGE_UNSUPPORTED, std::move(message)}; }
Error Internal(std::string message) { return {HR_BRIDGE_INTERNAL, std::move(message)}; }

// Arrow's error → ours. The reader's only I/O is RowGroupFile, whose errors mean the
// metadata pointed outside the row group's bytes: a damaged file, not an I/O failure.
Error FromArrow(const arrow::Status& status, std::string_view context) {
  std::string message(context);
  message.append(": ").append(status.message());
  if (status.IsOutOfMemory()) return {HR_BRIDGE_RESOURCE_EXHAUSTED, std::move(message)};
  if (status.IsNotImplemented()) return Unsupported(std::move(message));
  return Corrupt(std::move(message));
}

// Runs `body` (returning Failure), turning what Arrow and Parquet throw into an Error:
// parquet reports damaged files with ParquetException, and std::bad_alloc may come from
// any allocation. Nothing may unwind through the C ABI.
template <typename F>
Failure Guarded(std::string_view context, F&& body) noexcept {
  try {
    return body();
  } catch (const parquet::ParquetStatusException& e) {
    return FromArrow(e.status(), context);
  } catch (const std::bad_alloc&) {
    return Error{HR_BRIDGE_RESOURCE_EXHAUSTED, std::string(context) + ": out of memory"};
  } catch (const std::exception& e) {
    return Corrupt(std::string(context) + ": " + e.what());
  } catch (...) {
    return Corrupt(std::string(context) + ": unknown exception");
  }
}

int32_t Report(const Failure& failure, char** message) {
  if (!failure) return HR_BRIDGE_OK;
  *message = static_cast<char*>(std::malloc(failure->message.size() + 1));
  if (*message != nullptr) {
    std::memcpy(*message, failure->message.c_str(), failure->message.size() + 1);
  }
  return failure->code;
}

// The file as Arrow's reader sees it: `file_size` bytes, of which only one row group's
// range [offset, offset + size) is here. The footer is never read (the reader is opened
// with the parsed metadata); a read outside the range is an error that names it, so a
// footer whose page offsets lie cannot make the reader wander. Reads are zero-copy
// slices of the caller's bytes, which outlive the decode (the ABI's contract).
class RowGroupFile final : public arrow::io::RandomAccessFile {
 public:
  RowGroupFile(int64_t file_size, int64_t offset, const uint8_t* bytes, int64_t size)
      : file_size_(file_size), offset_(offset), bytes_(bytes), size_(size) {}

  arrow::Status Close() override {
    closed_ = true;
    return arrow::Status::OK();
  }
  bool closed() const override { return closed_; }
  arrow::Result<int64_t> Tell() const override { return position_; }
  arrow::Status Seek(int64_t position) override {
    if (position < 0) return arrow::Status::Invalid("seek to negative position");
    position_ = position;
    return arrow::Status::OK();
  }
  arrow::Result<int64_t> GetSize() override { return file_size_; }
  bool supports_zero_copy() const override { return true; }

  arrow::Result<int64_t> Read(int64_t nbytes, void* out) override {
    ARROW_ASSIGN_OR_RAISE(int64_t n, ReadAt(position_, nbytes, out));
    position_ += n;
    return n;
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override {
    ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position_, nbytes));
    position_ += buffer->size();
    return buffer;
  }
  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override {
    ARROW_ASSIGN_OR_RAISE(auto view, View(position, nbytes, /*allow_short_read=*/true));
    if (view.second > 0) std::memcpy(out, view.first, static_cast<size_t>(view.second));
    return view.second;
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    ARROW_ASSIGN_OR_RAISE(auto view, View(position, nbytes, /*allow_short_read=*/true));
    return std::make_shared<arrow::Buffer>(view.first, view.second);
  }
// Arrow 25 added ReadAt overloads with allow_short_read; a short read past the end is an
// error there unless asked for.
#if ARROW_VERSION_MAJOR >= 25
  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, bool allow_short_read,
                                void* out) override {
    ARROW_ASSIGN_OR_RAISE(auto view, View(position, nbytes, allow_short_read));
    if (view.second > 0) std::memcpy(out, view.first, static_cast<size_t>(view.second));
    return view.second;
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes,
                                                       bool allow_short_read) override {
    ARROW_ASSIGN_OR_RAISE(auto view, View(position, nbytes, allow_short_read));
    return std::make_shared<arrow::Buffer>(view.first, view.second);
  }
#endif

 private:
  arrow::Result<std::pair<const uint8_t*, int64_t>> View(int64_t position, int64_t nbytes,
                                                         bool allow_short_read) const {
    if (position < 0 || nbytes < 0) {
      return arrow::Status::IOError("read of ", nbytes, " bytes at ", position);
    }
    if (position > file_size_ || nbytes > file_size_ - position) {
      if (!allow_short_read || position > file_size_) {
        return arrow::Status::IOError("read of [", position, ", +", nbytes,
                                      ") past the end of the file (", file_size_, " bytes)");
      }
      nbytes = file_size_ - position;
    }
    const int64_t end = offset_ + size_;
    if (nbytes > 0 && (position < offset_ || position + nbytes > end)) {
      return arrow::Status::IOError("the reader asked for bytes [", position, ", ",
                                    position + nbytes, ") outside the row group's range [", offset_,
                                    ", ", end, ")");
    }
    static constexpr uint8_t kEmpty = 0;
    if (nbytes == 0) return std::make_pair(&kEmpty, int64_t{0});
    return std::make_pair(bytes_ + (position - offset_), nbytes);
  }

  const int64_t file_size_;
  const int64_t offset_;
  const uint8_t* const bytes_;
  const int64_t size_;
  int64_t position_ = 0;
  bool closed_ = false;
};

// Arrow's allocations for one decode, counted and capped. Arrow's reader runs on the
// decoding thread only (use_threads off), so plain counters suffice. Allocates from the
// system allocator, not the wheel's jemalloc: freed row groups go back to the OS, and
// ASan sees Arrow's buffers, so a read past one of them in our conversion is caught.
// Lives as long as the decoded table (HrBridgeDecoded), whose buffers it frees.
class CappedPool final : public arrow::MemoryPool {
 public:
  explicit CappedPool(int64_t cap) : base_(arrow::system_memory_pool()), cap_(cap) {}

  arrow::Status Allocate(int64_t size, int64_t alignment, uint8_t** out) override {
    ARROW_RETURN_NOT_OK(Admit(size));
    ARROW_RETURN_NOT_OK(base_->Allocate(size, alignment, out));
    Count(size);
    ++allocations_;
    return arrow::Status::OK();
  }
  arrow::Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment,
                           uint8_t** ptr) override {
    ARROW_RETURN_NOT_OK(Admit(new_size - old_size));
    ARROW_RETURN_NOT_OK(base_->Reallocate(old_size, new_size, alignment, ptr));
    Count(new_size - old_size);
    return arrow::Status::OK();
  }
  void Free(uint8_t* buffer, int64_t size, int64_t alignment) override {
    base_->Free(buffer, size, alignment);
    allocated_ -= size;
  }
  int64_t bytes_allocated() const override { return allocated_; }
  int64_t max_memory() const override { return peak_; }
  int64_t total_bytes_allocated() const override { return total_; }
  int64_t num_allocations() const override { return allocations_; }
  std::string backend_name() const override { return "headrace-capped"; }

  bool refused() const { return refused_; }

 private:
  arrow::Status Admit(int64_t more) {
    if (cap_ > 0 && more > 0 && allocated_ + more > cap_) {
      refused_ = true;
      return arrow::Status::OutOfMemory("decoding needs more than max_decode_bytes (", cap_,
                                        "): ", allocated_, " allocated, ", more, " more asked");
    }
    return arrow::Status::OK();
  }
  void Count(int64_t delta) {
    allocated_ += delta;
    if (delta > 0) total_ += delta;
    peak_ = std::max(peak_, allocated_);
  }

  arrow::MemoryPool* base_;
  const int64_t cap_;
  int64_t allocated_ = 0;
  int64_t peak_ = 0;
  int64_t total_ = 0;
  int64_t allocations_ = 0;
  bool refused_ = false;
};

bool IsBinaryLike(arrow::Type::type id) {
  using arrow::Type;
  return id == Type::BINARY || id == Type::LARGE_BINARY || id == Type::FIXED_SIZE_BINARY ||
         id == Type::BINARY_VIEW;
}
bool IsStringLike(arrow::Type::type id) {
  using arrow::Type;
  return id == Type::STRING || id == Type::LARGE_STRING || id == Type::STRING_VIEW;
}

int32_t Classify(const arrow::DataType& type) {
  using arrow::Type;
  const Type::type id = type.id();
  if (IsBinaryLike(id)) return HR_BRIDGE_BYTES;
  if (IsStringLike(id)) return HR_BRIDGE_STRING;
  switch (id) {
    case Type::INT8:
    case Type::INT16:
    case Type::INT32:
    case Type::INT64:
    case Type::UINT8:
    case Type::UINT16:
    case Type::UINT32: return HR_BRIDGE_INT64;
    case Type::BOOL: return HR_BRIDGE_BOOL;
    case Type::HALF_FLOAT:
    case Type::FLOAT:
    case Type::DOUBLE: return HR_BRIDGE_DOUBLE;
    case Type::DICTIONARY: {
      // A column written from a pandas categorical: read back as dictionary<string>.
      const auto& value_type = *static_cast<const arrow::DictionaryType&>(type).value_type();
      if (IsBinaryLike(value_type.id())) return HR_BRIDGE_BYTES;
      if (IsStringLike(value_type.id())) return HR_BRIDGE_STRING;
      return HR_BRIDGE_UNSUPPORTED_KIND;
    }
    case Type::STRUCT: {
      // Hugging Face `datasets` Image / Audio: struct<bytes: binary, path: string>, in
      // either order, nothing else.
      if (type.num_fields() != 2) return HR_BRIDGE_UNSUPPORTED_KIND;
      int bytes = 0;
      int path = 0;
      for (const auto& field : type.fields()) {
        bytes += field->name() == "bytes" && IsBinaryLike(field->type()->id());
        path += field->name() == "path" && IsStringLike(field->type()->id());
      }
      return bytes == 1 && path == 1 ? HR_BRIDGE_BYTES_WITH_PATH : HR_BRIDGE_UNSUPPORTED_KIND;
    }
    default: return HR_BRIDGE_UNSUPPORTED_KIND;
  }
}

// A top-level column's kind, and whether it is a list of items of that kind. A list of
// lists (or of anything Classify does not read) is unsupported.
std::pair<int32_t, bool> ClassifyColumn(const arrow::DataType& type) {
  if (type.id() == arrow::Type::LIST || type.id() == arrow::Type::LARGE_LIST) {
    const arrow::DataType& item = *static_cast<const arrow::BaseListType&>(type).value_type();
    const int32_t kind = Classify(item);
    if (kind == HR_BRIDGE_UNSUPPORTED_KIND) return {kind, false};
    return {kind, true};
  }
  return {Classify(type), false};
}

void CollectLeaves(const parquet::arrow::SchemaField& field, std::vector<int>& out) {
  if (field.is_leaf()) out.push_back(field.column_index);
  for (const auto& child : field.children) CollectLeaves(child, out);
}

std::string RowGroupContext(int row_group) { return "row group " + std::to_string(row_group); }

}  // namespace

// The parsed footer and the layout's storage (the arrays HrBridgeLayout points into).
struct HrBridgeFooter {
  int64_t file_size = 0;
  std::shared_ptr<parquet::FileMetaData> metadata;
  // Per top-level column (layout order): its leaf column indices, what Arrow's reader
  // selects by.
  std::vector<std::vector<int>> leaves;
  std::vector<std::string> names;
  std::vector<std::string> arrow_types;
  std::vector<HrBridgeColumnInfo> columns;
  std::vector<HrBridgeRowGroupInfo> row_groups;
  std::vector<int64_t> column_uncompressed;
};

namespace {

// [offset, offset + length) of one column chunk, as Arrow's reader computes it
// (ComputeColumnChunkRange in parquet/file_reader.cc), so that our range covers every
// byte the reader will ask for: the dictionary page when it comes first, and up to 100
// bytes more for files from parquet-mr before 1.2.9, which left the dictionary page
// header out of total_compressed_size (PARQUET-816).
Failure ColumnChunkRange(const parquet::FileMetaData& metadata,
                         const parquet::ColumnChunkMetaData& chunk, int64_t file_size,
                         int64_t data_end, std::pair<int64_t, int64_t>& range) {
  int64_t start = chunk.data_page_offset();
  if (chunk.has_dictionary_page() && chunk.dictionary_page_offset() > 0 &&
      start > chunk.dictionary_page_offset()) {
    start = chunk.dictionary_page_offset();
  }
  int64_t length = chunk.total_compressed_size();
  if (start < 4 || length < 0 || start > data_end || length > data_end - start) {
    return Corrupt("column chunk [" + std::to_string(start) + ", +" + std::to_string(length) +
                   ") is not inside the data [4, " + std::to_string(data_end) + ")");
  }
  if (metadata.writer_version().VersionLt(
          parquet::ApplicationVersion::PARQUET_816_FIXED_VERSION())) {
    length += std::min<int64_t>(100, file_size - (start + length));
  }
  range = {start, length};
  return std::nullopt;
}

Failure ParseFooter(int64_t file_size, const uint8_t* footer_bytes, uint32_t footer_len,
                    HrBridgeFooter& footer, HrBridgeLayout& layout) {
  footer.file_size = file_size;
  const int64_t footer_total = static_cast<int64_t>(footer_len) + 8;
  parquet::ReaderProperties properties(arrow::system_memory_pool());
#if ARROW_VERSION_MAJOR >= 26
  footer.metadata =
      parquet::FileMetaData::Make(footer_bytes, static_cast<int64_t>(footer_len), properties);
#else  // the length goes in and out through a pointer
  uint32_t metadata_len = footer_len;
  footer.metadata = parquet::FileMetaData::Make(footer_bytes, &metadata_len, properties);
#endif
  const parquet::FileMetaData& metadata = *footer.metadata;
  if (metadata.is_encryption_algorithm_set()) {
    return Unsupported("encrypted Parquet file (plaintext footer)");
  }

  parquet::arrow::SchemaManifest manifest;
  const arrow::Status schema_status =
      parquet::arrow::SchemaManifest::Make(metadata.schema(), metadata.key_value_metadata(),
                                           parquet::ArrowReaderProperties(), &manifest);
  if (!schema_status.ok()) return Unsupported("schema: " + schema_status.message());
  std::set<std::string> names;
  std::vector<std::pair<int32_t, bool>> kinds;
  for (const auto& field : manifest.schema_fields) {
    const std::string& name = footer.names.emplace_back(field.field->name());
    kinds.push_back(ClassifyColumn(*field.field->type()));
    footer.arrow_types.push_back(field.field->type()->ToString());
    if (!names.insert(name).second) {
      return Unsupported("two top-level columns are named '" + name + "'");
    }
    CollectLeaves(field, footer.leaves.emplace_back());
  }
  // Leaf → top-level column, for the per-column sizes.
  const int num_columns = metadata.num_columns();
  const int num_top = static_cast<int>(footer.leaves.size());
  std::vector<int> top_of(static_cast<size_t>(num_columns), -1);
  for (int t = 0; t < num_top; ++t) {
    for (int leaf : footer.leaves[static_cast<size_t>(t)]) {
      if (leaf >= 0 && leaf < num_columns) top_of[static_cast<size_t>(leaf)] = t;
    }
  }

  const int64_t data_end = file_size - footer_total;
  int64_t rows = 0;
  for (int i = 0; i < metadata.num_row_groups(); ++i) {
    const std::unique_ptr<parquet::RowGroupMetaData> group = metadata.RowGroup(i);
    HrBridgeRowGroupInfo& out = footer.row_groups.emplace_back();
    out = HrBridgeRowGroupInfo{rows, group->num_rows(), 0, 0, 0};
    if (out.rows < 0 || out.rows > std::numeric_limits<int64_t>::max() - rows) {
      return Corrupt(RowGroupContext(i) + ": row count " + std::to_string(out.rows));
    }
    rows += out.rows;
    if (group->num_columns() != num_columns) {
      return Corrupt(RowGroupContext(i) + " has " + std::to_string(group->num_columns()) +
                     " column chunks, the schema " + std::to_string(num_columns));
    }
    const size_t sizes_at = footer.column_uncompressed.size();
    footer.column_uncompressed.resize(sizes_at + static_cast<size_t>(num_top), 0);
    int64_t begin = std::numeric_limits<int64_t>::max();
    int64_t end = 0;
    for (int c = 0; c < num_columns; ++c) {
      const std::unique_ptr<parquet::ColumnChunkMetaData> chunk = group->ColumnChunk(c);
      if (!chunk->file_path().empty()) {
        return Unsupported(RowGroupContext(i) + ": a column chunk lives in another file ('" +
                           chunk->file_path() + "')");
      }
      // An empty row group is never read (Arrow's writer gives its chunks offset 0).
      if (out.rows > 0) {
        std::pair<int64_t, int64_t> range;
        if (Failure f = ColumnChunkRange(metadata, *chunk, file_size, data_end, range)) {
          return f->WithContext(RowGroupContext(i) + ", column '" +
                                metadata.schema()->Column(c)->path()->ToDotString() + "'");
        }
        begin = std::min(begin, range.first);
        end = std::max(end, range.first + range.second);
      }
      // Every row puts at least one value (a null's included) in each column chunk: a
      // row count above a chunk's values is a footer that lies about its rows.
      if (chunk->num_values() < out.rows) {
        return Corrupt(RowGroupContext(i) + " declares " + std::to_string(out.rows) +
                       " rows but column '" + metadata.schema()->Column(c)->path()->ToDotString() +
                       "' holds " + std::to_string(chunk->num_values()) + " values");
      }
      const int64_t uncompressed = chunk->total_uncompressed_size();
      if (uncompressed < 0 ||
          uncompressed > std::numeric_limits<int64_t>::max() - out.uncompressed_bytes) {
        return Corrupt(RowGroupContext(i) + ": uncompressed size " + std::to_string(uncompressed));
      }
      out.uncompressed_bytes += uncompressed;
      // (Bounded by out.uncompressed_bytes, checked above.)
      const int top = top_of[static_cast<size_t>(c)];
      if (top >= 0) footer.column_uncompressed[sizes_at + static_cast<size_t>(top)] += uncompressed;
    }
    if (num_columns > 0 && out.rows > 0) {
      out.offset = begin;
      out.length = end - begin;
    }
  }
  if (rows != metadata.num_rows()) {
    return Corrupt("the footer says " + std::to_string(metadata.num_rows()) +
                   " rows, its row groups hold " + std::to_string(rows));
  }
  for (int t = 0; t < num_top; ++t) {
    const auto [kind, list] = kinds[static_cast<size_t>(t)];
    footer.columns.push_back({footer.names[static_cast<size_t>(t)].c_str(),
                              footer.arrow_types[static_cast<size_t>(t)].c_str(), kind,
                              list ? 1 : 0});
  }
  layout.rows = rows;
  layout.num_columns = num_top;
  layout.num_row_groups = static_cast<int32_t>(footer.row_groups.size());
  layout.columns = footer.columns.data();
  layout.row_groups = footer.row_groups.data();
  layout.column_uncompressed = footer.column_uncompressed.data();
  return std::nullopt;
}

// One column's normalized cells and the storage behind them. Bytes and strings point
// into Arrow's buffers, which the decoded table keeps alive.
struct Cells {
  std::vector<uint8_t> is_null;
  std::vector<const uint8_t*> data;
  std::vector<int64_t> sizes;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::vector<int64_t> list_begin;
  std::vector<int64_t> list_length;
  std::unique_ptr<Cells> media_bytes;
  std::unique_ptr<Cells> media_path;
  std::unique_ptr<Cells> items;
  HrBridgeCells c{};

  // Fills `c` from the vectors; call once they no longer grow.
  const HrBridgeCells& Publish(int32_t kind, bool list) {
    c.kind = kind;
    c.list = list ? 1 : 0;
    c.length = static_cast<int64_t>(is_null.size());
    c.is_null = is_null.data();
    c.data = data.data();
    c.sizes = sizes.data();
    c.ints = ints.data();
    c.doubles = doubles.data();
    c.media_bytes = media_bytes ? &media_bytes->Publish(HR_BRIDGE_BYTES, false) : nullptr;
    c.media_path = media_path ? &media_path->Publish(HR_BRIDGE_STRING, false) : nullptr;
    c.items = items ? &items->Publish(kind, false) : nullptr;
    c.list_begin = list_begin.data();
    c.list_length = list_length.data();
    return c;
  }
};

// Appends one view per row of a binary- or string-like `array` (a dictionary of them
// too: a pandas categorical column).
Failure AppendPlainViews(const arrow::Array& array, Cells& out) {
  using arrow::Type;
  auto each = [&](const auto& typed) -> Failure {
    for (int64_t i = 0; i < typed.length(); ++i) {
      const bool null = typed.IsNull(i);
      const std::string_view v = null ? std::string_view() : std::string_view(typed.GetView(i));
      out.is_null.push_back(null ? 1 : 0);
      out.data.push_back(reinterpret_cast<const uint8_t*>(v.data()));
      out.sizes.push_back(static_cast<int64_t>(v.size()));
    }
    return std::nullopt;
  };
  switch (array.type_id()) {
    case Type::BINARY:
    case Type::STRING: return each(static_cast<const arrow::BinaryArray&>(array));
    case Type::LARGE_BINARY:
    case Type::LARGE_STRING: return each(static_cast<const arrow::LargeBinaryArray&>(array));
    case Type::FIXED_SIZE_BINARY:
      return each(static_cast<const arrow::FixedSizeBinaryArray&>(array));
    case Type::BINARY_VIEW:
    case Type::STRING_VIEW: return each(static_cast<const arrow::BinaryViewArray&>(array));
    default: return Internal("not a binary or string array: " + array.type()->ToString());
  }
}

Failure AppendViews(const arrow::Array& array, Cells& out) {
  if (array.type_id() != arrow::Type::DICTIONARY) return AppendPlainViews(array, out);
  const auto& dict = static_cast<const arrow::DictionaryArray&>(array);
  Cells entries;
  if (Failure f = AppendPlainViews(*dict.dictionary(), entries)) return f;
  const auto count = static_cast<int64_t>(entries.is_null.size());
  for (int64_t i = 0; i < dict.length(); ++i) {
    if (dict.IsNull(i)) {
      out.is_null.push_back(1);
      out.data.push_back(nullptr);
      out.sizes.push_back(0);
      continue;
    }
    const int64_t index = dict.GetValueIndex(i);
    if (index < 0 || index >= count) {
      return Corrupt("dictionary index " + std::to_string(index) + " of " + std::to_string(count));
    }
    const auto at = static_cast<size_t>(index);
    out.is_null.push_back(entries.is_null[at]);
    out.data.push_back(entries.data[at]);
    out.sizes.push_back(entries.sizes[at]);
  }
  return std::nullopt;
}

template <typename ArrayType, typename Convert, typename T>
void AppendNumbers(const arrow::Array& array, Cells& out, std::vector<T>& values,
                   Convert&& convert) {
  const auto& typed = static_cast<const ArrayType&>(array);
  for (int64_t i = 0; i < typed.length(); ++i) {
    const bool null = typed.IsNull(i);
    out.is_null.push_back(null ? 1 : 0);
    values.push_back(null ? T{} : static_cast<T>(convert(typed.Value(i))));
  }
}

Failure AppendChunk(int32_t kind, const arrow::Array& array, Cells& out) {
  using arrow::Type;
  auto same = [](auto v) { return v; };
  switch (kind) {
    case HR_BRIDGE_BYTES:
    case HR_BRIDGE_STRING: return AppendViews(array, out);
    case HR_BRIDGE_BOOL:
      AppendNumbers<arrow::BooleanArray>(array, out, out.ints, same);
      return std::nullopt;
    case HR_BRIDGE_INT64:
      switch (array.type_id()) {
        case Type::INT8: AppendNumbers<arrow::Int8Array>(array, out, out.ints, same); break;
        case Type::INT16: AppendNumbers<arrow::Int16Array>(array, out, out.ints, same); break;
        case Type::INT32: AppendNumbers<arrow::Int32Array>(array, out, out.ints, same); break;
        case Type::INT64: AppendNumbers<arrow::Int64Array>(array, out, out.ints, same); break;
        case Type::UINT8: AppendNumbers<arrow::UInt8Array>(array, out, out.ints, same); break;
        case Type::UINT16: AppendNumbers<arrow::UInt16Array>(array, out, out.ints, same); break;
        case Type::UINT32: AppendNumbers<arrow::UInt32Array>(array, out, out.ints, same); break;
        default: return Internal("not an integer array: " + array.type()->ToString());
      }
      return std::nullopt;
    case HR_BRIDGE_DOUBLE:
      switch (array.type_id()) {
        case Type::HALF_FLOAT:
          AppendNumbers<arrow::HalfFloatArray>(array, out, out.doubles, [](uint16_t bits) {
            return arrow::util::Float16::FromBits(bits).ToDouble();
          });
          break;
        case Type::FLOAT: AppendNumbers<arrow::FloatArray>(array, out, out.doubles, same); break;
        case Type::DOUBLE: AppendNumbers<arrow::DoubleArray>(array, out, out.doubles, same); break;
        default: return Internal("not a float array: " + array.type()->ToString());
      }
      return std::nullopt;
    case HR_BRIDGE_BYTES_WITH_PATH: {
      const auto& strukt = static_cast<const arrow::StructArray&>(array);
      const auto bytes = strukt.GetFieldByName("bytes");
      const auto path = strukt.GetFieldByName("path");
      if (bytes == nullptr || path == nullptr) {
        return Internal("struct without bytes and path: " + array.type()->ToString());
      }
      if (!out.media_bytes) out.media_bytes = std::make_unique<Cells>();
      if (!out.media_path) out.media_path = std::make_unique<Cells>();
      const size_t before = out.is_null.size();
      if (Failure f = AppendViews(*bytes, *out.media_bytes)) return f;
      if (Failure f = AppendViews(*path, *out.media_path)) return f;
      const size_t expected = before + static_cast<size_t>(strukt.length());
      if (out.media_bytes->is_null.size() != expected ||
          out.media_path->is_null.size() != expected) {
        return Corrupt("struct children of different lengths");
      }
      for (int64_t i = 0; i < strukt.length(); ++i) out.is_null.push_back(strukt.IsNull(i) ? 1 : 0);
      return std::nullopt;
    }
    default: break;
  }
  return Internal("no conversion for " + array.type()->ToString());
}

// A list column's chunk: its items appended as a column of `kind` (every item of the
// chunk, in order), and each row's range of them from the list's offsets.
Failure AppendListChunk(int32_t kind, const arrow::Array& array, Cells& out) {
  if (!out.items) out.items = std::make_unique<Cells>();
  auto cut = [&](const auto& list) -> Failure {
    const auto base = static_cast<int64_t>(out.items->is_null.size());
    if (Failure f = AppendChunk(kind, *list.values(), *out.items)) return f;
    const int64_t count = static_cast<int64_t>(out.items->is_null.size()) - base;
    for (int64_t i = 0; i < list.length(); ++i) {
      if (list.IsNull(i)) {
        out.is_null.push_back(1);
        out.list_begin.push_back(0);
        out.list_length.push_back(0);
        continue;
      }
      const int64_t begin = list.value_offset(i);
      const int64_t length = list.value_length(i);
      if (begin < 0 || length < 0 || begin > count || length > count - begin) {
        return Corrupt("list offsets [" + std::to_string(begin) + ", +" + std::to_string(length) +
                       ") outside its " + std::to_string(count) + " items");
      }
      out.is_null.push_back(0);
      out.list_begin.push_back(base + begin);
      out.list_length.push_back(length);
    }
    return std::nullopt;
  };
  switch (array.type_id()) {
    case arrow::Type::LIST: return cut(static_cast<const arrow::ListArray&>(array));
    case arrow::Type::LARGE_LIST: return cut(static_cast<const arrow::LargeListArray&>(array));
    default: return Internal("not a list array: " + array.type()->ToString());
  }
}

}  // namespace

// One decoded row group: the pool first (it must outlive every Arrow object allocated
// from it), the table the cells point into, the cells.
struct HrBridgeDecoded {
  explicit HrBridgeDecoded(int64_t cap) : pool(cap) {}

  CappedPool pool;
  std::shared_ptr<arrow::Table> table;
  std::deque<Cells> columns;
  std::vector<HrBridgeCells> published;
};

namespace {

Failure Decode(const HrBridgeFooter& footer, int row_group, int64_t offset, const uint8_t* bytes,
               int64_t size, const int32_t* columns, int32_t num_columns,
               HrBridgeDecoded& decoded) {
  const std::string context = RowGroupContext(row_group);
  if (row_group < 0 || row_group >= static_cast<int>(footer.row_groups.size())) {
    return Error{HR_BRIDGE_INVALID_ARGUMENT, context + ": the file has " +
                                                 std::to_string(footer.row_groups.size()) +
                                                 " row groups"};
  }
  std::vector<int> leaves;
  for (int32_t k = 0; k < num_columns; ++k) {
    const int32_t index = columns[k];
    if (index < 0 || static_cast<size_t>(index) >= footer.leaves.size()) {
      return Error{HR_BRIDGE_INVALID_ARGUMENT,
                   context + ": no column " + std::to_string(index)};
    }
    if (footer.columns[static_cast<size_t>(index)].kind == HR_BRIDGE_UNSUPPORTED_KIND) {
      return Unsupported(context + ": column '" + footer.names[static_cast<size_t>(index)] +
                         "' is not read");
    }
    const auto& column_leaves = footer.leaves[static_cast<size_t>(index)];
    leaves.insert(leaves.end(), column_leaves.begin(), column_leaves.end());
  }
  std::sort(leaves.begin(), leaves.end());

  {
    auto file = std::make_shared<RowGroupFile>(footer.file_size, offset, bytes, size);
    parquet::ReaderProperties properties(&decoded.pool);
    properties.set_page_checksum_verification(true);  // when the writer wrote CRCs
    parquet::ArrowReaderProperties arrow_properties;
    // The engine owns the threads, and the bytes are in memory already.
    arrow_properties.set_use_threads(false);
    arrow_properties.set_pre_buffer(false);
    std::unique_ptr<parquet::ParquetFileReader> parquet_reader =
        parquet::ParquetFileReader::Open(file, properties, footer.metadata);
    // The one place the supported releases' APIs differ: Arrow 23 made FileReader::Make,
    // 24 ReadRowGroup return a Result instead of filling an out-parameter.
    std::unique_ptr<parquet::arrow::FileReader> reader;
#if ARROW_VERSION_MAJOR >= 23
    arrow::Result<std::unique_ptr<parquet::arrow::FileReader>> made =
        parquet::arrow::FileReader::Make(&decoded.pool, std::move(parquet_reader),
                                         arrow_properties);
    arrow::Status status = made.status();
    if (made.ok()) reader = std::move(made).ValueOrDie();
#else
    arrow::Status status = parquet::arrow::FileReader::Make(
        &decoded.pool, std::move(parquet_reader), arrow_properties, &reader);
#endif
    if (!status.ok()) return FromArrow(status, context);
#if ARROW_VERSION_MAJOR >= 24
    arrow::Result<std::shared_ptr<arrow::Table>> read = reader->ReadRowGroup(row_group, leaves);
    status = read.status();
    if (read.ok()) decoded.table = std::move(read).ValueOrDie();
#else
    status = reader->ReadRowGroup(row_group, leaves, &decoded.table);
#endif
    if (!status.ok()) {
      if (decoded.pool.refused()) return Error{HR_BRIDGE_DECODE_CAP, context};
      return FromArrow(status, context);
    }
  }

  for (int32_t k = 0; k < num_columns; ++k) {
    const auto index = static_cast<size_t>(columns[k]);
    const HrBridgeColumnInfo& column = footer.columns[index];
    const std::string& name = footer.names[index];
    Cells& cells = decoded.columns.emplace_back();
    const std::shared_ptr<arrow::ChunkedArray> chunks = decoded.table->GetColumnByName(name);
    if (chunks == nullptr) return Internal(context + ": Arrow returned no column '" + name + "'");
    for (const std::shared_ptr<arrow::Array>& chunk : chunks->chunks()) {
      const Failure f = column.list ? AppendListChunk(column.kind, *chunk, cells)
                                    : AppendChunk(column.kind, *chunk, cells);
      if (f) return f->WithContext(context + ", column '" + name + "'");
    }
  }
  for (size_t k = 0; k < decoded.columns.size(); ++k) {
    const HrBridgeColumnInfo& column = footer.columns[static_cast<size_t>(columns[k])];
    decoded.published.push_back(decoded.columns[k].Publish(column.kind, column.list != 0));
  }
  return std::nullopt;
}

int32_t BridgeParseFooter(int64_t file_size, const uint8_t* footer_bytes, uint32_t footer_len,
                          HrBridgeFooter** footer_out, HrBridgeLayout* layout,
                          char** message) noexcept {
  std::unique_ptr<HrBridgeFooter> footer;
  HrBridgeLayout parsed{};
  const Failure failure = Guarded("Parquet footer", [&]() -> Failure {
    footer = std::make_unique<HrBridgeFooter>();
    return ParseFooter(file_size, footer_bytes, footer_len, *footer, parsed);
  });
  if (failure) return Report(failure, message);
  *layout = parsed;
  *footer_out = footer.release();
  return HR_BRIDGE_OK;
}

void BridgeFreeFooter(HrBridgeFooter* footer) noexcept { delete footer; }

int32_t BridgeDecode(const HrBridgeFooter* footer, int32_t row_group, int64_t offset,
                     const uint8_t* bytes, int64_t size, const int32_t* columns,
                     int32_t num_columns, int64_t max_decode_bytes,
                     HrBridgeDecoded** decoded_out, HrBridgeDecodedInfo* info,
                     char** message) noexcept {
  std::unique_ptr<HrBridgeDecoded> decoded;
  const Failure failure = Guarded(RowGroupContext(row_group), [&]() -> Failure {
    decoded = std::make_unique<HrBridgeDecoded>(max_decode_bytes);
    return Decode(*footer, row_group, offset, bytes, size, columns, num_columns, *decoded);
  });
  if (failure) {
    // The pool refusing may surface as bad_alloc or a ParquetException too.
    if (decoded && decoded->pool.refused()) {
      return Report(Error{HR_BRIDGE_DECODE_CAP, RowGroupContext(row_group)}, message);
    }
    return Report(failure, message);
  }
  info->rows = decoded->table->num_rows();
  info->peak_bytes = decoded->pool.max_memory();
  info->cells = decoded->published.data();
  *decoded_out = decoded.release();
  return HR_BRIDGE_OK;
}

void BridgeFreeDecoded(HrBridgeDecoded* decoded) noexcept { delete decoded; }

void BridgeFreeMessage(char* message) noexcept { std::free(message); }

constexpr HrArrowBridge kBridge = {
    HR_ARROW_BRIDGE_ABI,
    sizeof(HrArrowBridge),
    ARROW_VERSION_MAJOR * 100 + ARROW_VERSION_MINOR,
    ARROW_VERSION_STRING,
    &BridgeParseFooter,
    &BridgeFreeFooter,
    &BridgeDecode,
    &BridgeFreeDecoded,
    &BridgeFreeMessage,
};

}  // namespace

// The one exported symbol (the library is built with hidden visibility).
extern "C" __attribute__((visibility("default"))) const HrArrowBridge* headrace_arrow_bridge_v1() {
  return &kBridge;
}
