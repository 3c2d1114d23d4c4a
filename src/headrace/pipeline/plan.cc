#include "headrace/pipeline/plan.h"

#include <algorithm>
#include <limits>
#include <map>

#include "headrace/ops/absent_fields.h"
#include "headrace/ops/for_each_item.h"
#include "headrace/ops/schema.h"
#include "headrace/pipeline/op_types.h"
#include "headrace/pipeline/plan_chains.h"
#include "headrace/pipeline/source_fields.h"

namespace headrace {

namespace planning {

// --- the passes ------------------------------------------------------------------------

// A field read back (PlanContext::ReadField) must be written before its reader runs. An
// op over a list runs at the place of the list's last op (GroupListOps), so no op of the
// writer's list may come after the reader.
Status CheckFieldReadOrder(const PlanState& state) {
  for (size_t reader = 0; reader < state.ops.size(); ++reader) {
    for (const auto& [name, row] : state.ops[reader].field_reads) {
      // A copy: clang before 16 (make fuzz's) refuses a structured binding in a lambda.
      const auto read_row = row;
      const auto writer = std::find_if(state.ops.begin(), state.ops.end(), [&](const auto& op) {
        return std::any_of(op.fields.begin(), op.fields.end(),
                           [&](const auto& f) { return f.second == read_row; });
      });
      if (writer == state.ops.end() || writer->list_field < 0) continue;
      for (size_t later = reader + 1; later < state.ops.size(); ++later) {
        if (state.ops[later].list_field != writer->list_field) continue;
        return Status::InvalidArgument(
            state.ops[reader].key + ": reads the batch field '" + name + "', which " +
            writer->key + " writes per item of a list whose ops run together at the last of "
            "them, " + state.ops[later].key + ", after this op: move " +
            state.ops[later].key.substr(0, state.ops[later].key.find('.')) + " before it");
      }
    }
  }
  return Status::Ok();
}

// `keys[i]` names ops[i] in messages ("ops[2].image.resize", "source.mix[1].ops[0]...").
Status DeclareOps(const std::vector<OpSpec>& ops, const std::vector<std::string>& keys,
                  PlanState& state) {
  const size_t first = state.ops.size();
  state.ops.resize(first + ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const int position = static_cast<int>(first + i);
    state.ops[position].key = keys[i];
    PlanContext ctx(state, position);
    HR_RETURN_IF_ERROR(VisitOpType(ops[i], [&]<typename T>(const auto& spec) {
      HR_RETURN_IF_ERROR(T::Validate(spec, ctx.key()));
      return T::Declare(spec, ctx);
    }));
    ctx.FinishDeclare();
  }
  return CheckFieldReadOrder(state);
}

// Backward: each op's hints_after is what the ops after it need (ValueHints).
void HintOps(const std::vector<OpSpec>& ops, PlanState& state) {
  const size_t first = state.ops.size() - ops.size();
  ValueHints hints;
  for (size_t i = ops.size(); i-- > 0;) {
    PlanOpRecord& record = state.ops[first + i];
    record.hints_after = hints;
    VisitOpType(ops[i], [&]<typename T>(const auto& spec) {
      if constexpr (requires { T::Hint(spec, hints, 0); }) {
        T::Hint(spec, hints, static_cast<int>(first + i));
      } else if constexpr (requires { T::Hint(spec, hints); }) {
        T::Hint(spec, hints);
      } else {
        for (const auto& [name, slot] : record.reads) hints.Clear(name);
      }
    });
  }
}

// An op made once and run by several chains (the shared ops of a blend whose entries have
// ops of their own, where the op's declaration is the same in each chain: MakeSharedOps).
// Ops are immutable and thread-safe, so one instance serves them all, and a tokenizer is
// loaded once, not once per entry.
class SharedOp final : public Op {
 public:
  explicit SharedOp(std::shared_ptr<const Op> op) : op_(std::move(op)) {}
  std::string_view name() const override { return op_->name(); }
  Status Run(SampleContext& ctx) const override { return op_->Run(ctx); }

