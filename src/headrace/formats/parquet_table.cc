#include "headrace/formats/parquet_table.h"

#include <arrow/api.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/float16.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <set>
#include <tuple>
#include <utility>

namespace headrace {

struct ParquetFooter {
  std::shared_ptr<parquet::FileMetaData> metadata;
  // Per top-level column (layout order): its leaf column indices, what Arrow's reader
  // selects by.
  std::vector<std::vector<int>> leaves;
};

namespace {

constexpr std::string_view kMagic = "PAR1";
constexpr std::string_view kEncryptedMagic = "PARE";

// Arrow's error → ours. The reader's only I/O is RowGroupFile, whose errors mean the
// metadata pointed outside the row group's bytes: a damaged file, not an I/O failure.
Status FromArrow(const arrow::Status& status, std::string_view context) {
  std::string message(context);
  message.append(": ").append(status.message());
  if (status.IsOutOfMemory()) return Status::ResourceExhausted(std::move(message));
  if (status.IsNotImplemented()) return Status::UnsupportedFormat(std::move(message));
  return Status::CorruptData(std::move(message));
}

// Runs `body`, turning what Arrow and Parquet throw into a Status: parquet reports damaged
// files with ParquetException, and std::bad_alloc may come from any allocation.
template <typename T, typename F>
Result<T> Guarded(std::string_view context, F&& body) {
  try {
    return body();
  } catch (const parquet::ParquetStatusException& e) {
    return FromArrow(e.status(), context);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(std::string(context) + ": out of memory");
  } catch (const std::exception& e) {
    return Status::CorruptData(std::string(context) + ": " + e.what());
  } catch (...) {
    return Status::CorruptData(std::string(context) + ": unknown exception");
  }
}

// An arrow::Buffer that views a headrace::Buffer and keeps it alive: the reader's page
// buffers are slices of the caller's bytes, no copy.
class HeldBuffer final : public arrow::Buffer {
 public:
  explicit HeldBuffer(headrace::Buffer held)
      : arrow::Buffer(held.data(), static_cast<int64_t>(held.size())), held_(std::move(held)) {}

 private:
  headrace::Buffer held_;
};

// The file as Arrow's reader sees it: `file_size` bytes, of which only one row group's
// range [offset, offset + bytes.size()) is here. The footer is never read (the reader is
// opened with the parsed metadata); a read outside the range is an error that names it,
// so a footer whose page offsets lie cannot make the reader wander.
class RowGroupFile final : public arrow::io::RandomAccessFile {
 public:
  RowGroupFile(int64_t file_size, int64_t offset, headrace::Buffer bytes)
      : file_size_(file_size), offset_(offset), bytes_(std::move(bytes)) {}

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
  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, bool allow_short_read,
                                void* out) override {
    ARROW_ASSIGN_OR_RAISE(headrace::Buffer view, View(position, nbytes, allow_short_read));
    if (!view.empty()) std::memcpy(out, view.data(), view.size());
    return static_cast<int64_t>(view.size());
  }
  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override {
    return ReadAt(position, nbytes, /*allow_short_read=*/true, out);
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes,
                                                       bool allow_short_read) override {
    ARROW_ASSIGN_OR_RAISE(headrace::Buffer view, View(position, nbytes, allow_short_read));
    return std::make_shared<HeldBuffer>(std::move(view));
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    return ReadAt(position, nbytes, /*allow_short_read=*/true);
  }

 private:
  arrow::Result<headrace::Buffer> View(int64_t position, int64_t nbytes,
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
    const int64_t end = offset_ + static_cast<int64_t>(bytes_.size());
    if (nbytes > 0 && (position < offset_ || position + nbytes > end)) {
      return arrow::Status::IOError("the reader asked for bytes [", position, ", ",
                                    position + nbytes, ") outside the row group's range [", offset_,
                                    ", ", end, ")");
    }
    if (nbytes == 0) return headrace::Buffer();
    return bytes_.Slice(static_cast<size_t>(position - offset_), static_cast<size_t>(nbytes));
  }

