// Sample: one record of a dataset as it moves through the engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "headrace/core/buffer.h"
#include "headrace/core/status.h"

namespace headrace {

// Who speaks a conversation turn.
enum class Role {
  kSystem,     // instructions before the conversation; never trained on
  kUser,       // the human turn ("from": "human"/"user")
  kAssistant,  // the model's turn ("from": "gpt"/"assistant"): the SFT loss covers these
};

struct Turn {
  Role role = Role::kUser;
  std::string text;
};

// A parsed manifest record. Immutable after the manifest is loaded; shared by all epochs.
struct SampleRecord {
  std::string id;
  // Resolved location of the media (an absolute path today, a URI once object storage
  // exists); empty when the record has no media.
  std::string media_uri;
  std::vector<Turn> turns;
  // Not ok when the manifest line could not be parsed or resolved; the sample then fails
  // with this status whenever an epoch reaches it, so errors keep their (epoch, index).
  Status status;
  // 1-based line number in the manifest, for messages.
  int64_t line = 0;
};

// One sample in flight: which record, in which epoch, with its fetched bytes.
struct Sample {
  int64_t epoch = 0;
  int64_t index = 0;  // position in the dataset (the manifest line order), not in the epoch
  const SampleRecord* record = nullptr;
  Buffer media;  // encoded bytes as read from storage; decoders read them in place
};

// A sample that was skipped, with enough to find it again.
struct SampleError {
  int64_t epoch = 0;
  int64_t index = 0;
  std::string uri;
  Status status;  // status.code() names the kind

  // "epoch 0, index 17, /data/images/000017.jpg: corrupt_data: ..."
  std::string ToString() const;
};

}  // namespace headrace
