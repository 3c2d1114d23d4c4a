// The formats are parsed here by hand: KITTI's .bin is a bare float32 array, and the
// only Debian library made for PCD is PCL (libpcl-dev: Boost, VTK, Qt and ~200 MB for
// a header parser), whose reader also throws and allocates from the header's claims.
// A PCD header is a few lines of text; what matters is checking every claim it makes
// against the bytes that follow, which this does before allocating anything.
#include "headrace/ops/pointcloud/read.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include <lzf.h>

namespace headrace {
namespace {

constexpr std::pair<PointFormat, std::string_view> kFormats[] = {
    {PointFormat::kAuto, "auto"}, {PointFormat::kKitti, "kitti"}, {PointFormat::kPcd, "pcd"}};

constexpr size_t kKittiRecord = 4 * sizeof(float);
// A PCD header longer than this is not a header.
constexpr size_t kMaxPcdHeader = 64 * 1024;

bool StartsWith(const uint8_t* bytes, size_t size, std::string_view prefix) {
  return size >= prefix.size() && std::memcmp(bytes, prefix.data(), prefix.size()) == 0;
}

// Where kept points go: memory for at most the file's point count, from the caller.
struct Sink {
  float* out = nullptr;
  int64_t kept = 0;
  bool crop = false;
  PointRange range{};
  int64_t decode_bytes = 0;  // > 0: what a decompressed body and its points may take

