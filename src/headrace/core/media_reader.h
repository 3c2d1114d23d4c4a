// MediaReader: random access to an object a sample's chain reads in byte ranges rather
// than whole (video.decode `read: ranges`: the index, then the stretches of the frames
// wanted). The engine hands one to the chain in place of the object's bytes
// (Sample::Item::reader); io/ranged_reader.h reads through a Storage.
//
// Contract: Read blocks the calling thread (a CPU worker) until the bytes are in, so an
// op plans first: Prefetch issues every range it will need at once, and its Reads then
// wait for those, one round trip for them all. A Read that no prefetched range covers
// is read then (an unplanned read: counted, so a test can tell a plan that fell short).
// Ranges are held until the reader goes (with its sample): at most the object's bytes,
// as each byte is read once.
#pragma once

#include <cstdint>
#include <span>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {

class MediaReader {
 public:
  struct Range {
    int64_t offset = 0;
    int64_t length = 0;
  };
  struct Stats {
    int64_t requests = 0;   // ranged reads issued
    int64_t bytes = 0;      // bytes they brought, once in (a head past a short object's end
                            // brings the object)
    int64_t unplanned = 0;  // of the requests, those a Read issued (no prefetch covered it)
  };

  virtual ~MediaReader() = default;
  // The object's size in bytes.
  virtual int64_t size() const = 0;
  // Starts reading `ranges` (clipped to the object; the parts already held or in flight
  // are not read again) and returns at once.
  virtual void Prefetch(std::span<const Range> ranges) = 0;
  // The object's bytes from `offset`: at least one and at most `length` (fewer where a
  // range read ends), waiting for the read that holds them; an empty buffer at or past
  // the end. A failed read's error (kCancelled once the run stops).
  virtual Result<Buffer> Read(int64_t offset, int64_t length) = 0;
  // Exactly `length` bytes from `offset` (fewer only at the end of the object), in one
  // buffer: a copy when they span two range reads.
  Result<Buffer> ReadExact(int64_t offset, int64_t length);
  virtual Stats stats() const = 0;
};

}  // namespace headrace