 private:
  std::shared_ptr<const Op> op_;
};

// Ops [from, ...) of `ops` made where shared[i - from] is null; the others run the shared
// instance.
Status MakeOps(const std::vector<OpSpec>& ops, PlanState& state,
               std::vector<std::unique_ptr<Op>>* built, size_t from = 0,
               const std::vector<std::shared_ptr<const Op>>& shared = {}) {
  const size_t first = state.ops.size() - ops.size();
  for (size_t i = 0; i < ops.size(); ++i) {
    if (i >= from && i - from < shared.size() && shared[i - from] != nullptr) {
      built->push_back(std::make_unique<SharedOp>(shared[i - from]));
      continue;
    }
    PlanContext ctx(state, static_cast<int>(first + i));
    Result<std::unique_ptr<Op>> op = VisitOpType(
        ops[i], [&]<typename T>(const auto& spec) { return T::Make(spec, ctx); });
    HR_RETURN_IF_ERROR(op.status());
    built->push_back(*std::move(op));
  }
  return Status::Ok();
}

// The source's fields as the chain's first values: a media field's item as encoded
// bytes (a list field's items: a list value, each item encoded bytes), the
// conversation. Text and scalars are not values: they go to the batch as they are
// (source_fields.h).
void AddSourceValues(const std::vector<SourceField>& fields, PlanState& state) {
  state.pad_items.resize(fields.size());
  state.list_counts.resize(fields.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    state.pad_items[f] = fields[f].pad_items;
    if (IsMediaKind(fields[f].kind) && fields[f].max_items > 0) {
      state.list_counts[f] = fields[f].name + "_count";
    }
    ValueKind kind;
    if (IsMediaKind(fields[f].kind)) {
      kind = ValueKind::kEncoded;
    } else if (fields[f].kind == FieldKind::kConversation) {
      kind = ValueKind::kConversation;
    } else {
      continue;
    }
    PlanValue value{fields[f].name, ValueDesc{kind, {}, ""},
                    "the source field '" + fields[f].name + "'", -1, static_cast<int>(f),
                    false};
    if (IsMediaKind(fields[f].kind) && fields[f].max_items > 0) {
      value.desc.items = fields[f].max_items;
      value.list_field = static_cast<int>(f);
    }
    state.values.push_back(std::move(value));
  }
}

// One list whose items some ops run over: those ops (positions in the chain, in order),
// the slot its items are read from, and the row of its `<list>_count` field.
struct ListGroup {
  int field = -1;
  std::vector<int> ops;
  int slot = -1;
  int count_row = -1;
};

std::vector<ListGroup> ListGroups(const PlanState& state) {
  std::vector<ListGroup> groups;
  for (size_t i = 0; i < state.ops.size(); ++i) {
    const int field = state.ops[i].list_field;
    if (field < 0) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const ListGroup& g) { return g.field == field; });
    if (it == groups.end()) {
      groups.push_back(ListGroup{field, {}, -1, -1});
      it = groups.end() - 1;
    }
    it->ops.push_back(static_cast<int>(i));
  }
  for (ListGroup& g : groups) {
    const auto f = static_cast<size_t>(g.field);
    g.slot = f < state.source_slots.size() ? state.source_slots[f] : -1;
  }
  return groups;
}

// Each list whose ops write batch fields gets `<list>_count` (i64, per sample): how many
// items the sample has (of the batch's concatenated items, or of its [N, ...] padded
// ones, the rest being zeros).
void AddItemCounts(const std::vector<SourceField>& fields, PlanState& state) {
  for (const ListGroup& g : ListGroups(state)) {
    const bool writes_fields = std::any_of(g.ops.begin(), g.ops.end(), [&](int op) {
      return !state.ops[static_cast<size_t>(op)].fields.empty();
    });
    if (!writes_fields) continue;
    const std::string& list = fields[static_cast<size_t>(g.field)].name;
    const std::string source = "the source field '" + list + "' (its item count)";
    state.AddFieldRow(FieldSpec{list + "_count", DType::kI64, {}}, source, source);
  }
}

