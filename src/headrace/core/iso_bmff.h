// ISO BMFF (MP4, MOV) box headers, for the few places that look at an MP4's layout
// before FFmpeg parses it: the edit-list bound (ops/av), the index found through a
// reader (ops/av) and the index a ranged reader asks for at open (io/ranged_reader).
// Sizes and types only; the boxes' contents are FFmpeg's to read.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace headrace {

struct BoxHeader {
  uint64_t size = 0;  // the whole box, header included
  int header = 8;     // 8, or 16 with a 64-bit size
  char type[4] = {};
  bool is(std::string_view t) const { return t.size() == 4 && std::memcmp(type, t.data(), 4) == 0; }
};

// The header of the box at `p`, of which `avail` bytes are at hand and which may run
// `remaining` bytes (to the end of what encloses it; a size of 0 means all of them).
// nullopt when the bytes at hand are too few or the size is impossible (damaged).
inline std::optional<BoxHeader> ParseBoxHeader(const uint8_t* p, uint64_t avail,
                                               uint64_t remaining) {
  const auto be32 = [](const uint8_t* q) {
    return (uint64_t{q[0]} << 24) | (uint64_t{q[1]} << 16) | (uint64_t{q[2]} << 8) | q[3];
  };
  if (avail < 8) return std::nullopt;
  BoxHeader box;
  box.size = be32(p);
  std::memcpy(box.type, p + 4, 4);
  if (box.size == 1) {
    if (avail < 16) return std::nullopt;
    box.size = (be32(p + 8) << 32) | be32(p + 12);
    box.header = 16;
  } else if (box.size == 0) {
    box.size = remaining;
  }
  if (box.size < static_cast<uint64_t>(box.header) || box.size > remaining) return std::nullopt;
  return box;
}

}  // namespace headrace