  // Keeps the point if x, y, z are finite and inside the range (when set).
  void Keep(float x, float y, float z, float intensity) {
    if (!std::isfinite(x) || !std::isfinite(y) || !std::isfinite(z)) return;
    if (crop && !InsideRange(range, x, y, z)) return;
    float* p = out + kept * kPointChannels;
    p[0] = x;
    p[1] = y;
    p[2] = z;
    p[3] = intensity;
    ++kept;
  }
};

// Asks for memory for `points` points and points the sink at it.
Status Reserve(const PointAllocator& allocate, uint64_t points, Sink& sink) {
  HR_ASSIGN_OR_RETURN(sink.out, allocate(static_cast<int64_t>(points)));
  if (sink.out == nullptr) return Status::ResourceExhausted("pointcloud.read: no memory");
  return Status::Ok();
}

Status ParseKitti(const uint8_t* bytes, size_t size, const PointAllocator& allocate,
                  Sink& sink) {
  if (size == 0) return Status::CorruptData("pointcloud.read: empty file (no points)");
  if (size % kKittiRecord != 0) {
    return Status::CorruptData("pointcloud.read: KITTI .bin of " + std::to_string(size) +
                               " bytes is not a whole number of 16-byte records (float32 x, "
                               "y, z, intensity)");
  }
  const size_t n = size / kKittiRecord;
  HR_RETURN_IF_ERROR(Reserve(allocate, n, sink));
  for (size_t i = 0; i < n; ++i) {
    float p[4];
    std::memcpy(p, bytes + i * kKittiRecord, sizeof p);  // unaligned: the sample's bytes
    sink.Keep(p[0], p[1], p[2], p[3]);
  }
  return Status::Ok();
}

// --- PCD -------------------------------------------------------------------------------

enum class PcdData { kAscii, kBinary, kBinaryCompressed };

// One FIELDS entry: where its values sit in a record and how to read them.
struct PcdField {
  std::string name;
  int size = 4;    // bytes per value
  char type = 'F'; // F float, I signed, U unsigned
  int count = 1;   // values per point
  size_t offset = 0;  // of its first value within a binary record
};

struct PcdHeader {
  std::vector<PcdField> fields;
  int64_t width = -1, height = -1, points = -1;
  PcdData data = PcdData::kAscii;
  size_t data_offset = 0;  // the first byte after the DATA line
  size_t record_bytes = 0;
  int values_per_point = 0;  // sum of COUNT: the values of an ascii line
};

Status PcdError(std::string what) { return Status::CorruptData("pointcloud.read: PCD " + what); }

std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

template <typename T>
bool ParseNumber(std::string_view text, T& out) {
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// A header line's integer list (SIZE, COUNT) with one entry per field.
Status IntsPerField(std::string_view key, const std::vector<std::string_view>& words,
                    size_t fields, std::vector<int>& out) {
  if (words.size() != fields + 1) {
    return PcdError(std::string(key) + " has " + std::to_string(words.size() - 1) +
                    " entries for " + std::to_string(fields) + " FIELDS");
  }
  out.clear();
  for (size_t i = 1; i < words.size(); ++i) {
    int v = 0;
    if (!ParseNumber(words[i], v) || v < 1 || v > 1 << 20) {
      return PcdError(std::string(key) + " entry '" + std::string(words[i]) + "' is not a " +
                      "positive integer");
    }
    out.push_back(v);
  }
  return Status::Ok();
}

Result<PcdHeader> ParsePcdHeader(const uint8_t* bytes, size_t size) {
  PcdHeader h;
  std::vector<int> sizes, counts;
  std::vector<char> types;
  size_t pos = 0;
  bool have_data = false;
  while (!have_data) {
    if (pos >= size) return PcdError("header ends before its DATA line");
    if (pos > kMaxPcdHeader) return PcdError("header is longer than 64 KiB");
    const auto* nl = static_cast<const uint8_t*>(std::memchr(bytes + pos, '\n', size - pos));
    const size_t end = nl != nullptr ? static_cast<size_t>(nl - bytes) : size;
    const std::string_view line(reinterpret_cast<const char*>(bytes + pos), end - pos);
    pos = nl != nullptr ? end + 1 : size;
    const std::vector<std::string_view> w = Words(line);
    if (w.empty() || w[0].front() == '#') continue;
    const std::string_view key = w[0];
    if (key == "VERSION" || key == "VIEWPOINT") continue;
    if (key == "FIELDS") {
      h.fields.clear();
      for (size_t i = 1; i < w.size(); ++i) h.fields.push_back(PcdField{std::string(w[i])});
    } else if (key == "SIZE") {
      HR_RETURN_IF_ERROR(IntsPerField(key, w, h.fields.size(), sizes));
    } else if (key == "COUNT") {
      HR_RETURN_IF_ERROR(IntsPerField(key, w, h.fields.size(), counts));
    } else if (key == "TYPE") {
      if (w.size() != h.fields.size() + 1) return PcdError("TYPE does not match FIELDS");
      types.clear();
      for (size_t i = 1; i < w.size(); ++i) {
        if (w[i].size() != 1 || (w[i][0] != 'F' && w[i][0] != 'I' && w[i][0] != 'U')) {
          return PcdError("TYPE '" + std::string(w[i]) + "' is not F, I or U");
        }
        types.push_back(w[i][0]);
      }
    } else if (key == "WIDTH" || key == "HEIGHT" || key == "POINTS") {
      int64_t v = -1;
      if (w.size() != 2 || !ParseNumber(w[1], v) || v < 0) {
        return PcdError(std::string(key) + " is not a non-negative integer");
      }
      (key == "WIDTH" ? h.width : key == "HEIGHT" ? h.height : h.points) = v;
    } else if (key == "DATA") {
      if (w.size() != 2) return PcdError("DATA names no encoding");
      if (w[1] == "ascii") {
        h.data = PcdData::kAscii;
      } else if (w[1] == "binary") {
        h.data = PcdData::kBinary;
      } else if (w[1] == "binary_compressed") {
        h.data = PcdData::kBinaryCompressed;
      } else {
        return PcdError("DATA '" + std::string(w[1]) + "' is not ascii, binary or "
                        "binary_compressed");
      }
      have_data = true;
    } else {
      return PcdError("header line starts with unknown key '" + std::string(key) + "'");
    }
  }
  h.data_offset = pos;
  if (h.fields.empty()) return PcdError("header has no FIELDS");
  if (sizes.size() != h.fields.size()) return PcdError("header has no SIZE for its FIELDS");
  if (types.size() != h.fields.size()) return PcdError("header has no TYPE for its FIELDS");
  if (counts.empty()) counts.assign(h.fields.size(), 1);  // COUNT is optional
  if (h.width < 0) return PcdError("header has no WIDTH");
  if (h.height < 0) h.height = 1;
  if (h.points < 0) h.points = h.width * h.height;
  if (h.height != 0 && h.width > std::numeric_limits<int64_t>::max() / h.height) {
    return PcdError("WIDTH x HEIGHT overflows");
  }
  if (h.width * h.height != h.points) {
    return PcdError("header says WIDTH " + std::to_string(h.width) + " x HEIGHT " +
                    std::to_string(h.height) + " but POINTS " + std::to_string(h.points));
  }
  for (size_t i = 0; i < h.fields.size(); ++i) {
    PcdField& f = h.fields[i];
    f.size = sizes[i];
    f.type = types[i];
    f.count = counts[i];
    const bool float_ok = f.type == 'F' && (f.size == 4 || f.size == 8);
    const bool int_ok = f.type != 'F' && (f.size == 1 || f.size == 2 || f.size == 4 || f.size == 8);
    if (!float_ok && !int_ok) {
      return PcdError("field '" + f.name + "' has TYPE " + std::string(1, f.type) + " of SIZE " +
                      std::to_string(f.size));
    }
    f.offset = h.record_bytes;
    h.record_bytes += static_cast<size_t>(f.size) * static_cast<size_t>(f.count);
    h.values_per_point += f.count;
  }
  return h;
}

// `v` as float; beyond float's range, infinity of its sign (a plain cast would be
// undefined behaviour), which Keep then drops.
float ToFloat(double v) {
  if (std::abs(v) > std::numeric_limits<float>::max() && std::isfinite(v)) {
    return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  }
  return static_cast<float>(v);
}

// A binary value of `field` at `p`, as float.
float ReadBinary(const PcdField& f, const uint8_t* p) {
  auto load = [p]<typename T>(T) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return static_cast<float>(v);
  };
  if (f.type == 'F') {
    if (f.size == 4) return load(float{});
    double v;
    std::memcpy(&v, p, sizeof v);
    return ToFloat(v);
  }
  if (f.type == 'I') {
    switch (f.size) {
      case 1: return load(int8_t{});
      case 2: return load(int16_t{});
      case 4: return load(int32_t{});
      default: return load(int64_t{});
    }
  }
  switch (f.size) {
    case 1: return load(uint8_t{});
    case 2: return load(uint16_t{});
    case 4: return load(uint32_t{});
    default: return load(uint64_t{});
  }
}

// Indices into h.fields of x, y, z and intensity (-1: none; intensity is then 0).
struct PcdColumns {
  int x = -1, y = -1, z = -1, intensity = -1;
};

Result<PcdColumns> FindColumns(const PcdHeader& h) {
  PcdColumns c;
  for (size_t i = 0; i < h.fields.size(); ++i) {
    const std::string& n = h.fields[i].name;
    int* column = n == "x" ? &c.x : n == "y" ? &c.y : n == "z" ? &c.z
                : (n == "intensity" || n == "i") ? &c.intensity : nullptr;
    if (column == nullptr) continue;
    if (*column >= 0) return PcdError("field '" + n + "' appears twice");
    if (h.fields[i].count != 1) return PcdError("field '" + n + "' has COUNT other than 1");
    *column = static_cast<int>(i);
  }
  if (c.x < 0 || c.y < 0 || c.z < 0) return PcdError("has no x, y and z FIELDS");
  return c;
}

// The points of a binary body: row-major (`binary`: each point's record in turn) or
// column-major (`binary_compressed`, once decompressed: each field's values for every
// point in turn, so a field starts at points x its offset in the record).
Status ReadPcdRecords(const PcdHeader& h, const PcdColumns& c, const uint8_t* data,
                      bool column_major, const PointAllocator& allocate, Sink& sink) {
  const auto points = static_cast<uint64_t>(h.points);
  HR_RETURN_IF_ERROR(Reserve(allocate, points, sink));
  const auto& f = h.fields;
  auto field_bytes = [](const PcdField& field) {
    return static_cast<uint64_t>(field.size) * static_cast<uint64_t>(field.count);
  };
  auto value = [&](int column, uint64_t i) {
    const PcdField& field = f[static_cast<size_t>(column)];
    const uint8_t* p =
        column_major ? data + points * field.offset + i * field_bytes(field)
                     : data + i * h.record_bytes + field.offset;
    return ReadBinary(field, p);
  };
  for (uint64_t i = 0; i < points; ++i) {
    sink.Keep(value(c.x, i), value(c.y, i), value(c.z, i),
              c.intensity >= 0 ? value(c.intensity, i) : 0.0f);
  }
  return Status::Ok();
}

// Whether `points` records of the header fill exactly `size` bytes.
bool RecordsFill(const PcdHeader& h, size_t size) {
  const auto points = static_cast<uint64_t>(h.points);
  return h.record_bytes != 0 && points <= size / h.record_bytes &&
         points * h.record_bytes == size;
}

Status ParsePcdBinary(const PcdHeader& h, const PcdColumns& c, const uint8_t* data,
                      size_t size, const PointAllocator& allocate, Sink& sink) {
  if (!RecordsFill(h, size)) {
    return PcdError("header says " + std::to_string(h.points) + " points of " +
                    std::to_string(h.record_bytes) + " bytes, but " + std::to_string(size) +
                    " bytes of data follow");
  }
  return ReadPcdRecords(h, c, data, /*column_major=*/false, allocate, sink);
}

// LZF's densest token, a 3-byte back reference, stands for 264 bytes: no stream
// decompresses to more than 88 times its size. A header claiming more is refused before
// any memory is asked for.
constexpr uint64_t kLzfMaxRatio = 88;

// `binary_compressed` as PCL writes it: uint32 compressed size, uint32 uncompressed
// size (both little-endian), then one LZF stream of the column-major records. Bytes
// after the stream are ignored, as PCL's reader does.
Status ParsePcdCompressed(const PcdHeader& h, const PcdColumns& c, const uint8_t* data,
                          size_t size, const PointAllocator& allocate, Sink& sink) {
  uint32_t sizes[2];
  if (size < sizeof sizes) {
    return PcdError("binary_compressed data has " + std::to_string(size) +
                    " bytes, less than its 8-byte size prefix");
  }
  std::memcpy(sizes, data, sizeof sizes);
  const uint32_t compressed = sizes[0], uncompressed = sizes[1];
  if (compressed > size - sizeof sizes) {
    return PcdError("binary_compressed says " + std::to_string(compressed) +
                    " compressed bytes, but " + std::to_string(size - sizeof sizes) +
                    " bytes follow");
  }
  if (!RecordsFill(h, uncompressed)) {
    return PcdError("header says " + std::to_string(h.points) + " points of " +
                    std::to_string(h.record_bytes) + " bytes, but binary_compressed says " +
                    std::to_string(uncompressed) + " uncompressed bytes");
  }
  if (uncompressed > static_cast<uint64_t>(compressed) * kLzfMaxRatio) {
    return PcdError("binary_compressed says " + std::to_string(uncompressed) +
                    " uncompressed bytes from " + std::to_string(compressed) +
                    ", more than LZF can expand to");
  }
  // The decode allowance, from the header: the body and the points it decodes to.
  const uint64_t needs = uint64_t{uncompressed} +
                         static_cast<uint64_t>(h.points) * kPointChannels * sizeof(float);
  if (sink.decode_bytes > 0 && needs > static_cast<uint64_t>(sink.decode_bytes)) {
    return Status::ResourceExhausted(
        "pointcloud.read: binary_compressed says " + std::to_string(uncompressed) +
        " uncompressed bytes of " + std::to_string(h.points) + " points (" +
        std::to_string(needs) + " bytes with the points read), past the decode allowance of " +
        std::to_string(sink.decode_bytes) +
        " bytes per thread (memory.decode_bytes_per_thread; by default memory.budget_bytes / 4)");
  }
  // The column-major body does not fit the scratch the points go to (4 floats a point),
  // so it is decompressed into a buffer of its own, freed when the file is read.
  const auto body = std::make_unique_for_overwrite<uint8_t[]>(std::max<size_t>(uncompressed, 1));
  if (uncompressed > 0) {
    errno = 0;
    const unsigned got = lzf_decompress(data + sizeof sizes, compressed, body.get(), uncompressed);
    if (got != uncompressed) {
      const std::string why = got != 0        ? std::to_string(got) + " bytes of the " +
                                                    std::to_string(uncompressed) + " declared"
                              : errno == E2BIG ? "more than the " + std::to_string(uncompressed) +
                                                     " bytes declared"
                                               : "a corrupt stream";
      return PcdError("binary_compressed data does not decompress (LZF: " + why + ")");
    }
  }
  return ReadPcdRecords(h, c, body.get(), /*column_major=*/true, allocate, sink);
}

Status ParsePcdAscii(const PcdHeader& h, const PcdColumns& c, const uint8_t* data,
                     size_t size, const PointAllocator& allocate, Sink& sink) {
  // Each value takes at least two bytes ("0 "): a header claiming more points than that
  // allows is refused before anything is reserved for them.
  const auto points = static_cast<uint64_t>(h.points);
  const auto per_point = static_cast<uint64_t>(h.values_per_point);
  if (points > 0 && per_point > 0 && points > (size + 1) / (2 * per_point)) {
    return PcdError("header says " + std::to_string(h.points) + " points, but only " +
                    std::to_string(size) + " bytes of text follow");
  }
  HR_RETURN_IF_ERROR(Reserve(allocate, points, sink));
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<float> values(static_cast<size_t>(h.values_per_point));
  // The value index of each wanted column (fields before it may have COUNT > 1).
  std::vector<int> first(h.fields.size());
  for (size_t i = 0, v = 0; i < h.fields.size(); v += h.fields[i].count, ++i) {
    first[i] = static_cast<int>(v);
  }
  uint64_t read = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::vector<std::string_view> w = Words(text.substr(pos, end - pos));
    pos = end + 1;
    if (w.empty()) continue;  // blank lines (the final newline)
    if (read == points) {
      return PcdError("has more data lines than its POINTS " + std::to_string(h.points));
    }
    if (w.size() != values.size()) {
      return PcdError("line of point " + std::to_string(read) + " has " +
                      std::to_string(w.size()) + " values, FIELDS/COUNT say " +
                      std::to_string(values.size()));
    }
    for (size_t k = 0; k < w.size(); ++k) {
      // from_chars reads "nan" and "inf", which PCL writes for points without a return.
      double v = 0;
      if (!ParseNumber(w[k], v)) {
        return PcdError("value '" + std::string(w[k].substr(0, 32)) + "' of point " +
                        std::to_string(read) + " is not a number");
      }
      values[k] = ToFloat(v);
    }
    ++read;
    sink.Keep(values[first[c.x]], values[first[c.y]], values[first[c.z]],
              c.intensity >= 0 ? values[first[c.intensity]] : 0.0f);
  }
  if (read != points) {
    return PcdError("header says POINTS " + std::to_string(h.points) + " but " +
                    std::to_string(read) + " data lines follow");
  }
  return Status::Ok();
}

Status ParsePcd(const uint8_t* bytes, size_t size, const PointAllocator& allocate,
                Sink& sink) {
  HR_ASSIGN_OR_RETURN(const PcdHeader h, ParsePcdHeader(bytes, size));
  HR_ASSIGN_OR_RETURN(const PcdColumns c, FindColumns(h));
  const uint8_t* data = bytes + h.data_offset;
  const size_t data_size = size - h.data_offset;
  switch (h.data) {
    case PcdData::kAscii: return ParsePcdAscii(h, c, data, data_size, allocate, sink);
    case PcdData::kBinary: return ParsePcdBinary(h, c, data, data_size, allocate, sink);
    case PcdData::kBinaryCompressed:
      return ParsePcdCompressed(h, c, data, data_size, allocate, sink);
  }
  return Status::Internal("pointcloud.read: unknown PCD DATA encoding");
}

}  // namespace

