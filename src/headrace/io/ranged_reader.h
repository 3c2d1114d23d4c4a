// A MediaReader (core/media_reader.h) over a Storage: an object read in ranges.
//
//   OpenRangedReaderAsync ── SizeAsync + ReadRange(head) at once; then, for an MP4 whose
//                            head shows its index after the media data, that index;
//                            done(reader) once they are in (a storage thread)
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
#include <functional>
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

using ReaderCallback = std::function<void(Result<std::shared_ptr<MediaReader>>)>;

// Opens a reader without blocking: its size and head at once, and an MP4's index when the
// head shows it after the media data (the end of a file written without faststart);
// `done` (once, on a storage thread or inline) when they are in, with the reader or the
// size's error (kNotFound for a missing object, kCancelled once the run
// stops). A failed head or tail fails the Read that needs it. `storage` must outlive the
// reader's reads (the engine's does).
void OpenRangedReaderAsync(Storage& storage, std::string uri, const RangedReaderOptions& options,
                           ReaderCallback done);
// The same, waiting for it (one round trip, two for an index at the end).
Result<std::shared_ptr<MediaReader>> OpenRangedReader(Storage& storage, std::string uri,
                                                      const RangedReaderOptions& options = {});

}  // namespace headrace
