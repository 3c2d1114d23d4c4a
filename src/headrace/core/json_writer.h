// JsonWriter: builds a JSON document as a string.
//
// Hand-written because the JSON library the project uses (simdjson) only parses; the
// reports need a few dozen fields, which does not justify a second JSON dependency.
// The writer handles commas and string escaping; callers nest Begin/End correctly.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/strings.h"

namespace headrace {

class JsonWriter {
 public:
  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }

  // The key of the next value inside an object.
  JsonWriter& Key(std::string_view key) {
    Separate();
    AppendString(key);
    out_ += indent_ ? ": " : ":";
    after_key_ = true;
    return *this;
  }
  JsonWriter& String(std::string_view v) {
    return Value([&] { AppendString(v); });
  }
  JsonWriter& Int(int64_t v) {
    return Value([&] { out_ += std::to_string(v); });
  }
  JsonWriter& Bool(bool v) {
    return Value([&] { out_ += v ? "true" : "false"; });
  }
  JsonWriter& Null() {
    return Value([&] { out_ += "null"; });
  }
  JsonWriter& Double(double v) {
    return Value([&] {
      if (!std::isfinite(v)) {
        out_ += "null";
        return;
      }
      char buf[32];
      // Shortest text that reads back as the same double.
      auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
      out_.append(buf, end);
    });
  }

  // Pretty-prints with two-space indentation when on.
  explicit JsonWriter(bool pretty = true) : indent_(pretty) {}
  const std::string& str() const { return out_; }

 private:
  template <typename F>
  JsonWriter& Value(F&& write) {
    Separate();
    write();
    return *this;
  }
  JsonWriter& Open(char c) {
    Separate();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& Close(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) Newline();
    out_ += c;
    return *this;
  }
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    Newline();
  }
  void Newline() {
    if (!indent_) return;
    out_ += '\n';
    out_.append(first_.size() * 2, ' ');
  }
  void AppendString(std::string_view s) {
    // Valid UTF-8 whatever the bytes (a name from a tar shard or a file system may not
    // be): each invalid subsequence becomes U+FFFD, so the document always parses.
    std::string sanitized;
    if (SanitizeUtf8(s, &sanitized)) s = sanitized;
    out_ += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += static_cast<char>(c);
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
  bool indent_;
};

}  // namespace headrace