  const int64_t file_size_;
  const int64_t offset_;
  const headrace::Buffer bytes_;
  int64_t position_ = 0;
  bool closed_ = false;
};

// Arrow's allocations for one decode, counted and capped. Arrow's reader runs on the
// decoding thread only (use_threads off), so plain counters suffice. Allocates from the
// system allocator, not the wheel's jemalloc: freed row groups go back to the OS, and
// ASan sees Arrow's buffers, so a read past one of them in our conversion is caught.
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
  int64_t cap() const { return cap_; }

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

ParquetColumnKind Classify(const arrow::DataType& type) {
  using arrow::Type;
  const Type::type id = type.id();
  if (IsBinaryLike(id)) return ParquetColumnKind::kBytes;
  if (IsStringLike(id)) return ParquetColumnKind::kString;
  switch (id) {
    case Type::INT8:
    case Type::INT16:
    case Type::INT32:
    case Type::INT64:
    case Type::UINT8:
    case Type::UINT16:
    case Type::UINT32: return ParquetColumnKind::kInt64;
    case Type::BOOL: return ParquetColumnKind::kBool;
    case Type::HALF_FLOAT:
    case Type::FLOAT:
    case Type::DOUBLE: return ParquetColumnKind::kDouble;
    case Type::DICTIONARY: {
      // A column written from a pandas categorical: read back as dictionary<string>.
      const auto& value_type = *static_cast<const arrow::DictionaryType&>(type).value_type();
      if (IsBinaryLike(value_type.id())) return ParquetColumnKind::kBytes;
      if (IsStringLike(value_type.id())) return ParquetColumnKind::kString;
      return ParquetColumnKind::kUnsupported;
    }
    case Type::STRUCT: {
      // Hugging Face `datasets` Image / Audio: struct<bytes: binary, path: string>, in
      // either order, nothing else.
      if (type.num_fields() != 2) return ParquetColumnKind::kUnsupported;
      int bytes = 0;
      int path = 0;
      for (const auto& field : type.fields()) {
        bytes += field->name() == "bytes" && IsBinaryLike(field->type()->id());
        path += field->name() == "path" && IsStringLike(field->type()->id());
      }
      return bytes == 1 && path == 1 ? ParquetColumnKind::kBytesWithPath
                                     : ParquetColumnKind::kUnsupported;
    }
    default: return ParquetColumnKind::kUnsupported;
  }
}

// A top-level column's kind, and whether it is a list of items of that kind. A list of
// lists (or of anything Classify does not read) is kUnsupported.
std::pair<ParquetColumnKind, bool> ClassifyColumn(const arrow::DataType& type) {
  if (type.id() == arrow::Type::LIST || type.id() == arrow::Type::LARGE_LIST) {
    const arrow::DataType& item = *static_cast<const arrow::BaseListType&>(type).value_type();
    const ParquetColumnKind kind = Classify(item);
    if (kind == ParquetColumnKind::kUnsupported) return {kind, false};
    return {kind, true};
  }
  return {Classify(type), false};
}

void CollectLeaves(const parquet::arrow::SchemaField& field, std::vector<int>& out) {
  if (field.is_leaf()) out.push_back(field.column_index);
  for (const auto& child : field.children) CollectLeaves(child, out);
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

// [offset, offset + length) of one column chunk, as Arrow's reader computes it
// (ComputeColumnChunkRange in parquet/file_reader.cc), so that our range covers every
// byte the reader will ask for: the dictionary page when it comes first, and up to 100
// bytes more for files from parquet-mr before 1.2.9, which left the dictionary page
// header out of total_compressed_size (PARQUET-816).
Result<std::pair<int64_t, int64_t>> ColumnChunkRange(const parquet::FileMetaData& metadata,
                                                     const parquet::ColumnChunkMetaData& chunk,
                                                     int64_t file_size, int64_t data_end) {
  int64_t start = chunk.data_page_offset();
  if (chunk.has_dictionary_page() && chunk.dictionary_page_offset() > 0 &&
      start > chunk.dictionary_page_offset()) {
    start = chunk.dictionary_page_offset();
  }
  int64_t length = chunk.total_compressed_size();
  if (start < 4 || length < 0 || start > data_end || length > data_end - start) {
    return Status::CorruptData("column chunk [" + std::to_string(start) + ", +" +
                               std::to_string(length) + ") is not inside the data [4, " +
                               std::to_string(data_end) + ")");
  }
  if (metadata.writer_version().VersionLt(
          parquet::ApplicationVersion::PARQUET_816_FIXED_VERSION())) {
    length += std::min<int64_t>(100, file_size - (start + length));
  }
  return std::make_pair(start, length);
}

Result<ParquetLayout> ParseFooter(int64_t file_size, const uint8_t* footer, uint32_t footer_len) {
  ParquetLayout layout;
  layout.file_size = file_size;
  layout.footer_bytes = static_cast<int64_t>(footer_len) + 8;
  auto parsed = std::make_shared<ParquetFooter>();
  parquet::ReaderProperties properties(arrow::system_memory_pool());
#if ARROW_VERSION_MAJOR >= 26
  parsed->metadata =
      parquet::FileMetaData::Make(footer, static_cast<int64_t>(footer_len), properties);
#else  // pyarrow 25 (the CUDA image's): the length goes in and out through a pointer
  uint32_t metadata_len = footer_len;
  parsed->metadata = parquet::FileMetaData::Make(footer, &metadata_len, properties);
#endif
  const parquet::FileMetaData& metadata = *parsed->metadata;
  if (metadata.is_encryption_algorithm_set()) {
    return Status::UnsupportedFormat("encrypted Parquet file (plaintext footer)");
  }

  parquet::arrow::SchemaManifest manifest;
  const arrow::Status schema_status =
      parquet::arrow::SchemaManifest::Make(metadata.schema(), metadata.key_value_metadata(),
                                           parquet::ArrowReaderProperties(), &manifest);
  if (!schema_status.ok()) {
    return Status::UnsupportedFormat("schema: " + schema_status.message());
  }
  std::set<std::string> names;
  for (const auto& field : manifest.schema_fields) {
    ParquetColumn& column = layout.columns.emplace_back();
    column.name = field.field->name();
    std::tie(column.kind, column.list) = ClassifyColumn(*field.field->type());
    column.arrow_type = field.field->type()->ToString();
    if (!names.insert(column.name).second) {
      return Status::UnsupportedFormat("two top-level columns are named '" + column.name + "'");
    }
    CollectLeaves(field, parsed->leaves.emplace_back());
  }

  const int num_columns = metadata.num_columns();
  const int64_t data_end = file_size - layout.footer_bytes;
  int64_t rows = 0;
  for (int i = 0; i < metadata.num_row_groups(); ++i) {
    const std::unique_ptr<parquet::RowGroupMetaData> group = metadata.RowGroup(i);
    ParquetRowGroup& out = layout.row_groups.emplace_back();
    out.first_row = rows;
    out.rows = group->num_rows();
    if (out.rows < 0 || out.rows > std::numeric_limits<int64_t>::max() - rows) {
      return Status::CorruptData(RowGroupContext(i) + ": row count " + std::to_string(out.rows));
    }
    rows += out.rows;
    if (group->num_columns() != num_columns) {
      return Status::CorruptData(RowGroupContext(i) + " has " +
                                 std::to_string(group->num_columns()) +
                                 " column chunks, the schema " + std::to_string(num_columns));
    }
    int64_t begin = std::numeric_limits<int64_t>::max();
    int64_t end = 0;
    for (int c = 0; c < num_columns; ++c) {
      const std::unique_ptr<parquet::ColumnChunkMetaData> chunk = group->ColumnChunk(c);
      if (!chunk->file_path().empty()) {
        return Status::UnsupportedFormat(RowGroupContext(i) +
                                         ": a column chunk lives in another file ('" +
                                         chunk->file_path() + "')");
      }
      // An empty row group is never read (Arrow's writer gives its chunks offset 0).
      if (out.rows > 0) {
        Result<std::pair<int64_t, int64_t>> range =
            ColumnChunkRange(metadata, *chunk, file_size, data_end);
        if (!range.ok()) {
          return range.status().WithContext(RowGroupContext(i) + ", column '" +
                                            metadata.schema()->Column(c)->path()->ToDotString() +
                                            "'");
        }
        begin = std::min(begin, range->first);
        end = std::max(end, range->first + range->second);
      }
      // Every row puts at least one value (a null's included) in each column chunk: a
      // row count above a chunk's values is a footer that lies about its rows.
      if (chunk->num_values() < out.rows) {
        return Status::CorruptData(
            RowGroupContext(i) + " declares " + std::to_string(out.rows) + " rows but column '" +
            metadata.schema()->Column(c)->path()->ToDotString() + "' holds " +
            std::to_string(chunk->num_values()) + " values");
      }
      const int64_t uncompressed = chunk->total_uncompressed_size();
      if (uncompressed < 0 ||
          uncompressed > std::numeric_limits<int64_t>::max() - out.uncompressed_bytes) {
        return Status::CorruptData(RowGroupContext(i) + ": uncompressed size " +
                                   std::to_string(uncompressed));
      }
      out.uncompressed_bytes += uncompressed;
    }
    if (num_columns > 0 && out.rows > 0) {
      out.offset = begin;
      out.length = end - begin;
    }
  }
  if (rows != metadata.num_rows()) {
    return Status::CorruptData("the footer says " + std::to_string(metadata.num_rows()) +
                               " rows, its row groups hold " + std::to_string(rows));
  }
  layout.rows = rows;
  layout.footer = std::move(parsed);
  return layout;
}

// Calls `emit(std::optional<std::string_view>)` once per row of a binary- or
// string-like `array`, in order; nullopt is null.
template <typename Emit>
Status ForEachPlainView(const arrow::Array& array, Emit&& emit) {
  using arrow::Type;
  auto each = [&](const auto& typed) {
    for (int64_t i = 0; i < typed.length(); ++i) {
      if (typed.IsNull(i)) {
        emit(std::optional<std::string_view>());
      } else {
        emit(std::optional<std::string_view>(typed.GetView(i)));
      }
    }
    return Status::Ok();
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
    default: return Status::Internal("not a binary or string array: " + array.type()->ToString());
  }
}

// The same, also for a dictionary of binary or strings (a pandas categorical column).
template <typename Emit>
Status ForEachView(const arrow::Array& array, Emit&& emit) {
  if (array.type_id() != arrow::Type::DICTIONARY) return ForEachPlainView(array, emit);
  const auto& dict = static_cast<const arrow::DictionaryArray&>(array);
  std::vector<std::optional<std::string_view>> entries;
  entries.reserve(static_cast<size_t>(dict.dictionary()->length()));
  HR_RETURN_IF_ERROR(ForEachPlainView(
      *dict.dictionary(), [&](std::optional<std::string_view> v) { entries.push_back(v); }));
  for (int64_t i = 0; i < dict.length(); ++i) {
    if (dict.IsNull(i)) {
      emit(std::optional<std::string_view>());
      continue;
    }
    const int64_t index = dict.GetValueIndex(i);
    if (index < 0 || index >= static_cast<int64_t>(entries.size())) {
      return Status::CorruptData("dictionary index " + std::to_string(index) + " of " +
                                 std::to_string(entries.size()));
    }
    emit(entries[static_cast<size_t>(index)]);
  }
  return Status::Ok();
}

// Bytes cells, copied into one Buffer per chunk; each cell is a slice of it.
//
// Why a copy: headrace::Buffer cannot adopt memory it did not allocate (core/buffer.h
// has no foreign-owner constructor), and a zero-copy view would keep the whole Arrow
// chunk — offsets, validity, and for a dictionary column the dictionary — alive as long
// as any one sample's bytes. One memcpy per column is small next to decoding the images
// in it, and the copy is exactly what `decoded_bytes` counts.
Status AppendBytes(const arrow::Array& array, std::vector<ParquetValue>& out,
                   std::vector<std::optional<Buffer>>* media_out, int64_t& decoded) {
  size_t total = 0;
  HR_RETURN_IF_ERROR(ForEachView(array, [&](std::optional<std::string_view> v) {
    if (v) total += v->size();
  }));
  HR_ASSIGN_OR_RETURN(Buffer block, Buffer::Allocate(total));
  decoded += static_cast<int64_t>(total);
  size_t at = 0;
  return ForEachView(array, [&](std::optional<std::string_view> v) {
    std::optional<Buffer> cell;
    if (v) {
      if (!v->empty()) std::memcpy(block.mutable_data() + at, v->data(), v->size());
      cell = block.Slice(at, v->size());
      at += v->size();
    }
    if (media_out != nullptr) {
      media_out->push_back(std::move(cell));
    } else if (cell) {
      out.emplace_back(std::move(*cell));
    } else {
      out.emplace_back(std::monostate());
    }
  });
}

Status AppendStrings(const arrow::Array& array, std::vector<ParquetValue>& out,
                     std::vector<std::optional<std::string>>* media_out, int64_t& decoded) {
  return ForEachView(array, [&](std::optional<std::string_view> v) {
    std::optional<std::string> cell;
    if (v) {
      cell.emplace(*v);
      // Heap bytes beyond the small-string buffer.
      if (cell->capacity() > 15) decoded += static_cast<int64_t>(cell->capacity()) + 1;
    }
    if (media_out != nullptr) {
      media_out->push_back(std::move(cell));
    } else if (cell) {
      out.emplace_back(std::move(*cell));
    } else {
      out.emplace_back(std::monostate());
    }
  });
}

template <typename ArrayType, typename Convert>
void AppendNumbers(const arrow::Array& array, std::vector<ParquetValue>& out, Convert&& convert) {
  const auto& typed = static_cast<const ArrayType&>(array);
  for (int64_t i = 0; i < typed.length(); ++i) {
    if (typed.IsNull(i)) {
      out.emplace_back(std::monostate());
    } else {
      out.emplace_back(convert(typed.Value(i)));
    }
  }
}

Status AppendChunk(ParquetColumnKind kind, const arrow::Array& array,
                   std::vector<ParquetValue>& out, int64_t& decoded) {
  using arrow::Type;
  auto as_int = [](auto v) { return static_cast<int64_t>(v); };
  auto as_double = [](auto v) { return static_cast<double>(v); };
  switch (kind) {
    case ParquetColumnKind::kBytes: return AppendBytes(array, out, nullptr, decoded);
    case ParquetColumnKind::kString: return AppendStrings(array, out, nullptr, decoded);
    case ParquetColumnKind::kBool:
      AppendNumbers<arrow::BooleanArray>(array, out, as_int);
      return Status::Ok();
    case ParquetColumnKind::kInt64:
      switch (array.type_id()) {
        case Type::INT8: AppendNumbers<arrow::Int8Array>(array, out, as_int); break;
        case Type::INT16: AppendNumbers<arrow::Int16Array>(array, out, as_int); break;
        case Type::INT32: AppendNumbers<arrow::Int32Array>(array, out, as_int); break;
        case Type::INT64: AppendNumbers<arrow::Int64Array>(array, out, as_int); break;
        case Type::UINT8: AppendNumbers<arrow::UInt8Array>(array, out, as_int); break;
        case Type::UINT16: AppendNumbers<arrow::UInt16Array>(array, out, as_int); break;
        case Type::UINT32: AppendNumbers<arrow::UInt32Array>(array, out, as_int); break;
        default: return Status::Internal("not an integer array: " + array.type()->ToString());
      }
      return Status::Ok();
    case ParquetColumnKind::kDouble:
      switch (array.type_id()) {
        case Type::HALF_FLOAT:
          AppendNumbers<arrow::HalfFloatArray>(array, out, [](uint16_t bits) {
            return arrow::util::Float16::FromBits(bits).ToDouble();
          });
          break;
        case Type::FLOAT: AppendNumbers<arrow::FloatArray>(array, out, as_double); break;
        case Type::DOUBLE: AppendNumbers<arrow::DoubleArray>(array, out, as_double); break;
        default: return Status::Internal("not a float array: " + array.type()->ToString());
      }
      return Status::Ok();
    case ParquetColumnKind::kBytesWithPath: {
      const auto& strukt = static_cast<const arrow::StructArray&>(array);
      const auto bytes = strukt.GetFieldByName("bytes");
      const auto path = strukt.GetFieldByName("path");
      if (bytes == nullptr || path == nullptr) {
        return Status::Internal("struct without bytes and path: " + array.type()->ToString());
      }
      std::vector<std::optional<Buffer>> byte_cells;
      std::vector<std::optional<std::string>> path_cells;
      byte_cells.reserve(static_cast<size_t>(strukt.length()));
      path_cells.reserve(static_cast<size_t>(strukt.length()));
      HR_RETURN_IF_ERROR(AppendBytes(*bytes, out, &byte_cells, decoded));
      HR_RETURN_IF_ERROR(AppendStrings(*path, out, &path_cells, decoded));
      if (byte_cells.size() != static_cast<size_t>(strukt.length()) ||
          path_cells.size() != byte_cells.size()) {
        return Status::CorruptData("struct children of different lengths");
      }
      for (int64_t i = 0; i < strukt.length(); ++i) {
        if (strukt.IsNull(i)) {
          out.emplace_back(std::monostate());
        } else {
          out.emplace_back(ParquetMedia{std::move(byte_cells[static_cast<size_t>(i)]),
                                        std::move(path_cells[static_cast<size_t>(i)])});
        }
      }
      return Status::Ok();
    }
    case ParquetColumnKind::kUnsupported: break;
  }
  return Status::Internal("no conversion for " + array.type()->ToString());
}

// A list column's chunk: its items converted as a column of `kind` (every item of the
// chunk, in order), then cut into one ParquetList per row by the list's offsets.
Status AppendListChunk(ParquetColumnKind kind, const arrow::Array& array,
                       std::vector<ParquetValue>& out, int64_t& decoded) {
  auto cut = [&](const auto& list) -> Status {
    std::vector<ParquetValue> items;
    items.reserve(static_cast<size_t>(list.values()->length()));
    HR_RETURN_IF_ERROR(AppendChunk(kind, *list.values(), items, decoded));
    decoded += static_cast<int64_t>(items.size() * sizeof(ParquetValue));
    for (int64_t i = 0; i < list.length(); ++i) {
      if (list.IsNull(i)) {
        out.emplace_back(std::monostate());
        continue;
      }
      const int64_t begin = list.value_offset(i);
      const int64_t length = list.value_length(i);
      if (begin < 0 || length < 0 || begin > static_cast<int64_t>(items.size()) ||
          length > static_cast<int64_t>(items.size()) - begin) {
        return Status::CorruptData("list offsets [" + std::to_string(begin) + ", +" +
                                   std::to_string(length) + ") outside its " +
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
  };
  switch (array.type_id()) {
    case arrow::Type::LIST: return cut(static_cast<const arrow::ListArray&>(array));
    case arrow::Type::LARGE_LIST: return cut(static_cast<const arrow::LargeListArray&>(array));
    default: return Status::Internal("not a list array: " + array.type()->ToString());
  }
}

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
  std::vector<size_t> selected;
  if (columns.empty()) {
    for (size_t i = 0; i < layout.columns.size(); ++i) selected.push_back(i);
  }
  for (const std::string& name : columns) {
    const ParquetColumn* column = layout.FindColumn(name);
    if (column == nullptr) {
      return Status::NotFound(context + ": no column '" + name +
                              "' in the file (columns: " + ColumnNames(layout) + ")");
    }
    const size_t index = static_cast<size_t>(column - layout.columns.data());
    if (std::find(selected.begin(), selected.end(), index) != selected.end()) {
      return Status::InvalidArgument(context + ": column '" + name + "' selected twice");
    }
    selected.push_back(index);
  }
  std::vector<int> leaves;
  for (size_t index : selected) {
    const ParquetColumn& column = layout.columns[index];
    if (column.kind == ParquetColumnKind::kUnsupported) {
      return Status::UnsupportedFormat(
          context + ": column '" + column.name + "' is " + column.arrow_type +
          ", which is not read (readable: binary, string, integers up to int64, bool, "
          "float, double, struct<bytes: binary, path: string>, and lists of these)");
    }
    const auto& column_leaves = layout.footer->leaves[index];
    leaves.insert(leaves.end(), column_leaves.begin(), column_leaves.end());
  }
  std::sort(leaves.begin(), leaves.end());

  // The memory check, before anything is read: the footer's sizes of what will be decoded.
  const parquet::FileMetaData& metadata = *layout.footer->metadata;
  const std::unique_ptr<parquet::RowGroupMetaData> group_metadata = metadata.RowGroup(row_group);
  int64_t uncompressed = 0;
  for (int leaf : leaves)
    uncompressed += group_metadata->ColumnChunk(leaf)->total_uncompressed_size();
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
    for (size_t index : selected) {
      data.columns.push_back(
          {layout.columns[index].name, layout.columns[index].kind, layout.columns[index].list, {}});
    }
    return data;
  }

  // Declared first so that it outlives every Arrow object allocated from it.
  CappedPool pool(cap);
  std::shared_ptr<arrow::Table> table;
  {
    auto file = std::make_shared<RowGroupFile>(layout.file_size, group.offset, bytes);
    parquet::ReaderProperties properties(&pool);
    properties.set_page_checksum_verification(true);  // when the writer wrote CRCs
    parquet::ArrowReaderProperties arrow_properties;
    // The engine owns the threads, and the bytes are in memory already.
    arrow_properties.set_use_threads(false);
    arrow_properties.set_pre_buffer(false);
    std::unique_ptr<parquet::ParquetFileReader> parquet_reader =
        parquet::ParquetFileReader::Open(file, properties, layout.footer->metadata);
    arrow::Result<std::unique_ptr<parquet::arrow::FileReader>> reader =
        parquet::arrow::FileReader::Make(&pool, std::move(parquet_reader), arrow_properties);
    if (!reader.ok()) return FromArrow(reader.status(), context);
    arrow::Result<std::shared_ptr<arrow::Table>> read = (*reader)->ReadRowGroup(row_group, leaves);
    if (!read.ok()) {
      if (pool.refused()) {
        return Status::ResourceExhausted(context + ": decoding needs more than " +
                                         std::to_string(pool.cap()) + " bytes (max_decode_bytes; " +
                                         std::to_string(uncompressed) +
                                         " bytes uncompressed in the footer)");
      }
      return FromArrow(read.status(), context);
    }
    table = std::move(read).ValueOrDie();
  }
  if (table->num_rows() != group.rows) {
    return Status::CorruptData(context + ": decoded " + std::to_string(table->num_rows()) +
                               " rows, the footer says " + std::to_string(group.rows));
  }

  for (size_t index : selected) {
    const ParquetColumn& column = layout.columns[index];
    ParquetColumnValues& values = data.columns.emplace_back();
    values.name = column.name;
    values.kind = column.kind;
    values.list = column.list;
    const std::shared_ptr<arrow::ChunkedArray> chunks = table->GetColumnByName(column.name);
    if (chunks == nullptr) {
      return Status::Internal(context + ": Arrow returned no column '" + column.name + "'");
    }
    values.values.reserve(static_cast<size_t>(group.rows));
    for (const std::shared_ptr<arrow::Array>& chunk : chunks->chunks()) {
      const Status status =
          column.list ? AppendListChunk(column.kind, *chunk, values.values, data.decoded_bytes)
                      : AppendChunk(column.kind, *chunk, values.values, data.decoded_bytes);
      if (!status.ok()) return status.WithContext(context + ", column '" + column.name + "'");
    }
    if (static_cast<int64_t>(values.values.size()) != group.rows) {
      return Status::CorruptData(context + ", column '" + column.name +
                                 "': " + std::to_string(values.values.size()) + " values for " +
                                 std::to_string(group.rows) + " rows");
    }
    data.decoded_bytes += static_cast<int64_t>(values.values.size() * sizeof(ParquetValue));
  }
  data.peak_decode_bytes = pool.max_memory();
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
  Result<ParquetLayout> layout = Guarded<ParquetLayout>(
      "Parquet footer", [&] { return ParseFooter(file_size, end - needed, footer_len); });
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
  return Guarded<ParquetRowGroupData>(RowGroupContext(row_group), [&] {
    return Decode(layout, row_group, bytes, columns, options);
  });
}

}  // namespace headrace