// Gathers each list's ops into one ForEachItemOp at the place of the last of them
// (ops/for_each_item.h says why this order is sound).
std::vector<std::unique_ptr<Op>> GroupListOps(const std::vector<SourceField>& fields,
                                              const PlanState& state,
                                              std::vector<std::unique_ptr<Op>> ops) {
  std::vector<ListGroup> groups = ListGroups(state);
  std::vector<std::unique_ptr<Op>> out;
  for (size_t i = 0; i < ops.size(); ++i) {
    const int field = state.ops[i].list_field;
    if (field < 0) {
      out.push_back(std::move(ops[i]));
      continue;
    }
    const ListGroup& g = *std::find_if(groups.begin(), groups.end(),
                                       [&](const ListGroup& x) { return x.field == field; });
    if (g.ops.back() != static_cast<int>(i)) continue;  // gathered at the last one
    ForEachItemOp::Options options;
    options.list = fields[static_cast<size_t>(field)].name;
    options.source_field = field;
    options.slot = g.slot;
    options.max_items = fields[static_cast<size_t>(field)].max_items;
    std::vector<std::unique_ptr<Op>> inner;
    for (int op : g.ops) {
      inner.push_back(std::move(ops[static_cast<size_t>(op)]));
      for (const auto& [name, row] : state.ops[static_cast<size_t>(op)].fields) {
        const FieldSpec& spec = state.fields[static_cast<size_t>(row)];
        // A ragged field's op appends its own rows, an entry per item.
        if (spec.layout == FieldLayout::kRagged) continue;
        const bool padded = spec.layout == FieldLayout::kFixed;
        options.fields.push_back(ForEachItemOp::ItemField{
            row,
            padded ? spec.sample_bytes() / static_cast<size_t>(options.max_items)
                   : spec.sample_bytes(),
            padded});
      }
    }
    for (size_t r = 0; r < state.fields.size(); ++r) {
      if (state.fields[r].name == options.list + "_count") options.count_row = static_cast<int>(r);
    }
    out.push_back(std::make_unique<ForEachItemOp>(std::move(options), std::move(inner)));
  }
  return out;
}

// Batch fields are found by name (Batch::Find, the Python batch dict): two fields of one
// name, or one named like the engine's own "index", would shadow each other.
Status CheckFieldNames(const std::vector<FieldSpec>& fields,
                       const std::vector<std::string>& writers) {
  std::map<std::string_view, size_t> seen;
  for (size_t f = 0; f < fields.size(); ++f) {
    const std::string& name = fields[f].name;
    const std::string& source = writers[f];
    if (name == "index") {
      return Status::InvalidArgument(source + ": the field name 'index' is the engine's own "
                                     "(each sample's dataset index): choose another name");
    }
    const auto [it, fresh] = seen.emplace(name, f);
    if (!fresh) {
      return Status::InvalidArgument(source + ": writes the field '" + name + "', which " +
                                     writers[it->second] +
                                     " writes too: batch field names must be unique");
    }
  }
  return Status::Ok();
}

// That the chain's work reaches the batch: no op's output is dropped unread. Plan time
// only: a config may be written (and validated) in parts.
Status CheckOutputsUsed(const PlanState& state) {
  for (const PlanValue& v : state.values) {
    if (v.writer >= 0 && !v.read) {
      return Status::InvalidArgument(v.written_by + ": writes '" + v.name +
                                     "', which no later op reads: its work would be thrown "
                                     "away");
    }
  }
  return Status::Ok();
}

}  // namespace planning

