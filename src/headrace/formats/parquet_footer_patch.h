// Hostile Parquet files for tests and fuzz seeds (formats/*_test.cc, fuzz/make_seeds.cc):
// a footer that lies about a field, rewritten in place. Not used by the engine.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "headrace/core/buffer.h"

namespace headrace {

// A Parquet file whose footer says something else: every i64 field at `path` (Thrift
// field ids from FileMetaData down; list elements are transparent) set to `value`, the
// footer's length rewritten to match. {3}: the file's rows; {4, 3}: each row group's rows;
// {4, 1, 3, 5}: each column chunk's values; {4, 1, 3, 9}: each chunk's first data page.
// The footer is Thrift's compact protocol, walked here just enough to find the fields.
class FooterPatcher {
 public:
  // An empty Buffer when the footer has no such field (or does not walk).
  static Buffer SetI64(const Buffer& file, std::vector<int16_t> path, int64_t value) {
    const size_t n = file.size();
    uint32_t footer_len = 0;
    std::memcpy(&footer_len, file.data() + n - 8, 4);
    const size_t footer_begin = n - 8 - footer_len;
    FooterPatcher walk(file.data() + footer_begin, footer_len, std::move(path));
    std::vector<int16_t> at;
    walk.Struct(at);
    if (walk.hits_.empty() || walk.failed_) return {};
    std::string out(reinterpret_cast<const char*>(file.data()), footer_begin);
    size_t copied = 0;
    for (const auto& [begin, end] : walk.hits_) {
      out.append(reinterpret_cast<const char*>(file.data() + footer_begin + copied), begin - copied);
      uint64_t z = (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
      do {
        const auto byte = static_cast<uint8_t>(z & 0x7f);
        z >>= 7;
        out.push_back(static_cast<char>(z != 0 ? byte | 0x80 : byte));
      } while (z != 0);
      copied = end;
    }
    out.append(reinterpret_cast<const char*>(file.data() + footer_begin + copied),
               footer_len - copied);
    const auto new_len = static_cast<uint32_t>(out.size() - footer_begin);
    out.append(reinterpret_cast<const char*>(&new_len), 4).append("PAR1");
    return *Buffer::CopyOf(out.data(), out.size());
  }

 private:
  FooterPatcher(const uint8_t* in, size_t size, std::vector<int16_t> target)
      : in_(in), end_(size), target_(std::move(target)) {}
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (pos_ >= end_) return failed_ = true, 0;
      const uint8_t b = in_[pos_++];
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
  }
  void Struct(std::vector<int16_t>& path) {
    int16_t last = 0;
    while (!failed_) {
      if (pos_ >= end_) {
        failed_ = true;
        return;
      }
      const uint8_t b = in_[pos_++];
      if (b == 0) return;
      const int delta = b >> 4;
      const uint64_t raw = delta != 0 ? 0 : Varint();
      const auto id = static_cast<int16_t>(delta != 0 ? last + delta
                                                      : static_cast<int64_t>(raw >> 1) ^ -static_cast<int64_t>(raw & 1));
      last = id;
      path.push_back(id);
      Value(b & 0x0f, path);
      path.pop_back();
    }
  }
  void Element(int type, std::vector<int16_t>& path) {
    if (type == 1 || type == 2) {
      ++pos_;  // a bool in a list is a byte of its own
    } else {
      Value(type, path);
    }
  }
  void Value(int type, std::vector<int16_t>& path) {
    if (pos_ >= end_) {
      failed_ = true;
      return;
    }
    switch (type) {
      case 1: case 2: return;  // a bool field's value is its header
      case 3: ++pos_; return;
      case 4: case 5: Varint(); return;
      case 6: {
        const size_t begin = pos_;
        Varint();
        if (path == target_) hits_.emplace_back(begin, pos_);
        return;
      }
      case 7: pos_ += 8; return;
      case 8: pos_ += Varint(); return;
      case 9: case 10: {
        const uint8_t header = in_[pos_++];
        uint64_t count = header >> 4;
        if (count == 15) count = Varint();
        for (uint64_t i = 0; i < count && !failed_; ++i) Element(header & 0x0f, path);
        return;
      }
      case 11: {
        const uint64_t count = Varint();
        if (count == 0) return;
        const uint8_t types = in_[pos_++];
        for (uint64_t i = 0; i < count && !failed_; ++i) {
          Element(types >> 4, path);
          Element(types & 0x0f, path);
        }
        return;
      }
      case 12: Struct(path); return;
      default: failed_ = true; pos_ = end_; return;
    }
  }
  const uint8_t* in_;
  size_t end_;
  size_t pos_ = 0;
  bool failed_ = false;
  std::vector<int16_t> target_;
  std::vector<std::pair<size_t, size_t>> hits_;
};


}  // namespace headrace
