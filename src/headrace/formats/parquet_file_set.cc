#include "headrace/formats/parquet_file_set.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>

#include "headrace/core/strings.h"
#include "headrace/formats/arrow_bridge.h"
#include "headrace/formats/manifest.h"
#include "headrace/formats/shard_set.h"

namespace headrace {
namespace {

// Reads in flight at once while loading: an object store's connections, not a million.
constexpr size_t kLoadWindow = 64;

std::vector<Result<Buffer>> ReadAll(size_t n,
                                    const std::function<void(size_t, ReadCallback)>& start) {
  return ReadConcurrently(n, kLoadWindow, start);
}

bool IsMedia(FieldKind kind) { return IsMediaKind(kind); }

std::string ColumnList(const ParquetLayout& layout) {
  std::string out;
  for (const ParquetColumn& c : layout.columns) {
    if (!out.empty()) out += ", ";
    const std::string kind(ParquetColumnKindName(c.kind));
    out += c.name + " (" + (c.list ? "list<" + kind + ">" : kind) + ")";
  }
  return out.empty() ? "none" : out;
}

std::string_view KindName(FieldKind kind) {
  switch (kind) {
    case FieldKind::kImage: return "image";
    case FieldKind::kVideo: return "video";
    case FieldKind::kAudio: return "audio";
    case FieldKind::kPointCloud: return "pointcloud";
    case FieldKind::kBytes: return "bytes";
    case FieldKind::kText: return "text";
    case FieldKind::kConversation: return "conversation";
    case FieldKind::kInt: return "int";
    case FieldKind::kFloat: return "float";
    case FieldKind::kString: return "string";
  }
  return "?";
}

// Whether a field of `kind` can be fed by a column (or a list column's items) of `column`.
bool Accepts(FieldKind kind, ParquetColumnKind column) {
  using C = ParquetColumnKind;
  if (IsMedia(kind)) return column == C::kBytes || column == C::kBytesWithPath || column == C::kString;
  switch (kind) {
    case FieldKind::kConversation:
    case FieldKind::kText:
    case FieldKind::kString: return column == C::kString;
    case FieldKind::kInt: return column == C::kInt64 || column == C::kBool;
    case FieldKind::kFloat: return column == C::kDouble || column == C::kInt64 || column == C::kBool;
    default: return false;
  }
}

// A media field fed by a string column reads the media at the path the cell names.
bool IsPathColumn(FieldKind kind, ParquetColumnKind column) {
  return IsMedia(kind) && column == ParquetColumnKind::kString;
}

const ParquetColumn* FirstOf(const ParquetLayout& layout, std::initializer_list<const char*> names,
                             bool (*accept)(ParquetColumnKind)) {
  for (const char* name : names) {
    const ParquetColumn* c = layout.FindColumn(name);
    if (c != nullptr && !c->list && accept(c->kind)) return c;
  }
  return nullptr;
}

std::string FileMessage(const std::string& uri) { return QuoteForMessage(uri); }

// The cell of a list column as its items: none for a null list. kBadRecord over
// max_items, kMissingField for a required field with no items.
Result<std::span<const ParquetValue>> ListItems(const ParquetFieldColumn& col,
                                                const ParquetValue& cell) {
  std::span<const ParquetValue> items;
  if (const auto* list = std::get_if<ParquetList>(&cell)) items = list->items;
  if (items.size() > static_cast<size_t>(col.max_items)) {
    return Status::BadRecord("column '" + col.column + "' has " + std::to_string(items.size()) +
                             " items, more than its max_items " + std::to_string(col.max_items));
  }
  if (items.empty() && col.required) {
    const bool null = std::holds_alternative<std::monostate>(cell);
    return Status::MissingField("column '" + col.column + "' " +
                                (null ? "is null" : "is an empty list"));
  }
  return items;
}

// "column 'views'", or "column 'views' item 2" for an item of a list.
std::string CellName(const ParquetFieldColumn& col, int item) {
  std::string name = "column '" + col.column + "'";
  if (item >= 0) name += " item " + std::to_string(item);
  return name;
}

// A path cell (or a path list's cell) of a media field as the record's MediaRefs,
// resolved against `root`.
Status AppendPathCell(const ParquetFieldColumn& col, const ParquetValue& cell,
                      const std::string& root, bool allow_absolute, SampleRecord& record) {
  const auto append = [&](const ParquetValue& value, int item) -> Status {
    const auto* path = std::get_if<std::string>(&value);
    if (path == nullptr) return Status::MissingField(CellName(col, item) + " is null");
    Result<std::string> resolved = ResolveMediaPath(root, *path, allow_absolute);
    if (!resolved.ok()) return resolved.status().WithContext(CellName(col, item));
    record.media.push_back(MediaRef{col.field, *std::move(resolved)});
    return Status::Ok();
  };
  if (!col.list) {
    if (std::holds_alternative<std::monostate>(cell)) {
      return col.required ? Status::MissingField(CellName(col, -1) + " is null") : Status::Ok();
    }
    return append(cell, -1);
  }
  HR_ASSIGN_OR_RETURN(std::span<const ParquetValue> items, ListItems(col, cell));
  for (size_t i = 0; i < items.size(); ++i) {
    HR_RETURN_IF_ERROR(append(items[i], static_cast<int>(i)));
  }
  return Status::Ok();
}

// One media cell (or list item) as bytes: a path-only struct<bytes, path> cell is
// kMissingField, naming the path.
Result<Buffer> MediaBytes(const ParquetFieldColumn& col, const ParquetValue& cell, int item) {
  if (const auto* bytes = std::get_if<Buffer>(&cell)) return *bytes;
  if (const auto* media = std::get_if<ParquetMedia>(&cell)) {
    if (media->bytes) return *media->bytes;
    return Status::MissingField(CellName(col, item) + " has no bytes" +
                                (media->path ? " (only a path, " + QuoteForMessage(*media->path) +
                                                   ", which is not read: store the bytes)"
                                             : std::string()));
  }
  return Status::MissingField(CellName(col, item) + " is null");
}

// One text or scalar cell (or list item) of `col` as the sample's Attribute.
Status AppendAttribute(const ParquetFieldColumn& col, const ParquetValue& cell, int item,
                       Sample& sample) {
  switch (col.kind) {
    case FieldKind::kText:
    case FieldKind::kString:
      if (const auto* text = std::get_if<std::string>(&cell)) {
        sample.parsed.attributes.push_back(Attribute{col.field, *text});
        return Status::Ok();
      }
      break;
    case FieldKind::kInt:
      if (const auto* i = std::get_if<int64_t>(&cell)) {
        sample.parsed.attributes.push_back(Attribute{col.field, *i});
        return Status::Ok();
      }
      break;
    case FieldKind::kFloat:
      if (const auto* d = std::get_if<double>(&cell)) {
        sample.parsed.attributes.push_back(Attribute{col.field, *d});
        return Status::Ok();
      }
      if (const auto* i = std::get_if<int64_t>(&cell)) {
        sample.parsed.attributes.push_back(Attribute{col.field, static_cast<double>(*i)});
        return Status::Ok();
      }
      break;
    default:
      return Status::Ok();
  }
  return Status::MissingField(CellName(col, item) + " is null");
}

}  // namespace

void MakeParquetRecord(const ParquetFileSet& source, int64_t index, SampleRecord& record,
                       bool with_paths) {
  const ParquetFileSet::Group& group = source.groups[source.GroupOf(index)];
  const auto file = static_cast<size_t>(group.file);
  const std::string& uri = source.files[file];
  const ParquetRowGroup& rg =
      source.layouts[file].row_groups[static_cast<size_t>(group.row_group)];
  const int64_t row = rg.first_row + (index - group.first_record);
  record.location = uri + "#row " + std::to_string(row);
  record.id = record.location;
  record.line = row + 1;
  if (!source.columns.empty()) {
    record.media.push_back(MediaRef{kRowGroupField, uri, rg.offset, rg.length});
  }
  if (!with_paths || source.path_item_end.empty()) return;
  const auto row_index = static_cast<size_t>(index);
  const uint64_t first = row_index == 0 ? 0 : source.path_item_end[row_index - 1];
  for (uint64_t k = first; k < source.path_item_end[row_index]; ++k) {
    const ParquetFileSet::PathItem& item = source.path_items[k];
    const uint64_t begin = k == 0 ? 0 : source.path_items[k - 1].uri_end;
    record.media.push_back(
        MediaRef{item.field, source.path_uris.substr(begin, item.uri_end - begin)});
  }
}

size_t ParquetFileSet::GroupOf(int64_t index) const {
  const auto it = std::upper_bound(groups.begin(), groups.end(), index,
                                   [](int64_t i, const Group& g) { return i < g.first_record; });
  return static_cast<size_t>(it - groups.begin()) - 1;
}

int64_t ParquetFileSet::LargestRowGroupBytes() const {
  int64_t largest = 0;
  for (const Group& g : groups) {
    largest = std::max(largest, layouts[g.file].row_groups[g.row_group].length);
  }
  return largest;
}

int64_t ParquetFileSet::LargestRowGroupUncompressedBytes() const {
  int64_t largest = 0;
  for (const Group& g : groups) {
    largest = std::max(largest, layouts[g.file].row_groups[g.row_group].uncompressed_bytes);
  }
  return largest;
}

Result<std::vector<SourceFieldSpec>> ResolveParquetFields(const SourceSpec& spec,
                                                          const ParquetLayout& layout) {
  if (!spec.fields.empty()) {
    std::vector<SourceFieldSpec> fields = ResolvedFields(spec);
    for (size_t i = 0; i < fields.size(); ++i) {
      const SourceFieldSpec& f = fields[i];
      const std::string where = "source.fields[" + std::to_string(i) + "] (" + f.name + ")";
      const ParquetColumn* c = layout.FindColumn(f.key);
      if (c == nullptr) {
        return Status::NotFound(where + ": no column '" + f.key + "' in the Parquet files; the "
                                "first file's columns: " + ColumnList(layout));
      }
      if (!Accepts(f.kind, c->kind)) {
        return Status::InvalidArgument(where + ": column '" + c->name + "' holds " +
                                       c->arrow_type + ", which a field of kind " +
                                       std::string(KindName(f.kind)) + " cannot take");
      }
      if (c->list != (f.max_items > 0)) {
        return Status::InvalidArgument(
            where + ": column '" + c->name + "' holds " + c->arrow_type +
            (c->list ? ", a list: declare the field a list (max_items: the most items a row has)"
                     : ", not a list, which a list field (max_items " +
                           std::to_string(f.max_items) + ") needs"));
      }
    }
    return fields;
  }
  // The defaults: image and conversation first, at the positions the ops expect.
  std::vector<SourceFieldSpec> fields = {
      SourceFieldSpec{"image", FieldKind::kImage, "", 0, false},
      SourceFieldSpec{"conversation", FieldKind::kConversation, "", 0, false}};
  const auto media_column = [](ParquetColumnKind k) {
    return k == ParquetColumnKind::kBytes || k == ParquetColumnKind::kBytesWithPath ||
           k == ParquetColumnKind::kString;
  };
  const auto string_column = [](ParquetColumnKind k) { return k == ParquetColumnKind::kString; };
  if (const ParquetColumn* c =
          FirstOf(layout, {"image", "jpg", "jpeg", "png", "webp", "img"}, media_column)) {
    fields[0].key = c->name;
  }
  if (const ParquetColumn* c =
          FirstOf(layout, {"conversations", "conversation", "messages"}, string_column)) {
    fields[1].key = c->name;
    fields[1].required = true;  // as a manifest's conversations
  }
  for (const ParquetColumn& c : layout.columns) {
    if (c.list) continue;  // list columns are read only when source.fields declares them
    if (c.name == fields[0].key || c.name == fields[1].key) continue;
    if (c.name == "id" || c.name == "index" || c.name == "image" || c.name == "conversation") {
      continue;  // the engine's own batch fields, and names taken above
    }
    const bool text = c.name == "text" || c.name == "caption" || c.name == "txt";
    switch (c.kind) {
      case ParquetColumnKind::kString:
        fields.push_back(
            SourceFieldSpec{c.name, text ? FieldKind::kText : FieldKind::kString, c.name, 0, false});
        break;
      case ParquetColumnKind::kInt64:
      case ParquetColumnKind::kBool:
        fields.push_back(SourceFieldSpec{c.name, FieldKind::kInt, c.name, 0, false});
        break;
      case ParquetColumnKind::kDouble:
        fields.push_back(SourceFieldSpec{c.name, FieldKind::kFloat, c.name, 0, false});
        break;
      default:
        break;  // other bytes columns and unsupported kinds are not read
    }
  }
  return fields;
}

Result<ParquetLayout> ReadParquetFooter(Storage& storage, const std::string& uri, int64_t* reads) {
  std::vector<std::string> one = {uri};
  int64_t size = -1;
  std::vector<Result<Buffer>> probe = ReadAll(1, [&](size_t, ReadCallback done) {
    storage.ReadAsyncGated(uri, std::move(done), [&size](int64_t bytes) {
      if (bytes == kReadStillWanted) return true;  // asked while it waits: yes
      size = bytes;
      return false;  // the size is all this read is for
    });
  });
  if (reads != nullptr) ++*reads;
  if (probe[0].ok()) return ReadParquetLayout(*probe[0]);  // a storage that ignores gates
  if (size < 0) return probe[0].status();
  int64_t tail_bytes = std::min(size, kParquetDefaultTailBytes);
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<Result<Buffer>> tail = ReadAll(1, [&](size_t, ReadCallback done) {
      storage.ReadRangeAsyncGated(uri, size - tail_bytes, tail_bytes, std::move(done),
                                  [](int64_t) { return true; });
    });
    if (reads != nullptr) ++*reads;
    if (!tail[0].ok()) return tail[0].status();
    if (static_cast<int64_t>(tail[0]->size()) != tail_bytes) {
      return Status::CorruptData("the file shrank while it was read (" +
                                 std::to_string(tail[0]->size()) + " tail bytes of " +
                                 std::to_string(tail_bytes) + ")");
    }
    HR_ASSIGN_OR_RETURN(ParquetTailProbe got, ReadParquetTail(size, *tail[0]));
    if (got.layout) return *std::move(got.layout);
    tail_bytes = got.tail_bytes_needed;
  }
  return Status::CorruptData("the footer needed more tail bytes twice");
}