namespace {
using namespace planning;  // the passes, and the chains' (plan_chains.h)

// The source values a chain's ops read, which the engine fills before the chain runs;
// *reads_media when one is a media item.
std::vector<SourceValue> SourceValuesOf(const std::vector<SourceField>& fields,
                                        const PlanState& state, bool* reads_media) {
  std::vector<SourceValue> out;
  for (size_t f = 0; f < fields.size(); ++f) {
    if (state.source_slots.size() <= f || state.source_slots[f] < 0) continue;
    if (fields[f].max_items > 0 && IsMediaKind(fields[f].kind)) {
      *reads_media = true;  // ForEachItemOp fills its items, one at a time
      continue;
    }
    SourceValue value;
    value.field = static_cast<int>(f);
    value.slot = state.source_slots[f];
    if (fields[f].kind == FieldKind::kConversation) {
      value.from = SourceValue::From::kConversation;
    } else {
      value.from = SourceValue::From::kMedia;
      *reads_media = true;
    }
    out.push_back(value);
  }
  return out;
}

// Adds the chain's token sequences to the plan's; two chains that write one sequence
// field must pad it alike.
Status AddSequences(const std::vector<TokenSequence>& sequences,
                    std::vector<TokenSequence>& out) {
  for (const TokenSequence& s : sequences) {
    const auto it = std::find_if(out.begin(), out.end(),
                                 [&](const TokenSequence& t) { return t.field == s.field; });
    if (it == out.end()) {
      out.push_back(s);
    } else if (it->pad_id != s.pad_id || it->ignore_index != s.ignore_index ||
               it->vision_token_ids != s.vision_token_ids) {
      return Status::InvalidArgument(
          "the token field '" + s.field + "' is written by blend entries whose tokenizers "
          "differ (pad id " + std::to_string(it->pad_id) + " and " + std::to_string(s.pad_id) +
          "): one batch layout needs one tokenizer per token field");
    }
  }
  return Status::Ok();
}

}  // namespace

namespace internal {
Status PlanOps(const std::vector<OpSpec>& ops, PlanState& state,
               std::vector<std::unique_ptr<Op>>* built) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < ops.size(); ++i) keys.push_back(OpKey(state.ops.size() + i, ops[i]));
  HR_RETURN_IF_ERROR(DeclareOps(ops, keys, state));
  HintOps(ops, state);
  return MakeOps(ops, state, built);
}
}  // namespace internal

Status CheckOpChain(const PipelineSpec& spec) {
  HR_ASSIGN_OR_RETURN(DeclaredChains declared, DeclareChains(spec));
  // batch.pack needs an unpadded token field among the declared ones (a materialization's
  // fields are its own: checked when it is opened).
  const bool any_ops = std::any_of(declared.chains.begin(), declared.chains.end(),
                                   [](const ChainOps& c) { return !c.ops.empty(); });
  if (spec.batch.regroups() && any_ops) {
    const std::vector<FieldSpec>& fields =
        declared.layout ? declared.layout->fields : declared.states.front().fields;
    HR_RETURN_IF_ERROR(Packer::Make(fields, spec.batch.pack_options()).status());
  }
  return Status::Ok();
}

Result<PipelinePlan> PlanPipeline(const PipelineSpec& spec, Storage& storage) {
  HR_ASSIGN_OR_RETURN(DeclaredChains declared, DeclareChains(spec));
  const std::vector<SourceField> fields = SourceFieldsOf(spec.source);
  for (size_t c = 0; c < declared.chains.size(); ++c) {
    PlanState& state = declared.states[c];
    HR_RETURN_IF_ERROR(CheckOutputsUsed(state));
    state.read_file = [&storage](const std::string& uri) { return storage.Read(uri); };
    state.decode_bytes_per_thread = DecodeBytesPerThread(spec.memory);
    HintOps(declared.chains[c].ops, state);
  }
  HR_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const Op>> shared, MakeSharedOps(spec, declared));
  PipelinePlan plan;
  std::vector<std::string> writers;
  for (size_t c = 0; c < declared.chains.size(); ++c) {
    const ChainOps& ops_of = declared.chains[c];
    PlanState& state = declared.states[c];
    std::vector<std::unique_ptr<Op>> ops;
    HR_RETURN_IF_ERROR(MakeOps(ops_of.ops, state, &ops, ops_of.own, shared));
    OpChain& chain = plan.chains.emplace_back();
    chain.entry = ops_of.entry;
    if (declared.layout != nullptr) {
      // First: the shared ops see the fields the entry does not write as its samples have
      // them (a sequence's empty entry) before they run.
      HR_ASSIGN_OR_RETURN(std::unique_ptr<Op> absent,
                          AbsentFields(*declared.layout, c, ops_of.entry));
      if (absent != nullptr) chain.ops.push_back(std::move(absent));
    }
    for (std::unique_ptr<Op>& op : GroupListOps(fields, state, std::move(ops))) {
      chain.ops.push_back(std::move(op));
    }
    chain.num_values = static_cast<int>(state.values.size());
    chain.source_values = SourceValuesOf(fields, state, &plan.reads_media);
    // A field read in ranges (PlanContext::ReadInRanges) by the one op that reads it, in
    // a pipeline of one chain (a blend's entries read whole).
    if (declared.chains.size() == 1) {
      plan.ranged_fields.assign(fields.size(), false);
      for (size_t f = 0; f < fields.size() && f < state.ranged_sources.size(); ++f) {
        plan.ranged_fields[f] = state.ranged_sources[f] && fields[f].max_items == 0 &&
                                f < state.source_reads.size() && state.source_reads[f] == 1;
      }
    }
    HR_RETURN_IF_ERROR(AddSequences(state.sequences, plan.sequences));
    if (c == 0) {
      plan.fields = std::move(state.fields);
      plan.field_sources = std::move(state.field_sources);
      writers = std::move(state.field_writers);
    }
  }
  for (size_t i = 0; i < spec.batch_ops.size(); ++i) {
    const BatchOpSpec& b = spec.batch_ops[i];
    if (!b.make) {
      return Status::InvalidArgument("batch_ops[" + std::to_string(i) + "] " + b.name +
                                     ": no factory");
    }
    HR_ASSIGN_OR_RETURN(std::unique_ptr<BatchOp> op, b.make());
    plan.batch_ops.push_back(std::move(op));
  }
  // The source's scalar fields (and the op that writes them) and its strings.
  const size_t op_fields = plan.fields.size();
  AddSourceFields(spec.source, plan);
  for (size_t f = op_fields; f < plan.field_sources.size(); ++f) {
    writers.push_back(plan.field_sources[f]);
  }
  HR_RETURN_IF_ERROR(CheckFieldNames(plan.fields, writers));
  if (plan.fields.empty()) {
    return Status::InvalidArgument(
        "ops: the pipeline produces no batch field; add "
        "image.normalize or text.tokenize");
  }
  return plan;
}

