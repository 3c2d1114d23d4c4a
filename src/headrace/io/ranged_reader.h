// A MediaReader (core/media_reader.h) over a Storage: an object read in ranges.
//
//   OpenRangedReader ── SizeAsync + ReadRange(head) at once, waits for the size ──▶ reader
//   Prefetch(ranges) ── a ReadRangeAsyncGated per stretch not held or in flight
//   Read(offset)     ── waits for the range read that holds it, else reads
//                       [offset, offset + read_ahead) now (unplanned)
//
// Ranges never overlap (a new read stops where one held or in flight starts), so the
// reader holds at most the object's bytes. Reads are not charged to the engine's I/O
// budget: the op that reads holds them for its sample's run, at most one object's bytes
// per CPU thread (the allowance exec/README.md documents). The storage's own limit
// (storage.max_object_bytes) applies to each range.
// Once `stop` is requested, reads in flight are given up (kReadStillWanted) and Read
// returns kCancelled.
#pragma once

#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>

#include "headrace/core/media_reader.h"
#include "headrace/io/storage.h"

namespace headrace {

struct RangedReaderOptions {
  int64_t head_bytes = 64 << 10;   // read with the size: a container's header is there
  int64_t read_ahead = 256 << 10;  // an unplanned read's least length
  std::stop_token stop = {};
};

// Blocks for one round trip (the size; the head is read meanwhile). `storage` must
// outlive the reader's reads (the engine's does).
Result<std::shared_ptr<MediaReader>> OpenRangedReader(Storage& storage, std::string uri,
                                                      const RangedReaderOptions& options = {});

}  // namespace headrace