Result<ParquetFileSet> LoadParquetFileSet(Storage& storage, const SourceSpec& spec,
                                        bool compact, int64_t max_group_bytes) {
  // Without a pyarrow whose Arrow has a bridge no footer can be read: said once, here,
  // rather than as every file's failure.
  if (Result<const HrArrowBridge*> bridge = LoadArrowBridge(); !bridge.ok()) {
    return bridge.status().WithContext("source.parquet");
  }
  ParquetFileSet out;
  {
    Result<std::vector<std::string>> files = ExpandShardPattern(spec.parquet);
    if (!files.ok()) {
      // The pattern rules are the shard source's; the key is ours.
      std::string message = files.status().message();
      if (message.rfind("source.shards", 0) == 0) message.replace(0, 13, "source.parquet");
      return Status(files.status().code(), std::move(message));
    }
    out.files = *std::move(files);
  }
  // Footers, concurrently: one thread per file would be a lot; the reads are what wait.
  const size_t n = out.files.size();
  std::vector<Result<ParquetLayout>> layouts(n, Status::Internal("not read"));
  {
    std::mutex mu;
    std::vector<std::thread> threads;
    size_t next = 0;
    int64_t reads = 0;
    const size_t workers = std::min<size_t>(n, 16);
    for (size_t w = 0; w < workers; ++w) {
      threads.emplace_back([&] {
        while (true) {
          size_t i;
          {
            std::lock_guard lock(mu);
            if (next == n) return;
            i = next++;
          }
          int64_t r = 0;
          Result<ParquetLayout> layout = ReadParquetFooter(storage, out.files[i], &r);
          std::lock_guard lock(mu);
          layouts[i] = std::move(layout);
          reads += r;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    out.load_reads += reads;
  }
  // A file whose footer cannot be read, or does not fit the file, is skipped whole: an
  // empty layout, no rows (bad[i] says why).
  std::vector<Status> bad(n);
  for (size_t i = 0; i < n; ++i) {
    if (layouts[i].ok()) {
      out.layouts.push_back(*std::move(layouts[i]));
      continue;
    }
    const Status& st = layouts[i].status();
    if (st.code() == StatusCode::kNotFound) {
      return Status::NotFound("source.parquet: " + FileMessage(out.files[i]) + " does not exist");
    }
    bad[i] = st;
    out.layouts.emplace_back();
  }
  const auto first_good = std::find_if(bad.begin(), bad.end(), [](const Status& b) { return b.ok(); });
  if (first_good == bad.end()) {
    return Status(bad[0].code(), "source.parquet: none of the " + std::to_string(n) +
                                     " files of " + QuoteForMessage(spec.parquet) +
                                     " can be read; the first: " + FileMessage(out.files[0]) +
                                     ": " + bad[0].ToString());
  }
  const size_t first = static_cast<size_t>(first_good - bad.begin());
  HR_ASSIGN_OR_RETURN(out.fields, ResolveParquetFields(spec, out.layouts[first]));

  // Which columns each row group gives at run time, and which are paths read now.
  std::vector<ParquetFieldColumn> paths;
  for (size_t f = 0; f < out.fields.size(); ++f) {
    const SourceFieldSpec& field = out.fields[f];
    if (field.key.empty()) continue;  // a default field without a column
    const ParquetColumn* c = out.layouts[first].FindColumn(field.key);
    ParquetFieldColumn column{c->name,   static_cast<int>(f), field.kind,   c->kind,
                              c->list,   field.max_items,     field.required};
    (IsPathColumn(field.kind, c->kind) ? paths : out.columns).push_back(std::move(column));
  }
  // Every file must hold the same columns, of the same kinds.
  for (size_t i = first + 1; i < n; ++i) {
    if (!bad[i].ok()) continue;
    for (const auto* list : {&out.columns, &paths}) {
      for (const ParquetFieldColumn& col : *list) {
        const ParquetColumn* c = out.layouts[i].FindColumn(col.column);
        if (c == nullptr) {
          return Status::NotFound("source.parquet: " + FileMessage(out.files[i]) +
                                  " has no column '" + col.column + "' (field '" +
                                  out.fields[col.field].name + "'); its columns: " +
                                  ColumnList(out.layouts[i]));
        }
        if (c->kind != col.column_kind || c->list != col.list) {
          return Status::InvalidArgument(
              "source.parquet: column '" + col.column + "' is " + c->arrow_type + " in " +
              FileMessage(out.files[i]) + " but " +
              out.layouts[first].FindColumn(col.column)->arrow_type + " in " +
              FileMessage(out.files[first]));
        }
      }
    }
  }

  // A row group whose declared rows could never be decoded within the row-group cache
  // (their cells alone, before any byte of theirs) lies about its rows, or is useless:
  // its file is skipped before anything is sized by those rows (the epoch order holds
  // a slot per record, a decode one per row and column).
  const int64_t columns_per_row = std::max<int64_t>(
      1, static_cast<int64_t>(out.columns.size() + paths.size()));
  for (size_t i = 0; i < n && max_group_bytes > 0; ++i) {
    if (!bad[i].ok()) continue;
    const auto& groups = out.layouts[i].row_groups;
    for (size_t g = 0; g < groups.size(); ++g) {
      const int64_t per_row = columns_per_row * static_cast<int64_t>(sizeof(ParquetValue));
      if (groups[g].rows > max_group_bytes / per_row) {
        bad[i] = Status::CorruptData(
            "row group " + std::to_string(g) + " declares " + std::to_string(groups[g].rows) +
            " rows in a file of " + std::to_string(out.layouts[i].file_size) +
            " bytes: their cells alone would need more than the " +
            std::to_string(max_group_bytes) +
            " bytes the row-group cache may hold (source.cache_bytes, or half of "
            "memory.budget_bytes)");
        break;
      }
    }
  }

  std::vector<std::string> path_names;
  for (const ParquetFieldColumn& p : paths) path_names.push_back(p.column);
  for (size_t i = 0; i < n; ++i) {
    const std::string& uri = out.files[i];
    const ParquetLayout& layout = out.layouts[i];
    if (!bad[i].ok()) {
      out.bad_files.push_back(BadShard{
          static_cast<int64_t>(i), uri,
          Status::ShardError("file " + std::to_string(i) + " " + FileMessage(uri) +
                             " skipped: " + bad[i].ToString())});
      continue;
    }
    // Path columns: one ranged read per row group, that column decoded, now.
    std::vector<ParquetRowGroupData> path_data;
    std::string root;
    if (!paths.empty()) {
      SourceSpec for_root = spec;
      for_root.manifest = uri;
      HR_ASSIGN_OR_RETURN(root, ManifestRoot(for_root));
      std::vector<Result<Buffer>> groups =
          ReadAll(layout.row_groups.size(), [&](size_t g, ReadCallback done) {
            const ParquetRowGroup& rg = layout.row_groups[g];
            storage.ReadRangeAsyncGated(uri, rg.offset, rg.length, std::move(done),
                                        [](int64_t) { return true; });
          });
      out.load_reads += static_cast<int64_t>(groups.size());
      Status unreadable;
      for (size_t g = 0; g < groups.size() && unreadable.ok(); ++g) {
        if (!groups[g].ok()) {
          unreadable = groups[g].status();
          break;
        }
        Result<ParquetRowGroupData> data =
            DecodeParquetRowGroup(layout, static_cast<int>(g), *groups[g], path_names);
        if (!data.ok()) {
          unreadable = data.status();
          break;
        }
        path_data.push_back(*std::move(data));
      }
      if (!unreadable.ok()) {  // the paths are its records' media: the file is unreadable
        out.bad_files.push_back(BadShard{
            static_cast<int64_t>(i), uri,
            Status::ShardError("file " + std::to_string(i) + " " + FileMessage(uri) +
                               " skipped: its path column: " + unreadable.ToString())});
        continue;
      }
    }
    for (size_t g = 0; g < layout.row_groups.size(); ++g) {
      const ParquetRowGroup& rg = layout.row_groups[g];
      out.groups.push_back(
          ParquetFileSet::Group{static_cast<int>(i), static_cast<int>(g), out.num_rows});
      out.group_rows.push_back(rg.rows);
      if (compact && paths.empty()) {  // every row regular: made when needed
        out.num_rows += rg.rows;
        continue;
      }
      for (int64_t r = 0; r < rg.rows; ++r) {
        SampleRecord& record = out.records.emplace_back();
        MakeParquetRecord(out, out.num_rows++, record);
        for (size_t p = 0; p < paths.size() && record.status.ok(); ++p) {
          record.status = AppendPathCell(paths[p], path_data[g].columns[p].values[r], root,
                                         spec.allow_absolute_paths, record);
        }
        if (!record.status.ok()) {
          record.status = record.status.WithContext(record.location);
          record.media.clear();
          ++out.bad_records;
        }
        if (compact) {  // the path media compact; a bad row kept as it is
          if (record.status.ok()) {
            for (size_t m = out.columns.empty() ? 0 : 1; m < record.media.size(); ++m) {
              out.path_uris += record.media[m].uri;
              out.path_items.push_back(
                  ParquetFileSet::PathItem{record.media[m].field, out.path_uris.size()});
            }
          } else {
            out.irregular.emplace_back(out.num_rows - 1, std::move(record));
          }
          out.path_item_end.push_back(out.path_items.size());
          out.records.pop_back();
        }
      }
    }
  }
  if (compact) {
    out.path_uris.shrink_to_fit();
    out.path_items.shrink_to_fit();
    out.path_item_end.shrink_to_fit();
    out.irregular.shrink_to_fit();
  }
  if (out.num_rows == 0) {
    std::string why;
    if (!out.bad_files.empty()) {
      why = " (" + std::to_string(out.bad_files.size()) +
            " unreadable; the first: " + out.bad_files.front().status.message() + ")";
    }
    return Status::InvalidArgument("source.parquet: the " + std::to_string(n) + " files of " +
                                   QuoteForMessage(spec.parquet) + " hold no rows" + why);
  }
  return out;
}

Result<std::vector<Turn>> ParseConversationCell(std::string_view json, const SourceSpec& spec) {
  size_t start = json.find_first_not_of(" \t\r\n");
  if (start != std::string_view::npos && json[start] == '[') {
    // An array of turns: the shard parser reads an object, so wrap it in one.
    SourceSpec wrapped = spec;
    wrapped.conversations_field = "c";
    const std::string object = "{\"c\":" + std::string(json) + "}";
    return ParseConversationJson(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(object.data()), object.size()),
        wrapped);
  }
  return ParseConversationJson(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size()), spec);
}

Status FillSampleFromRowGroup(const ParquetFileSet& source, const SourceSpec& spec,
                              const ParquetRowGroupData& data, int64_t row, Sample& sample) {
  if (row < 0 || row >= data.rows || data.columns.size() != source.columns.size()) {
    return Status::Internal("row " + std::to_string(row) + " is not in row group " +
                            std::to_string(data.row_group));
  }
  sample.parsed.attributes.clear();
  sample.parsed.turns.clear();
  const std::string_view uri = sample.record != nullptr ? std::string_view(sample.record->uri())
                                                        : std::string_view();
  for (size_t c = 0; c < source.columns.size(); ++c) {
    const ParquetFieldColumn& col = source.columns[c];
    const ParquetValue& cell = data.columns[c].values[static_cast<size_t>(row)];
    if (col.list) {
      // Items in list order; a null list is an empty one.
      HR_ASSIGN_OR_RETURN(std::span<const ParquetValue> items, ListItems(col, cell));
      for (size_t i = 0; i < items.size(); ++i) {
        if (IsMedia(col.kind)) {
          HR_ASSIGN_OR_RETURN(Buffer bytes, MediaBytes(col, items[i], static_cast<int>(i)));
          sample.media.push_back(Sample::Item{col.field, std::move(bytes), uri});
        } else {
          HR_RETURN_IF_ERROR(AppendAttribute(col, items[i], static_cast<int>(i), sample));
        }
      }
      continue;
    }
    if (std::holds_alternative<std::monostate>(cell)) {
      // Not required: as an absent manifest key (an op that needs the field says so).
      if (col.required) return Status::MissingField("column '" + col.column + "' is null");
      continue;
    }
    if (IsMedia(col.kind)) {
      HR_ASSIGN_OR_RETURN(Buffer bytes, MediaBytes(col, cell, -1));
      sample.media.push_back(Sample::Item{col.field, std::move(bytes), uri});
      continue;
    }
    if (col.kind == FieldKind::kConversation) {
      Result<std::vector<Turn>> turns = ParseConversationCell(std::get<std::string>(cell), spec);
      if (!turns.ok()) return turns.status().WithContext("column '" + col.column + "'");
      sample.parsed.turns = *std::move(turns);
      continue;
    }
    HR_RETURN_IF_ERROR(AppendAttribute(col, cell, -1, sample));
  }
  // A record without a conversation column has an empty conversation.
  sample.turns = sample.parsed.turns;
  sample.attributes = sample.parsed.attributes;
  return Status::Ok();
}

size_t ParquetFileSetMemoryBytes(const ParquetFileSet& source) {
  size_t bytes = sizeof(ParquetFileSet) + source.records.capacity() * sizeof(SampleRecord) +
                 source.groups.capacity() * (sizeof(ParquetFileSet::Group) + sizeof(int64_t));
  for (const std::string& s : source.files) bytes += s.capacity() + 1;
  bytes += source.irregular.capacity() * sizeof(source.irregular[0]) +
           source.path_uris.capacity() +
           source.path_items.capacity() * sizeof(ParquetFileSet::PathItem) +
           source.path_item_end.capacity() * sizeof(uint64_t);
  for (const auto& [_, record] : source.irregular) bytes += RecordHeapBytes(record);
  return bytes + RecordsHeapBytes(source.records);
}

}  // namespace headrace