Status CheckBatchFitsBudget(const PipelineSpec& spec, const PipelinePlan& plan,
                            int64_t batch_budget_bytes) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const auto mul = [](int64_t a, int64_t b) {
    int64_t out = 0;
    return __builtin_mul_overflow(a, b, &out) ? kMax : out;
  };
  const auto add = [](int64_t a, int64_t b) {
    int64_t out = 0;
    return __builtin_add_overflow(a, b, &out) ? kMax : out;
  };
  // Bytes of one sample, per source key (text.tokenize writes three fields); kMax when a
  // product overflows, which no budget can hold.
  std::map<std::string, int64_t> by_source;
  int64_t sample_bytes = static_cast<int64_t>(sizeof(int64_t));  // the engine's "index"
  for (size_t f = 0; f < plan.fields.size(); ++f) {
    // A concatenated field's bytes are known per batch (admission counts them as they
    // come: exec/engine.cc); the fixed ones must fit.
    if (plan.fields[f].concatenated()) continue;
    int64_t bytes = static_cast<int64_t>(DTypeSize(plan.fields[f].dtype));
    for (int64_t d : plan.fields[f].sample_shape) bytes = mul(bytes, d);
    const std::string& source = f < plan.field_sources.size() ? plan.field_sources[f]
                                                              : plan.fields[f].name;
    by_source[source] = add(by_source[source], bytes);
    sample_bytes = add(sample_bytes, bytes);
  }
  const int64_t batch_bytes = mul(sample_bytes, spec.batch.size);
  if (batch_bytes <= batch_budget_bytes) return Status::Ok();
  const auto largest =
      std::max_element(by_source.begin(), by_source.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  const std::string key = largest == by_source.end() ? std::string("batch.size") : largest->first;
  const std::string bytes_text =
      batch_bytes == kMax ? "more than " + std::to_string(kMax) : std::to_string(batch_bytes);
  return Status::InvalidArgument(
      key + ": a batch of " + std::to_string(spec.batch.size) + " samples would take " +
      bytes_text + " bytes, more than the " + std::to_string(batch_budget_bytes) +
      " that memory.budget_bytes " + std::to_string(spec.memory.budget_bytes) +
      " leaves for batches after execution.io_budget_bytes; lower it or batch.size, or "
      "raise memory.budget_bytes");
}

}  // namespace headrace
