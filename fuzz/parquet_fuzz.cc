// Fuzz target: Parquet files (formats/parquet_table.h) as the engine reads them: the
// layout from a short tail, then from the tail it asks for, then every row group decoded
// from an exact-size copy of its byte range alone.
//
// Properties checked besides "no crash, no leak, no UB":
//   - reading the layout fails only with kCorruptData or kUnsupportedFormat, and asks
//     for more tail bytes only when the file has them;
//   - the layout from the tail equals the one from the whole file;
//   - rows add up, and every row group's range lies inside the file's data, after the
//     leading magic and before the footer;
//   - a decode fails only with kCorruptData, kUnsupportedFormat or kResourceExhausted
//     (the limits below); one that succeeds has one value per row in every column, of
//     the alternative the column's kind promises, or null.
// Arrow's allocations are capped (max_decode_bytes), so a footer that declares huge
// pages is refused instead of exhausting the fuzzer's memory.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "headrace/formats/parquet_table.h"

namespace {

using namespace headrace;

bool KindHolds(ParquetColumnKind kind, bool list, const ParquetValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return true;
  if (list) {
    const auto* cell = std::get_if<ParquetList>(&v);
    if (cell == nullptr) return false;
    for (const ParquetValue& item : cell->items) {
      if (!KindHolds(kind, false, item)) return false;
    }
    return true;
  }
  switch (kind) {
    case ParquetColumnKind::kBytes: return std::holds_alternative<Buffer>(v);
    case ParquetColumnKind::kString: return std::holds_alternative<std::string>(v);
    case ParquetColumnKind::kInt64: return std::holds_alternative<int64_t>(v);
    case ParquetColumnKind::kBool:
      return std::holds_alternative<int64_t>(v) && std::get<int64_t>(v) >= 0 &&
             std::get<int64_t>(v) <= 1;
    case ParquetColumnKind::kDouble: return std::holds_alternative<double>(v);
    case ParquetColumnKind::kBytesWithPath: return std::holds_alternative<ParquetMedia>(v);
    case ParquetColumnKind::kUnsupported: return false;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int64_t file_size = static_cast<int64_t>(size);
  // A first tail of 16 bytes, as the engine's first ranged read would be (shorter).
  size_t tail_size = std::min<size_t>(size, 16);
  Result<ParquetTailProbe> probe =
      ReadParquetTail(file_size, fuzz::ExactCopy(data + size - tail_size, tail_size));
  for (int round = 0; round < 3 && probe.ok() && !probe->layout; ++round) {
    const int64_t needed = probe->tail_bytes_needed;
    HR_FUZZ_CHECK(needed > static_cast<int64_t>(tail_size) && needed <= file_size,
                  "asked for %lld tail bytes with %zu of a %zu-byte file",
                  static_cast<long long>(needed), tail_size, size);
    tail_size = static_cast<size_t>(needed);
    probe = ReadParquetTail(file_size, fuzz::ExactCopy(data + size - tail_size, tail_size));
  }
  const Result<ParquetLayout> whole = ReadParquetLayout(fuzz::ExactCopy(data, size));
  if (!probe.ok()) {
    const StatusCode code = probe.status().code();
    HR_FUZZ_CHECK(code == StatusCode::kCorruptData || code == StatusCode::kUnsupportedFormat, "%s",
                  probe.status().ToString().c_str());
    // (Codes may differ: the whole file also shows its head, "PAR1" for a cut file.)
    HR_FUZZ_CHECK(!whole.ok(), "the tail fails (%s), the whole file does not",
                  probe.status().ToString().c_str());
    return 0;
  }
  HR_FUZZ_CHECK(probe->layout.has_value(), "no layout after three rounds");
  const ParquetLayout& layout = *probe->layout;
  HR_FUZZ_CHECK(whole.ok() && whole->row_groups.size() == layout.row_groups.size() &&
                    whole->rows == layout.rows && whole->columns.size() == layout.columns.size(),
                "the whole file's layout differs from the tail's: %s",
                whole.status().ToString().c_str());

  int64_t rows = 0;
  const int64_t data_end = file_size - layout.footer_bytes;
  for (const ParquetRowGroup& g : layout.row_groups) {
    HR_FUZZ_CHECK(g.first_row == rows && g.rows >= 0, "row group rows");
    rows += g.rows;
    if (g.length == 0) continue;
    HR_FUZZ_CHECK(
        g.offset >= 4 && g.length > 0 && g.offset + g.length <= file_size && (g.offset < data_end),
        "row group range [%lld, +%lld) outside the data of a %zu-byte file",
        static_cast<long long>(g.offset), static_cast<long long>(g.length), size);
  }
  HR_FUZZ_CHECK(rows == layout.rows, "rows do not add up");

  std::vector<std::string> columns;
  for (const ParquetColumn& c : layout.columns) {
    if (c.kind != ParquetColumnKind::kUnsupported) columns.push_back(c.name);
  }
  if (columns.empty()) return 0;
  ParquetDecodeOptions options;
  options.max_uncompressed_bytes = 16 << 20;
  options.max_decode_bytes = 64 << 20;
  const size_t groups = std::min<size_t>(layout.row_groups.size(), 8);
  for (size_t i = 0; i < groups; ++i) {
    const ParquetRowGroup& g = layout.row_groups[i];
    const Buffer range = fuzz::ExactCopy(data + g.offset, static_cast<size_t>(g.length));
    const Result<ParquetRowGroupData> decoded =
        DecodeParquetRowGroup(layout, static_cast<int>(i), range, columns, options);
    if (!decoded.ok()) {
      const StatusCode code = decoded.status().code();
      HR_FUZZ_CHECK(code == StatusCode::kCorruptData || code == StatusCode::kUnsupportedFormat ||
                        code == StatusCode::kResourceExhausted,
                    "%s", decoded.status().ToString().c_str());
      continue;
    }
    HR_FUZZ_CHECK(decoded->rows == g.rows && decoded->columns.size() == columns.size(),
                  "decoded shape");
    for (const ParquetColumnValues& c : decoded->columns) {
      HR_FUZZ_CHECK(static_cast<int64_t>(c.values.size()) == g.rows, "column '%s': %zu values",
                    c.name.c_str(), c.values.size());
      for (const ParquetValue& v : c.values) {
        HR_FUZZ_CHECK(KindHolds(c.kind, c.list, v), "column '%s' holds a value of another kind",
                      c.name.c_str());
      }
    }
  }
  return 0;
}
