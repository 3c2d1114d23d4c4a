// The chat turns of a conversation as JSON, for every source that holds one: a manifest
// line's `conversations` array, a shard's `.json` member. Internal to formats/ (it
// exposes simdjson's DOM types).
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/formats/source_spec.h"

namespace headrace {

// Appends the turns of `conv` (the JSON value of key `key`) to `out`. Each turn must be
// an object with string fields spec.role_field and spec.text_field and a known role.
// Errors (kMissingField, kBadRecord) start with `prefix` and name the turn, e.g.
// "line 3: 'conversations[1].from' is missing or not a string".
Status AppendTurns(simdjson::dom::element conv, const SourceSpec& spec, const std::string& key,
                   std::string_view prefix, std::vector<Turn>& out);

}  // namespace headrace
