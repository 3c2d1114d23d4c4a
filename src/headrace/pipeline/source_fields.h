// The source's own fields in the batch: what a record carries besides its media and
// conversation (source.fields of kind int, float, text, string), and each sample's id.
//
// Scalars become tensors: an int field [B] (int64), a float field [B] (float32); a list
// field (max_items N) [B, N], zero-padded, plus `<name>_count` [B] (int64) with each
// sample's number of items. They are written by a pass-through op at the end of the
// chain. Strings (text and string fields, and the record id as "id") are collected by
// the engine into Batch::strings: a list per batch (a list of lists for a list field).
#pragma once

#include "headrace/formats/materialized.h"
#include "headrace/formats/source_spec.h"
#include "headrace/pipeline/plan.h"

namespace headrace {

// Appends the scalar fields (and the op that writes them) and the string fields of
// `spec`'s source to `plan`. A single (not list) scalar field a record lacks fails that
// sample with kMissingField: a batch tensor has no "absent" value (give it a list of
// max_items 1 to get a count instead).
void AddSourceFields(const SourceSpec& spec, PipelinePlan& plan);

// The plan of a materialized source (source.materialized): its batch fields and strings
// as materialized.json declares them, and one pass-through op ("source.materialized")
// that copies each field's .npy row (the sample's media items, in field order) into
// the batch. No value slots: there is no chain to run.
PipelinePlan MaterializedPlan(const MaterializedInfo& info);

}  // namespace headrace
