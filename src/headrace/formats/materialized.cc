#include "headrace/formats/materialized.h"

#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "headrace/core/json_writer.h"
#include "headrace/core/strings.h"
#include "headrace/formats/tar_shard.h"

namespace headrace {
namespace {

std::string_view NpyDescr(DType dtype) {
  switch (dtype) {
    case DType::kU8: return "|u1";
    case DType::kI32: return "<i4";
    case DType::kI64: return "<i8";
    case DType::kF16: return "<f2";
    case DType::kBF16: return "<u2";  // NumPy has no bfloat16: the same 16 bits
    case DType::kF32: return "<f4";
  }
  return "|u1";
}

Result<std::vector<int64_t>> IntArray(simdjson::dom::element element) {
  simdjson::dom::array array;
  if (element.get(array) != simdjson::SUCCESS) return Status::BadRecord("not an array");
  std::vector<int64_t> out;
  for (simdjson::dom::element e : array) {
    int64_t v = 0;
    if (e.get(v) != simdjson::SUCCESS || v < 0) {
      return Status::BadRecord("not an array of non-negative integers");
    }
    out.push_back(v);
  }
  return out;
}

Result<MaterializedInfo::Set> ParseSet(simdjson::dom::object set) {
  MaterializedInfo::Set out;
  std::string_view dir;
  if (set["dir"].get(dir) != simdjson::SUCCESS) return Status::BadRecord("no string 'dir'");
  out.dir = dir;
  int64_t epoch = 0;
  if (set["epoch"].get(epoch) == simdjson::SUCCESS) {
    out.epoch = epoch;
  } else if (!set["epoch"].is_null()) {
    return Status::BadRecord("'epoch' is neither an integer nor null");
  }
  if (set["samples"].get(out.samples) != simdjson::SUCCESS) {
    return Status::BadRecord("no integer 'samples'");
  }
  simdjson::dom::array shards;
  if (set["shards"].get(shards) != simdjson::SUCCESS) return Status::BadRecord("no array 'shards'");
  for (simdjson::dom::element e : shards) {
    MaterializedInfo::Shard& shard = out.shards.emplace_back();
    std::string_view name;
    if (e["shard"].get(name) != simdjson::SUCCESS ||
        e["bytes"].get(shard.bytes) != simdjson::SUCCESS ||
        e["samples"].get(shard.samples) != simdjson::SUCCESS || name.empty() ||
        name.find('/') != std::string_view::npos) {
      return Status::BadRecord("a shard wants {\"shard\": name, \"bytes\": int, \"samples\": int}");
    }
    shard.name = name;
  }
  simdjson::dom::array skipped;
  if (set["skipped"].get(skipped) != simdjson::SUCCESS) {
    return Status::BadRecord("no array 'skipped'");
  }
  for (simdjson::dom::element e : skipped) {
    MaterializedInfo::Skipped& s = out.skipped.emplace_back();
    std::string_view code, message;
    if (e["index"].get(s.index) != simdjson::SUCCESS || e["code"].get(code) != simdjson::SUCCESS ||
        e["message"].get(message) != simdjson::SUCCESS || !StatusCodeNamed(code)) {
      return Status::BadRecord(
          "a skipped sample wants {\"index\": int, \"code\": a status code, \"message\": string}");
    }
    s.status = Status(*StatusCodeNamed(code), std::string(message));
  }
  return out;
}

Result<MaterializedInfo> ParseInfo(std::string_view json) {
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(json);
  simdjson::dom::object root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) {
    return Status::BadRecord("not a JSON object");
  }
  std::string_view format;
  if (root["format"].get(format) != simdjson::SUCCESS || format != "headrace.materialized") {
    return Status::BadRecord("format is not \"headrace.materialized\"");
  }
  MaterializedInfo info;
  std::string_view text;
  if (root["headrace_version"].get(text) == simdjson::SUCCESS) info.headrace_version = text;
  if (root["version"].get(info.version) != simdjson::SUCCESS) {
    return Status::BadRecord("no integer 'version'");
  }
  if (info.version != kMaterializedFormatVersion) {
    return Status::InvalidArgument(
        "written as format version " + std::to_string(info.version) + " by headrace " +
        info.headrace_version + "; this headrace (" + std::string(kHeadraceVersion) +
        ") reads version " + std::to_string(kMaterializedFormatVersion) +
        ": materialize it again with this version");
  }
  if (root["config"].get(text) == simdjson::SUCCESS) info.config = text;
  if (root["seed"].get(info.seed) != simdjson::SUCCESS) {
    return Status::BadRecord("no non-negative integer 'seed'");
  }
  if (root["dataset_samples"].get(info.dataset_samples) != simdjson::SUCCESS ||
      info.dataset_samples < 1) {
    return Status::BadRecord("no positive integer 'dataset_samples'");
  }
  simdjson::dom::array array;
  if (root["random_ops"].get(array) != simdjson::SUCCESS) {
    return Status::BadRecord("no array 'random_ops'");
  }
  for (simdjson::dom::element e : array) {
    if (e.get(text) != simdjson::SUCCESS) {
      return Status::BadRecord("'random_ops' holds a non-string");
    }
    info.random_ops.emplace_back(text);
  }
  if (root["fields"].get(array) != simdjson::SUCCESS) return Status::BadRecord("no array 'fields'");
  for (simdjson::dom::element e : array) {
    FieldSpec& f = info.fields.emplace_back();
    std::string_view name, dtype;
    if (e["name"].get(name) != simdjson::SUCCESS || e["dtype"].get(dtype) != simdjson::SUCCESS) {
      return Status::BadRecord("a field wants {\"name\", \"dtype\", \"shape\"}");
    }
    f.name = name;
    auto parsed = ParseDType(dtype);
    if (!parsed.ok()) return Status::BadRecord("field '" + f.name + "': unknown dtype");
    f.dtype = *parsed;
    auto shape = IntArray(e["shape"]);
    if (!shape.ok()) {
      return Status::BadRecord("field '" + f.name + "': shape is " + shape.status().message());
    }
    f.sample_shape = *std::move(shape);
    std::string_view layout;
    if (e["layout"].get(layout) == simdjson::SUCCESS) {  // absent: fixed (as format 1 wrote)
      auto parsed_layout = ParseFieldLayout(layout);
      if (!parsed_layout.ok()) {
        return Status::BadRecord("field '" + f.name + "': " + parsed_layout.status().message());
      }
      f.layout = *parsed_layout;
    }
    std::string_view count;
    if (e["count_field"].get(count) == simdjson::SUCCESS) f.count_field = count;
    std::string_view tokens_of;
    if (e["tokens_of"].get(tokens_of) == simdjson::SUCCESS) f.tokens_of = tokens_of;
  }
  // A ragged field's lengths follow it, as the planner lays them out.
  for (size_t i = 0; i < info.fields.size(); ++i) {
    const bool ragged = info.fields[i].layout == FieldLayout::kRagged;
    const bool lengths_next = i + 1 < info.fields.size() &&
                              info.fields[i + 1].layout == FieldLayout::kLengths &&
                              info.fields[i + 1].name == LengthsName(info.fields[i].name);
    const bool orphan = info.fields[i].layout == FieldLayout::kLengths &&
                        (i == 0 || info.fields[i - 1].layout != FieldLayout::kRagged);
    if ((ragged && !lengths_next) || orphan) {
      return Status::BadRecord("field '" + info.fields[i].name +
                               "': a ragged field must be followed by its '<name>_lengths'");
    }
  }
  if (root["strings"].get(array) != simdjson::SUCCESS) {
    return Status::BadRecord("no array 'strings'");
  }
  for (simdjson::dom::element e : array) {
    MaterializedInfo::StringField& s = info.strings.emplace_back();
    std::string_view name;
    if (e["name"].get(name) != simdjson::SUCCESS || e["list"].get(s.list) != simdjson::SUCCESS) {
      return Status::BadRecord("a string field wants {\"name\", \"list\"}");
    }
    s.name = name;
  }
  // Absent in materializations written before it: no sequence known (packing pads with 0
  // unless batch.pack.pad_id says otherwise).
  if (root["sequences"].get(array) == simdjson::SUCCESS) {
    for (simdjson::dom::element e : array) {
      MaterializedInfo::Sequence& s = info.sequences.emplace_back();
      std::string_view field;
      auto ids = IntArray(e["vision_token_ids"]);
      if (e["field"].get(field) != simdjson::SUCCESS ||
          e["pad_id"].get(s.pad_id) != simdjson::SUCCESS ||
          e["ignore_index"].get(s.ignore_index) != simdjson::SUCCESS || !ids.ok()) {
        return Status::BadRecord("a sequence wants {\"field\", \"pad_id\", \"ignore_index\", "
                                 "\"vision_token_ids\"}");
      }
      s.field = field;
      s.vision_token_ids = *std::move(ids);
    }
  }
  simdjson::dom::object order;
  if (root["order"].get(order) != simdjson::SUCCESS) return Status::BadRecord("no object 'order'");
  auto shard_samples = IntArray(order["shard_samples"]);
  if (!shard_samples.ok() ||
      order["shuffle_window"].get(info.shuffle_window) != simdjson::SUCCESS) {
    return Status::BadRecord("'order' wants {\"shard_samples\": [int], \"shuffle_window\": int}");
  }
  info.shard_samples = *std::move(shard_samples);
  if (root["sets"].get(array) != simdjson::SUCCESS) return Status::BadRecord("no array 'sets'");
  for (simdjson::dom::element e : array) {
    simdjson::dom::object set;
    if (e.get(set) != simdjson::SUCCESS) return Status::BadRecord("a set is not an object");
    auto parsed = ParseSet(set);
    if (!parsed.ok()) {
      return Status::BadRecord("sets[" + std::to_string(info.sets.size()) + "]: " +
                               parsed.status().message());
    }
    info.sets.push_back(*std::move(parsed));
  }
  if (info.sets.empty()) return Status::BadRecord("no sets");
  return info;
}

Result<std::string> ReadText(Storage& storage, const std::string& uri) {
  HR_ASSIGN_OR_RETURN(const Buffer bytes, storage.Read(uri));
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Result<std::vector<std::string>> ParseIds(std::string_view json) {
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(json);
  simdjson::dom::array array;
  if (parser.parse(padded).get(array) != simdjson::SUCCESS) {
    return Status::BadRecord("not a JSON array");
  }
  std::vector<std::string> ids;
  for (simdjson::dom::element e : array) {
    std::string_view id;
    if (e.get(id) != simdjson::SUCCESS) return Status::BadRecord("an id is not a string");
    ids.emplace_back(id);
  }
  return ids;
}

// The records of one shard, placed at their dataset index in `records`.
Status PlaceShardRecords(const MaterializedInfo& info, const std::string& shard_uri,
                         const ShardIndex& index, const std::vector<std::string>& ids,
                         std::vector<SampleRecord>& records) {
  if (ids.size() != index.samples.size()) {
    return Status::BadRecord(shard_uri + ": " + std::to_string(index.samples.size()) +
                             " samples but " + std::to_string(ids.size()) + " ids");
  }
  for (size_t s = 0; s < index.samples.size(); ++s) {
    const ShardIndex::Sample& sample = index.samples[s];
    char* end = nullptr;
    const long long n = std::strtoll(sample.key.c_str(), &end, 10);
    if (sample.key.empty() || *end != '\0' || n < 0 || n >= info.dataset_samples) {
      return Status::BadRecord(shard_uri + ": key '" + sample.key +
                               "' is not a dataset index below " +
                               std::to_string(info.dataset_samples));
    }
    SampleRecord& record = records[static_cast<size_t>(n)];
    if (!record.media.empty()) {
      return Status::BadRecord(shard_uri + ": sample " + sample.key + " appears twice");
    }
    record.status = Status::Ok();
    record.id = ids[s];
    record.location = shard_uri + "#" + sample.key;
    const auto member = [&](const std::string& name, int field) {
      for (const TarField& f : sample.fields) {
        if (f.name == name) {
          record.media.push_back(MediaRef{field, shard_uri, f.offset, f.size});
          return true;
        }
      }
      record.media.clear();
      record.status = Status::MissingField("no member " + sample.key + "." + name);
      return false;
    };
    for (size_t f = 0; f < info.fields.size(); ++f) {
      if (!member(info.fields[f].name + ".npy", static_cast<int>(f))) break;
    }
    if (record.status.ok()) member("json", static_cast<int>(info.fields.size()));
  }
  return Status::Ok();
}

}  // namespace

std::string MaterializedInfoToJson(const MaterializedInfo& info) {
  JsonWriter w;
  w.BeginObject();
  w.Key("format").String("headrace.materialized");
  w.Key("version").Int(info.version);
  w.Key("headrace_version").String(info.headrace_version);
  w.Key("config").String(info.config);
  w.Key("seed").Int(static_cast<int64_t>(info.seed));
  w.Key("epochs");
  if (info.per_epoch()) {
    w.BeginArray();
    for (const auto& set : info.sets) w.Int(set.epoch.value_or(-1));
    w.EndArray();
  } else {
    w.String("all");
  }
  w.Key("random_ops").BeginArray();
  for (const std::string& op : info.random_ops) w.String(op);
  w.EndArray();
  w.Key("dataset_samples").Int(info.dataset_samples);
  w.Key("layout").String("per_sample");
  w.Key("fields").BeginArray();
  for (const FieldSpec& f : info.fields) {
    w.BeginObject().Key("name").String(f.name).Key("dtype").String(DTypeName(f.dtype));
    w.Key("shape").BeginArray();
    for (int64_t d : f.sample_shape) w.Int(d);
    w.EndArray();
    if (f.concatenated()) {
      // Each sample's member holds its own part: (rows, ...shape).
      w.Key("layout").String(FieldLayoutName(f.layout));
      if (!f.count_field.empty()) w.Key("count_field").String(f.count_field);
      if (!f.tokens_of.empty()) w.Key("tokens_of").String(f.tokens_of);
    }
    w.Key("member").String(f.name + ".npy").EndObject();
  }
  w.EndArray();
  w.Key("strings").BeginArray();
  for (const auto& s : info.strings) {
    w.BeginObject().Key("name").String(s.name).Key("list").Bool(s.list).EndObject();
  }
  w.EndArray();
  w.Key("sequences").BeginArray();
  for (const auto& s : info.sequences) {
    w.BeginObject().Key("field").String(s.field).Key("pad_id").Int(s.pad_id);
    w.Key("ignore_index").Int(s.ignore_index).Key("vision_token_ids").BeginArray();
    for (int64_t id : s.vision_token_ids) w.Int(id);
    w.EndArray().EndObject();
  }
  w.EndArray();
  w.Key("order").BeginObject().Key("shard_samples").BeginArray();
  for (int64_t n : info.shard_samples) w.Int(n);
  w.EndArray().Key("shuffle_window").Int(info.shuffle_window).EndObject();
  w.Key("sets").BeginArray();
  for (const auto& set : info.sets) {
    w.BeginObject().Key("epoch");
    set.epoch ? w.Int(*set.epoch) : w.Null();
    w.Key("dir").String(set.dir).Key("samples").Int(set.samples);
    w.Key("shards").BeginArray();
    for (const auto& shard : set.shards) {
      w.BeginObject().Key("shard").String(shard.name).Key("bytes").Int(shard.bytes);
      w.Key("samples").Int(shard.samples).EndObject();
    }
    w.EndArray().Key("skipped").BeginArray();
    for (const auto& s : set.skipped) {
      w.BeginObject().Key("index").Int(s.index).Key("code").String(StatusCodeName(s.status.code()));
      w.Key("message").String(s.status.message()).EndObject();
    }
    w.EndArray().EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.str() + "\n";
}

Result<MaterializedInfo> ParseMaterializedInfo(std::string_view json, const std::string& uri) {
  auto info = ParseInfo(json);
  if (!info.ok()) return Status(info.status().code(), uri + ": " + info.status().message());
  return info;
}

std::string NpyHeader(const FieldSpec& field, int64_t rows) {
  // NumPy's own spelling: (), (3,), (3, 224, 224).
  std::vector<int64_t> dims = field.sample_shape;
  if (rows >= 0) dims.insert(dims.begin(), rows);
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    shape += (i > 0 ? ", " : "") + std::to_string(dims[i]);
  }
  shape += dims.size() == 1 ? ",)" : ")";
  std::string dict = "{'descr': '" + std::string(NpyDescr(field.dtype)) +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n': a multiple of 64.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  header += static_cast<char>(dict.size() & 0xff);
  header += static_cast<char>(dict.size() >> 8);
  return header + dict;
}

Result<std::span<const uint8_t>> NpyRow(std::span<const uint8_t> npy, const FieldSpec& field) {
  const std::string header = NpyHeader(field);
  if (npy.size() != header.size() + field.sample_bytes() ||
      std::memcmp(npy.data(), header.data(), header.size()) != 0) {
    std::string shape;
    for (int64_t d : field.sample_shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return Status::CorruptData("member " + field.name + ".npy is not the " +
                               std::string(DTypeName(field.dtype)) + "[" + shape +
                               "] row materialized.json declares");
  }
  return npy.subspan(header.size());
}

Result<NpyRows> NpyRowsOf(std::span<const uint8_t> npy, const FieldSpec& field) {
  // The leading dimension as the header spells it; the header rebuilt for it must then
  // match byte for byte, as NpyRow's does.
  const std::string_view text(reinterpret_cast<const char*>(npy.data()),
                              std::min<size_t>(npy.size(), 256));
  const size_t at = text.find("'shape': (");
  int64_t rows = -1;
  if (at != std::string_view::npos) {
    rows = 0;
    size_t i = at + 10;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9' && rows < (int64_t{1} << 40); ++i) {
      rows = rows * 10 + (text[i] - '0');
    }
    if (i == at + 10) rows = -1;
  }
  const std::string header = rows >= 0 ? NpyHeader(field, rows) : std::string();
  if (rows < 0 || npy.size() != header.size() + static_cast<size_t>(rows) * field.sample_bytes() ||
      std::memcmp(npy.data(), header.data(), header.size()) != 0) {
    std::string shape = "?";
    for (int64_t d : field.sample_shape) shape += ", " + std::to_string(d);
    return Status::CorruptData("member " + field.name + ".npy is not the " +
                               std::string(DTypeName(field.dtype)) + "[" + shape +
                               "] values materialized.json declares");
  }
  return NpyRows{npy.subspan(header.size()), rows};
}

std::string JoinUri(std::string_view base, std::string_view path) {
  std::string out(base);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const size_t length = slash == std::string_view::npos ? std::string_view::npos : slash - start;
    const std::string_view part = path.substr(start, length);
    if (!part.empty() && part != ".") {
      if (!out.empty() && out.back() != '/') out += '/';
      out += part;
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

namespace {

// A set's folder or a shard's name as materialized.json gives it: a path inside the
// materialization ("." or "epoch-K"; no "..", no absolute path, no scheme), so that
// reading it never leaves the folder (JoinUri would follow "../x" or "/etc" there).
bool StaysInside(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.find("://") != std::string_view::npos ||
      path.find('\\') != std::string_view::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    if (path.substr(start, slash == std::string_view::npos ? slash : slash - start) == "..") {
      return false;
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return true;
}

// What materialized.json declares, checked against itself before anything is read or
// allocated by it: folders inside the materialization, and counts that add up (every
// dataset index is written or skipped in each set: the writer delivers every sample).
// The counts are checked against the shards' own indexes in LoadMaterializedIndex.
Status CheckDeclared(const MaterializedInfo& info, const std::string& info_uri) {
  const auto bad = [&](const std::string& field, const std::string& why) {
    return Status::InvalidArgument("source.materialized: " + info_uri + ": " + field + " " + why);
  };
  for (size_t i = 0; i < info.sets.size(); ++i) {
    const MaterializedInfo::Set& set = info.sets[i];
    const std::string at = "sets[" + std::to_string(i) + "]";
    if (!StaysInside(set.dir)) {
      return bad(at + ".dir", QuoteForMessage(set.dir) +
                                  " leaves the materialization's folder (want a relative "
                                  "folder without '..', such as \".\" or \"epoch-0\")");
    }
    int64_t written = 0;
    for (size_t j = 0; j < set.shards.size(); ++j) {
      const MaterializedInfo::Shard& shard = set.shards[j];
      const std::string shard_at = at + ".shards[" + std::to_string(j) + "]";
      if (shard.name == "." || shard.name == "..") {
        return bad(shard_at + ".shard", QuoteForMessage(shard.name) + " is not a file name");
      }
      if (shard.samples < 0 || shard.samples > info.dataset_samples - written) {
        return bad(shard_at + ".samples",
                   "(" + std::to_string(shard.samples) + ") takes the set past dataset_samples (" +
                       std::to_string(info.dataset_samples) + ")");
      }
      written += shard.samples;
    }
    if (set.samples != written) {
      return bad(at + ".samples", "declares " + std::to_string(set.samples) +
                                      " samples, its shards " + std::to_string(written));
    }
    const int64_t skipped = static_cast<int64_t>(set.skipped.size());
    if (written + skipped != info.dataset_samples) {
      return bad("dataset_samples", "declares " + std::to_string(info.dataset_samples) +
                                        " samples; " + at + " holds " +
                                        std::to_string(written) + " written and " +
                                        std::to_string(skipped) + " skipped");
    }
  }
  if (!info.shard_samples.empty()) {
    int64_t sum = 0;
    for (const int64_t n : info.shard_samples) {
      if (n > info.dataset_samples - sum) {
        return bad("order.shard_samples",
                   "adds up to more than dataset_samples (" +
                       std::to_string(info.dataset_samples) + ")");
      }
      sum += n;
    }
    if (sum != info.dataset_samples) {
      return bad("order.shard_samples", "adds up to " + std::to_string(sum) +
                                            ", not dataset_samples (" +
                                            std::to_string(info.dataset_samples) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<MaterializedIndex> LoadMaterializedIndex(Storage& storage, const std::string& uri) {
  MaterializedIndex source;
  source.uri = uri;
  const std::string info_uri = JoinUri(uri, kMaterializedFile);
  auto text = ReadText(storage, info_uri);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(uri + " holds no " + std::string(kMaterializedFile) +
                              ": not a materialization (write one with `headrace materialize "
                              "CONFIG --to " + uri + "`)");
    }
    return text.status();
  }
  HR_ASSIGN_OR_RETURN(source.info, ParseMaterializedInfo(*text, info_uri));
  const MaterializedInfo& info = source.info;
  HR_RETURN_IF_ERROR(CheckDeclared(info, info_uri));
  for (size_t i = 0; i < info.sets.size(); ++i) {
    const MaterializedInfo::Set& set = info.sets[i];
    // The shards' indexes first: they are what the files hold, and the records (one per
    // dataset index) are allocated only once they confirm the declared counts.
    struct ShardFiles {
      std::string uri;
      ShardIndex index;
      std::vector<std::string> ids;
    };
    std::vector<ShardFiles> shards;
    for (size_t j = 0; j < set.shards.size(); ++j) {
      const MaterializedInfo::Shard& shard = set.shards[j];
      ShardFiles& files = shards.emplace_back();
      files.uri = JoinUri(JoinUri(uri, set.dir), shard.name);
      HR_ASSIGN_OR_RETURN(const std::string idx, ReadText(storage, files.uri + ".idx.json"));
      auto index = ParseShardIndex(idx);
      if (!index.ok()) {
        return Status::BadRecord(files.uri + ".idx.json: " + index.status().message());
      }
      files.index = *std::move(index);
      if (static_cast<int64_t>(files.index.samples.size()) != shard.samples) {
        return Status::InvalidArgument(
            "source.materialized: " + info_uri + ": sets[" + std::to_string(i) + "].shards[" +
            std::to_string(j) + "].samples declares " + std::to_string(shard.samples) +
            " samples; " + files.uri + ".idx.json holds " +
            std::to_string(files.index.samples.size()));
      }
      HR_ASSIGN_OR_RETURN(const std::string ids_text, ReadText(storage, files.uri + ".ids.json"));
      auto ids = ParseIds(ids_text);
      if (!ids.ok()) return Status::BadRecord(files.uri + ".ids.json: " + ids.status().message());
      files.ids = *std::move(ids);
    }
    std::vector<SampleRecord>& records = source.records.emplace_back(
        static_cast<size_t>(info.dataset_samples));
    for (SampleRecord& r : records) {
      r.status = Status::Internal("not in the materialization at " + JoinUri(uri, set.dir));
    }
    for (const ShardFiles& files : shards) {
      HR_RETURN_IF_ERROR(PlaceShardRecords(info, files.uri, files.index, files.ids, records));
    }
    for (const MaterializedInfo::Skipped& s : set.skipped) {
      if (s.index < 0 || s.index >= info.dataset_samples) {
        return Status::BadRecord(info_uri + ": skipped index " + std::to_string(s.index) +
                                 " is outside the dataset");
      }
      records[static_cast<size_t>(s.index)].status = s.status;
    }
  }
  return source;
}

Status PrepareMaterializedSample(Sample& sample) {
  if (sample.media.empty()) return Status::Internal("a materialized sample without members");
  const Buffer& json = sample.media.back().bytes;
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(reinterpret_cast<const char*>(json.data()), json.size());
  simdjson::dom::object root;
  simdjson::dom::object strings;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS ||
      root["strings"].get(strings) != simdjson::SUCCESS) {
    return Status::BadRecord("the .json member is not {\"strings\": {...}}");
  }
  sample.parsed.attributes.clear();
  int field = 0;
  for (auto [name, element] : strings) {
    simdjson::dom::array items;
    if (element.get(items) != simdjson::SUCCESS) {
      return Status::BadRecord("strings." + std::string(name) + " is not an array");
    }
    for (simdjson::dom::element item : items) {
      std::string_view text;
      if (item.get(text) != simdjson::SUCCESS) {
        return Status::BadRecord("strings." + std::string(name) + " holds a non-string");
      }
      sample.parsed.attributes.push_back(Attribute{field, std::string(text)});
    }
    ++field;
  }
  sample.attributes = sample.parsed.attributes;
  return Status::Ok();
}

}  // namespace headrace