EnumTable<PointFormat> TableOf(PointFormat) { return kFormats; }

bool HasRange(const PointRange& range) {
  return std::any_of(range.begin(), range.end(), [](double v) { return v != 0; });
}

Status ValidateRange(const std::string& key, const PointRange& r, bool allow_none) {
  if (allow_none && !HasRange(r)) return Status::Ok();
  for (int a = 0; a < 3; ++a) {
    if (!(r[a] < r[a + 3]) || !std::isfinite(r[a]) || !std::isfinite(r[a + 3])) {
      return schema::Invalid(key, std::string("min must be < max on each axis: [xmin, ymin, "
                                              "zmin, xmax, ymax, zmax]") +
                                      (allow_none ? ", or all zeros for no range" : "") +
                                      " (axis " + "xyz"[a] + ": " + schema::FormatDouble(r[a]) +
                                      " .. " + schema::FormatDouble(r[a + 3]) + ")");
    }
  }
  return Status::Ok();
}

Result<int64_t> ParsePoints(const uint8_t* bytes, size_t size, PointFormat format,
                            const PointRange& range, const PointAllocator& allocate,
                            int64_t decode_bytes) {
  Sink sink;
  sink.decode_bytes = decode_bytes;
  sink.crop = HasRange(range);
  sink.range = range;
  if (format == PointFormat::kAuto) {
    const bool pcd = StartsWith(bytes, size, "# .PCD") || StartsWith(bytes, size, "VERSION") ||
                     StartsWith(bytes, size, "FIELDS");
    format = pcd ? PointFormat::kPcd : PointFormat::kKitti;
  }
  if (format == PointFormat::kPcd) {
    if (size == 0) return Status::CorruptData("pointcloud.read: empty file (no points)");
    HR_RETURN_IF_ERROR(ParsePcd(bytes, size, allocate, sink));
  } else {
    HR_RETURN_IF_ERROR(ParseKitti(bytes, size, allocate, sink));
  }
  return sink.kept;
}

