#include "headrace/ops/op_plan.h"

#include <algorithm>

namespace headrace {

const ValueHints::Need* ValueHints::Find(std::string_view name) const {
  for (const auto& [n, need] : hints_) {
    if (n == name) return &need;
  }
  return nullptr;
}

SizeHint ValueHints::Get(std::string_view name) const {
  const Need* need = Find(name);
  return need != nullptr ? need->size : SizeHint{};
}

void ValueHints::Set(std::string_view name, SizeHint hint) {
  if (Need* need = Find(name)) {
    *need = Need{hint, {}};
    return;
  }
  hints_.emplace_back(std::string(name), Need{hint, {}});
}

void ValueHints::Clear(std::string_view name) { Set(name, SizeHint{}); }

AudioWindowHint ValueHints::Window(std::string_view name) const {
  const Need* need = Find(name);
  return need != nullptr ? need->window : AudioWindowHint{};
}

void ValueHints::ReadWindow(std::string_view name, AudioWindowHint window) {
  if (Find(name) != nullptr) {
    Clear(name);
    return;
  }
  hints_.emplace_back(std::string(name), Need{{}, window});
}

Status PlanContext::Error(std::string_view what) const {
  return Status::InvalidArgument(key() + ": " + std::string(what));
}

int PlanContext::Find(std::string_view name) const {
  for (size_t v = 0; v < state_.values.size(); ++v) {
    if (state_.values[v].name == name) return static_cast<int>(v);
  }
  return -1;
}

namespace {

std::string Available(const PlanState& state) {
  std::string out;
  for (const PlanValue& v : state.values) {
    if (!out.empty()) out += ", ";
    out += "'" + v.name + "' (" + DescribeValue(v.desc) + ")";
  }
  return out.empty() ? "none" : out;
}

}  // namespace

Status CheckSameGeometry(const PatchGeometry& mine, const PatchGeometry& earlier,
                         std::string_view why) {
  const auto named = [](const PatchGeometry& g, const char* key, int value) {
    return g.key + "." + key + " " + std::to_string(value) +
           (g.preset.empty() ? std::string() : " (preset " + g.preset + ")");
  };
  const std::pair<const char*, std::pair<int, int>> sizes[] = {
      {"patch_size", {mine.patch_size, earlier.patch_size}},
      {"merge_size", {mine.merge_size, earlier.merge_size}}};
  for (const auto& [key, values] : sizes) {
    const auto [a, b] = values;
    if (a == 0 || b == 0 || a == b) continue;
    return Status::InvalidArgument(named(mine, key, a) + " disagrees with " +
                                   named(earlier, key, b) + ": " + std::string(why) +
                                   "; give both the same value (or the same preset)");
  }
  return Status::Ok();
}

std::string DescribeValue(const ValueDesc& desc) {
  if (desc.items == 0) return std::string(ValueKindName(desc.kind));
  return "a list of up to " + std::to_string(desc.items) + " items, each " +
         std::string(ValueKindName(desc.kind));
}

Result<ValueDesc> PlanContext::Read(std::string_view name, ValueKind kind) {
  int v = Find(name);
  if (v < 0 && state_.synthesize_inputs) {
    PlanValue synth{std::string(name), ValueDesc{kind, {}, ""}, "the test", -1, -1, false};
    if (kind == ValueKind::kImage) {
      synth.desc.shape = {kSynthImageHeight, kSynthImageWidth, 4};
      synth.desc.shape_source = "the test image";
    } else if (kind == ValueKind::kAudio) {
      synth.desc.shape = {1, -1};
      synth.desc.rate = kSynthAudioRate;
      synth.desc.shape_source = "the test audio";
    } else if (kind == ValueKind::kPoints) {
      synth.desc.shape = {-1, kPointChannels};
      synth.desc.shape_source = "the test point cloud";
    }
    state_.values.push_back(std::move(synth));
    v = static_cast<int>(state_.values.size()) - 1;
  }
  const std::string quoted = "'" + std::string(name) + "'";
  if (v < 0) {
    return Error("reads " + quoted + " as " + std::string(ValueKindName(kind)) +
                 ", but no value " + quoted + " exists at this point (values: " +
                 Available(state_) + ")");
  }
  PlanValue& value = state_.values[static_cast<size_t>(v)];
  if (value.desc.kind != kind) {
    std::string message = "reads " + quoted + " as " + std::string(ValueKindName(kind)) +
                          ", but at this point " + quoted + " is " +
                          DescribeValue(value.desc) + " (from " + value.written_by + ")";
    const std::string made_by =
        state_.producer_of ? state_.producer_of(value.desc.kind, kind) : std::string();
    if (!made_by.empty()) message += ": add " + made_by + " before it";
    return Error(message);
  }
  // An op runs either once per sample or once per item of one list: what it reads must
  // agree. (Mixing would need a per-item view of a single value, which no op wants yet.)
  PlanOpRecord& op = record();
  if (value.list_field >= 0) {
    if (op.reads_single || (op.list_field >= 0 && op.list_field != value.list_field)) {
      return Error("reads " + quoted + ", " + DescribeValue(value.desc) +
                   ", together with a value that is not an item of that list: an op runs "
                   "once per item of one list, or once per sample");
    }
    op.list_field = value.list_field;
    op.items = value.desc.items;
  } else if (op.list_field >= 0) {
    return Error("reads " + quoted + ", a single value, together with a list's items: an op "
                 "runs once per item of one list, or once per sample");
  } else {
    op.reads_single = true;
  }
  value.read = true;
  if (value.source_field >= 0) {
    const auto field = static_cast<size_t>(value.source_field);
    if (state_.source_slots.size() <= field) state_.source_slots.resize(field + 1, -1);
    state_.source_slots[field] = v;
    if (state_.source_reads.size() <= field) state_.source_reads.resize(field + 1, 0);
    ++state_.source_reads[field];
  }
  op.reads.emplace_back(std::string(name), v);
  op.inputs.push_back(value.desc);
  return value.desc;
}

void PlanContext::ReadInRanges(std::string_view name) {
  const int v = Find(name);
  if (v < 0) return;
  const PlanValue& value = state_.values[static_cast<size_t>(v)];
  if (value.source_field < 0 || value.list_field >= 0) return;
  const auto field = static_cast<size_t>(value.source_field);
  if (state_.ranged_sources.size() <= field) state_.ranged_sources.resize(field + 1, false);
  state_.ranged_sources[field] = true;
}

std::vector<std::string> PlanContext::ReadEvery(ValueKind kind) {
  std::vector<std::string> names;
  for (const PlanValue& v : state_.values) {
    if (v.desc.kind == kind && v.list_field < 0) names.push_back(v.name);
  }
  for (const std::string& n : names) (void)Read(n, kind);
  return names;
}

Status PlanContext::Write(std::string_view name, ValueDesc desc) {
  int v = Find(name);
  if (v >= 0) {
    const PlanValue& old = state_.values[static_cast<size_t>(v)];
    if (old.writer >= 0 && !old.read) {
      return Status::InvalidArgument(old.written_by + ": writes '" + old.name +
                                     "', which no later op reads before " + key() +
                                     " replaces it: its work would be thrown away");
    }
  } else {
    state_.values.push_back(PlanValue{std::string(name), {}, "", -1, -1, false});
    v = static_cast<int>(state_.values.size()) - 1;
  }
  // A geometry note holds only for the shape its op set (ValueDesc::geometry).
  if (desc.geometry.known() && desc.shape_source.rfind(desc.geometry.key + ".", 0) != 0) {
    desc.geometry = {};
  }
  PlanValue& value = state_.values[static_cast<size_t>(v)];
  value.desc = std::move(desc);
  value.written_by = key();
  value.writer = op_;
  value.source_field = -1;
  value.list_field = -1;
  value.read = false;
  record().writes.emplace_back(std::string(name), v);
  return Status::Ok();
}

void PlanContext::FinishDeclare() {
  const PlanOpRecord& op = record();
  if (op.list_field < 0) return;
  for (const auto& [name, slot] : op.writes) {
    PlanValue& value = state_.values[static_cast<size_t>(slot)];
    value.desc.items = op.items;
    value.list_field = op.list_field;
  }
  const auto list = static_cast<size_t>(op.list_field);
  const bool pad = list < state_.pad_items.size() && state_.pad_items[list];
  // The list's `<list>_count` (the planner adds it: AddItemCounts) tells whose the
  // concatenated items are.
  const std::string count = list < state_.list_counts.size() ? state_.list_counts[list] : "";
  for (const auto& [name, row] : op.fields) {
    FieldSpec& field = state_.fields[static_cast<size_t>(row)];
    if (field.layout == FieldLayout::kRagged) {  // an entry per item
      field.count_field = count;
      state_.fields[static_cast<size_t>(row) + 1].count_field = count;  // its lengths
    } else if (pad) {
      field.sample_shape.insert(field.sample_shape.begin(), op.items);
    } else {
      field.layout = FieldLayout::kItems;
      field.count_field = count;
    }
  }
}

int PlanState::AddFieldRow(FieldSpec field, std::string size_source, std::string writer) {
  if (!layout.empty()) {
    for (size_t row = 0; row < fields.size(); ++row) {
      if (fields[row].name != field.name) continue;
      // As this chain declares it (FinishDeclare resolves it again); its lengths, if
      // ragged, follow it already.
      const bool ragged = field.layout == FieldLayout::kRagged;
      fields[row] = std::move(field);
      rows_written.push_back(static_cast<int>(row));
      if (ragged) rows_written.push_back(static_cast<int>(row) + 1);
      return static_cast<int>(row);
    }
  }
  const bool ragged = field.layout == FieldLayout::kRagged;
  const std::string name = field.name;
  const int row = static_cast<int>(fields.size());
  field_writers.push_back(writer);
  fields.push_back(std::move(field));
  field_sources.push_back(size_source);
  rows_written.push_back(row);
  if (ragged) {
    rows_written.push_back(row + 1);
    // Not one of the op's own fields: the assemble stage writes it (FieldLayout::kLengths).
    fields.push_back(FieldSpec{LengthsName(name), DType::kI32, {}, FieldLayout::kLengths});
    field_writers.push_back(writer + " (the rows of each of '" + name + "''s entries)");
    field_sources.push_back(std::move(size_source));
  }
  return row;
}

void PlanContext::AddField(FieldSpec field, std::string size_source, std::string writer) {
  if (writer.empty()) writer = key();
  const std::string name = field.name;
  const int row = state_.AddFieldRow(std::move(field), std::move(size_source), std::move(writer));
  record().fields.emplace_back(name, row);
}

Result<FieldRead> PlanContext::ReadField(std::string_view name, const FieldSpec* synthetic) {
  for (int op = 0; op < op_; ++op) {
    const PlanOpRecord& r = state_.ops[static_cast<size_t>(op)];
    for (const auto& [n, row] : r.fields) {
      if (n != name) continue;
      FieldRead out;
      out.row = row;
      out.spec = state_.fields[static_cast<size_t>(row)];
      out.items = r.list_field >= 0 ? r.items : 0;
      out.writer = r.key;
      out.geometry = r.geometry;
      auto& reads = record().field_reads;
      if (std::find(reads.begin(), reads.end(), std::pair(std::string(name), row)) ==
          reads.end()) {
        reads.emplace_back(std::string(name), row);
      }
      return out;
    }
  }
  // Written only by other chains of the batch layout (PlanState::layout): this chain's
  // samples have none of it. A concatenated field has no rows for them; a fixed one would
  // be a row of zeros that reads as a real value (a grid of 0 x 0 x 0), so it is refused.
  for (size_t row = 0; row < state_.layout.size(); ++row) {
    const PlanState::LayoutField& shared = state_.layout[row];
    if (state_.fields[row].name != name || shared.this_chain) continue;
    const FieldSpec& spec = state_.fields[row];
    if (!spec.concatenated()) {
      return Error("reads the batch field '" + std::string(name) + "', which only " +
                   shared.writer + " writes: this chain's samples would read a row of zeros "
                   "as if it held a value. Declare the media it comes from as a list "
                   "(max_items: 1) in every entry, so that a sample without it has no items");
    }
    FieldRead out;
    out.row = static_cast<int>(row);
    out.spec = spec;
    out.items = shared.items;
    out.writer = shared.writer;
    out.geometry = shared.geometry;
    record().field_reads.emplace_back(std::string(name), out.row);
    return out;
  }
  if (state_.synthesize_inputs && synthetic != nullptr) {
    FieldRead out;
    out.writer = "the test";
    for (const auto& [n, row] : record().field_reads) {  // made up by an earlier call
      if (n != name) continue;
      out.row = row;
      out.spec = state_.fields[static_cast<size_t>(row)];
      return out;
    }
    out.row = static_cast<int>(state_.fields.size());
    out.spec = *synthetic;
    out.spec.name = std::string(name);
    state_.fields.push_back(out.spec);
    state_.field_writers.push_back(out.writer);
    state_.field_sources.push_back(out.writer);
    if (out.spec.layout == FieldLayout::kRagged) {
      state_.fields.push_back(FieldSpec{LengthsName(name), DType::kI32, {}, FieldLayout::kLengths});
      state_.field_writers.push_back(out.writer);
      state_.field_sources.push_back(out.writer);
    }
    record().field_reads.emplace_back(std::string(name), out.row);
    return out;
  }
  std::string fields;
  for (int op = 0; op < op_; ++op) {
    for (const auto& [n, row] : state_.ops[static_cast<size_t>(op)].fields) {
      fields += (fields.empty() ? "'" : ", '") + n + "'";
    }
  }
  return Error("reads the batch field '" + std::string(name) +
               "', which no op before it writes (fields so far: " +
               (fields.empty() ? std::string("none") : fields) + ")");
}

void PlanContext::SetGeometry(PatchGeometry geometry) { record().geometry = std::move(geometry); }

int PlanContext::slot(std::string_view name) const {
  for (const auto& [n, s] : record().writes) {
    if (n == name) return s;
  }
  for (const auto& [n, s] : record().reads) {
    if (n == name) return s;
  }
  return -1;
}

int PlanContext::row(std::string_view field) const {
  for (const auto& [n, r] : record().fields) {
    if (n == field) return r;
  }
  for (const auto& [n, r] : record().field_reads) {
    if (n == field) return r;
  }
  return -1;
}

const ValueDesc* PlanContext::input(std::string_view name) const {
  const PlanOpRecord& r = record();
  for (size_t i = 0; i < r.reads.size(); ++i) {
    if (r.reads[i].first == name) return &r.inputs[i];
  }
  return nullptr;
}

Result<Buffer> PlanContext::ReadFile(std::string_view param, const std::string& uri) const {
  // "ops[4]: text.tokenize.model: cannot read '...'": the key as config errors write it.
  const size_t dot = key().find('.');
  const std::string where = key().substr(0, dot) + ": " + key().substr(dot + 1) + "." +
                            std::string(param);
  if (!state_.read_file) {
    return Status::Internal(where + ": no file reader while planning");
  }
  Result<Buffer> read = state_.read_file(uri);
  if (read.ok()) return read;
  // A missing file is a mistake in the config, like any other bad key; other failures
  // (denied, endpoint down) keep their code.
  const StatusCode code = read.status().code() == StatusCode::kNotFound
                              ? StatusCode::kInvalidArgument
                              : read.status().code();
  return Status(code, where + ": cannot read '" + uri + "': " + read.status().message());
}

}  // namespace headrace