Status PointReadOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".format", s.format));
  HR_RETURN_IF_ERROR(ValidateRange(p + ".point_range", s.point_range, /*allow_none=*/true));
  return schema::NonEmpty(p + ".field", s.field, "the point-cloud value to read");
}

Status PointReadOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kEncoded).status());
  return ctx.Write(spec.field, ValueDesc{ValueKind::kPoints, {-1, kPointChannels},
                                         ctx.key() + " (each file's own point count)"});
}

Result<std::unique_ptr<Op>> PointReadOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(
      std::make_unique<PointReadOp>(spec, ctx.slot(spec.field), ctx.decode_bytes_per_thread()));
}

Status PointReadOp::Run(SampleContext& ctx) const {
  const EncodedBytes* file = ctx.Get<EncodedBytes>(slot_);
  if (file == nullptr) {
    return Status::MissingField("the record has no " + spec_.field +
                                " but the pipeline reads one (pointcloud.read)");
  }
  // Scratch for every point the file holds; cropping keeps a prefix of it.
  float* out = nullptr;
  const PointAllocator allocate = [&](int64_t points) -> Result<float*> {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(points, 1)) * kPointChannels *
                         sizeof(float);
    HR_ASSIGN_OR_RETURN(uint8_t * scratch, ctx.NextScratchBytes(bytes));
    out = reinterpret_cast<float*>(scratch);
    return out;
  };
  HR_ASSIGN_OR_RETURN(const int64_t kept, ParsePoints(file->data, file->size, spec_.format,
                                                      spec_.point_range, allocate, decode_bytes_));
  ctx.Set(slot_, PointsView{out, kept, kPointChannels});
  return Status::Ok();
}

std::vector<uint8_t> PointReadOp::ExampleInput(int index) {
  const int n = 100 + index;  // index 0: a third of it (the battery's cut) is 533 bytes
  std::vector<float> p;
  for (int i = 0; i < n; ++i) {
    p.insert(p.end(), {0.5f * static_cast<float>(i), static_cast<float>(index) - 0.25f * i,
                       -1.5f + 0.01f * static_cast<float>(i), static_cast<float>(i % 10) / 10});
  }
  std::vector<uint8_t> bytes(p.size() * sizeof(float));
  std::memcpy(bytes.data(), p.data(), bytes.size());
  return bytes;
}

}  // namespace headrace
