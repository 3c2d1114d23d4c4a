#include "headrace/pipeline/plan.h"

#include <algorithm>
#include <limits>
#include <map>

#include "headrace/ops/absent_fields.h"
#include "headrace/ops/for_each_item.h"
#include "headrace/ops/schema.h"
#include "headrace/pipeline/op_types.h"
#include "headrace/pipeline/source_fields.h"

namespace headrace {

std::string_view OpSpecName(const OpSpec& op) {
  return std::visit(
      [](const auto& spec) -> std::string_view {
        using Spec = std::remove_cvref_t<decltype(spec)>;
        if constexpr (std::is_same_v<Spec, UserOpSpec>) {
          return spec.name;
        } else {
          return OpTypeOf<Spec>::kName;
        }
      },
      op);
}

// --- the user op's description ---------------------------------------------------------

Status UserOpType::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".name", s.name, "the op's name in reports"));
  if (!s.make) return schema::Invalid(p + ".make", "must be set (the op factory)");
  for (size_t f = 0; f < s.fields.size(); ++f) {
    const std::string key = p + ".fields[" + std::to_string(f) + "]";
    HR_RETURN_IF_ERROR(schema::NonEmpty(key, s.fields[f].name, "a batch field name"));
    for (int64_t d : s.fields[f].sample_shape) {
      HR_RETURN_IF_ERROR(schema::AtLeast<int64_t>(key, d, 1));
    }
  }
  return Status::Ok();
}

Status UserOpType::Declare(const Spec& s, PlanContext& ctx) {
  ctx.ReadEvery(ValueKind::kImage);
  const std::string at = ctx.key().substr(0, ctx.key().find('.'));  // "ops[3]"
  for (size_t f = 0; f < s.fields.size(); ++f) {
    std::string shape;
    for (int64_t d : s.fields[f].sample_shape) {
      shape += (shape.empty() ? "" : "x") + std::to_string(d);
    }
    const std::string source = at + ".fields[" + std::to_string(f) + "] (" + s.name + ", " +
                               s.fields[f].name + ") shape " + shape;
    ctx.AddField(s.fields[f], source, source);
  }
  return Status::Ok();
}

Result<std::unique_ptr<Op>> UserOpType::Make(const Spec& s, PlanContext& ctx) {
  UserOpBinding binding;
  binding.first_row = s.fields.empty() ? 0 : ctx.row(s.fields[0].name);
  binding.position = ctx.position();
  binding.images = ctx.reads();
  const std::string at = ctx.key().substr(0, ctx.key().find('.'));
  auto made = s.make(binding);
  if (!made.ok()) return made.status().WithContext(at);
  if (*made == nullptr) return ctx.Error("the op factory returned no op");
  return *std::move(made);
}

namespace {

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

// The first op of the list that reads a value of kind `from` and writes it back, under
// the same name, as kind `to` (image.decode for encoded bytes -> image), from each op's
// declaration of its ExampleSpec. Only on the error path: it declares every op.
std::string ProducerOf(ValueKind from, ValueKind to) {
  std::string found;
  AllOps::ForEach([&]<typename T>() {
    if (!found.empty()) return;
    PlanState probe;
    probe.synthesize_inputs = true;
    probe.ops.resize(1);
    probe.ops[0].key = std::string(T::kName);
    PlanContext ctx(probe, 0);
    if (!T::Declare(T::ExampleSpec(), ctx).ok()) return;
    const PlanOpRecord& r = probe.ops[0];
    for (size_t i = 0; i < r.reads.size(); ++i) {
      for (const auto& [name, slot] : r.writes) {
        if (name == r.reads[i].first && r.inputs[i].kind == from &&
            probe.values[static_cast<size_t>(slot)].desc.kind == to) {
          found = T::kName;
        }
      }
    }
  });
  return found;
}

// One chain to plan: its ops (a blend entry's own, then the shared ones) and their keys.
struct ChainOps {
  std::string entry;  // the blend entry whose samples it runs; "": every sample
  std::vector<OpSpec> ops;
  std::vector<std::string> keys;
  size_t own = 0;  // the entry's own ops, first in `ops`

  ChainOps Own() const {
    ChainOps out;
    out.entry = entry;
    out.ops.assign(ops.begin(), ops.begin() + static_cast<std::ptrdiff_t>(own));
    out.keys.assign(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(own));
    out.own = own;
    return out;
  }
};

// One chain (spec.ops), or one per blend entry when some entry has ops of its own.
std::vector<ChainOps> ChainsOf(const PipelineSpec& spec) {
  const auto& mix = spec.source.mix;
  const bool own = std::any_of(spec.mix_ops.begin(), spec.mix_ops.end(),
                               [](const std::vector<OpSpec>& ops) { return !ops.empty(); });
  const auto shared = [&](ChainOps& chain) {
    for (size_t i = 0; i < spec.ops.size(); ++i) {
      chain.ops.push_back(spec.ops[i]);
      chain.keys.push_back(OpKey(i, spec.ops[i]));
    }
  };
  std::vector<ChainOps> chains;
  if (!own || mix.empty()) {
    shared(chains.emplace_back());
    return chains;
  }
  for (size_t e = 0; e < mix.size(); ++e) {
    ChainOps& chain = chains.emplace_back();
    chain.entry = mix[e].name;
    if (e < spec.mix_ops.size()) {
      for (size_t i = 0; i < spec.mix_ops[e].size(); ++i) {
        chain.ops.push_back(spec.mix_ops[e][i]);
        chain.keys.push_back(MixOpKey(e, i, spec.mix_ops[e][i]));
      }
      chain.own = spec.mix_ops[e].size();
    }
    shared(chain);
  }
  return chains;
}

// The one batch layout of several chains: every field any of them writes, in the order
// they first appear (chain by chain), and who writes each.
struct BatchLayout {
  std::vector<FieldSpec> fields;
  std::vector<std::string> writers;
  std::vector<std::string> sources;
  std::vector<PlanState::LayoutField> shared;
  std::vector<std::vector<bool>> written;  // per chain, per field: the chain writes it
};

// "bf16 [?, 1176] (ragged)": a field as a message names it.
std::string DescribeField(const FieldSpec& f) {
  std::string shape = f.concatenated() ? "?" : "";
  for (int64_t d : f.sample_shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  std::string out = std::string(DTypeName(f.dtype)) + " [" + shape + "]";
  if (f.concatenated()) out += " (" + std::string(FieldLayoutName(f.layout)) + ")";
  if (!f.count_field.empty()) out += " counted by '" + f.count_field + "'";
  return out;
}

// The first chain that writes field `row` of the layout so far.
size_t FirstWriter(const BatchLayout& layout, size_t row) {
  for (size_t c = 0; c < layout.written.size(); ++c) {
    if (layout.written[c][row]) return c;
  }
  return 0;
}

bool SameField(const FieldSpec& a, const FieldSpec& b) {
  return a.name == b.name && a.dtype == b.dtype && a.sample_shape == b.sample_shape &&
         a.layout == b.layout && a.count_field == b.count_field && a.tokens_of == b.tokens_of;
}

// Joins the chains' fields (each declared alone) into one layout. A field two chains
// write must be the same in both: a batch tensor has one dtype and row shape.
Result<BatchLayout> JoinLayouts(const std::vector<ChainOps>& chains,
                                const std::vector<PlanState>& declared) {
  BatchLayout layout;
  for (size_t c = 0; c < declared.size(); ++c) {
    const PlanState& state = declared[c];
    std::vector<int> joined(state.fields.size());
    for (size_t r = 0; r < state.fields.size(); ++r) {
      const FieldSpec& f = state.fields[r];
      const auto it = std::find_if(layout.fields.begin(), layout.fields.end(),
                                   [&](const FieldSpec& g) { return g.name == f.name; });
      if (it != layout.fields.end()) {
        const size_t u = static_cast<size_t>(it - layout.fields.begin());
        if (!SameField(*it, f)) {
          return Status::InvalidArgument(
              state.field_writers[r] + " writes the batch field '" + f.name + "' as " +
              DescribeField(f) + ", but " + layout.writers[u] + " (source.mix entry '" +
              chains[FirstWriter(layout, u)].entry + "') writes it as " + DescribeField(*it) +
              ": the entries of a blend fill one batch layout, so a field two of them write "
              "needs one dtype and shape (give their ops the same parameters)");
        }
        joined[r] = static_cast<int>(u);
        continue;
      }
      joined[r] = static_cast<int>(layout.fields.size());
      layout.fields.push_back(f);
      layout.writers.push_back(state.field_writers[r]);
      layout.sources.push_back(state.field_sources[r]);
      layout.shared.push_back(PlanState::LayoutField{state.field_writers[r], 0, {}, false});
      for (auto& w : layout.written) w.push_back(false);
    }
    layout.written.emplace_back(layout.fields.size(), false);
    for (int u : joined) layout.written[c][static_cast<size_t>(u)] = true;
    // A field an op writes: that op's key, items and geometry, for chains that read it
    // back without writing it (the first chain that writes it).
    for (const PlanOpRecord& op : state.ops) {
      for (const auto& [name, row] : op.fields) {
        PlanState::LayoutField& shared = layout.shared[static_cast<size_t>(joined[row])];
        if (shared.writer != state.field_writers[static_cast<size_t>(row)]) continue;
        shared.writer = op.key;
        shared.items = op.list_field >= 0 ? op.items : 0;
        shared.geometry = op.geometry;
      }
    }
  }
  return layout;
}

// The chain's declaration: the source's fields as its first values, its ops, its lists'
// item counts. With a layout (several chains), its fields take their rows there.
Result<PlanState> DeclareChain(const std::vector<SourceField>& fields, const ChainOps& chain,
                               const BatchLayout* layout, size_t index) {
  PlanState state;
  state.producer_of = ProducerOf;
  if (layout != nullptr) {
    state.fields = layout->fields;
    state.field_writers = layout->writers;
    state.field_sources = layout->sources;
    state.layout = layout->shared;
    for (size_t row = 0; row < state.layout.size(); ++row) {
      state.layout[row].this_chain = layout->written[index][row];
    }
  }
  AddSourceValues(fields, state);
  HR_RETURN_IF_ERROR(DeclareOps(chain.ops, chain.keys, state));
  AddItemCounts(fields, state);
  HR_RETURN_IF_ERROR(CheckFieldNames(state.fields, state.field_writers));
  return state;
}

// Every chain declared, and the layout they share (null for one chain). The entries' own
// ops are declared alone first and their fields joined (JoinLayouts); then each whole
// chain (own ops, then the shared ones) is declared over that layout, so that a shared op
// finds a field only another entry writes (ReadField). The shared ops append their
// fields in the same order in every chain, so each chain ends with the same layout;
// where they do not (a shared op whose output shape follows the entry's: a crop of
// another size), that is a configuration error.
struct DeclaredChains {
  std::vector<ChainOps> chains;
  std::vector<PlanState> states;
  std::unique_ptr<BatchLayout> layout;
};

// The field one chain's ops declare twice, as one name (each chain declared alone, and
// the shared ops, check it; over a layout a second declaration would take the same row).
Status CheckWrittenOnce(const PlanState& state) {
  std::map<int, std::string> by;
  for (const PlanOpRecord& op : state.ops) {
    for (const auto& [name, row] : op.fields) {
      const auto [it, fresh] = by.emplace(row, op.key);
      if (!fresh && it->second != op.key) {
        return Status::InvalidArgument(op.key + ": writes the field '" + name + "', which " +
                                       it->second + " writes too: batch field names must be "
                                       "unique");
      }
    }
  }
  return Status::Ok();
}

Result<DeclaredChains> DeclareChains(const PipelineSpec& spec) {
  DeclaredChains out;
  out.chains = ChainsOf(spec);
  const std::vector<SourceField> fields = SourceFieldsOf(spec.source);
  if (out.chains.size() == 1) {
    HR_ASSIGN_OR_RETURN(PlanState state, DeclareChain(fields, out.chains[0], nullptr, 0));
    out.states.push_back(std::move(state));
    return out;
  }
  std::vector<PlanState> own;
  for (const ChainOps& chain : out.chains) {
    HR_ASSIGN_OR_RETURN(PlanState state, DeclareChain(fields, chain.Own(), nullptr, 0));
    own.push_back(std::move(state));
  }
  HR_ASSIGN_OR_RETURN(BatchLayout layout, JoinLayouts(out.chains, own));
  for (size_t c = 0; c < out.chains.size(); ++c) {
    HR_ASSIGN_OR_RETURN(PlanState state, DeclareChain(fields, out.chains[c], &layout, c));
    HR_RETURN_IF_ERROR(CheckWrittenOnce(state));
    out.states.push_back(std::move(state));
  }
  // The layout as the whole chains leave it: the same in each.
  const PlanState& first = out.states.front();
  for (size_t c = 1; c < out.states.size(); ++c) {
    const PlanState& other = out.states[c];
    for (size_t row = 0; row < std::max(first.fields.size(), other.fields.size()); ++row) {
      if (row < first.fields.size() && row < other.fields.size() &&
          SameField(first.fields[row], other.fields[row])) {
        continue;
      }
      const PlanState& longer = row < first.fields.size() ? first : other;
      const size_t which = &longer == &first ? 0 : c;
      const FieldSpec& f = longer.fields[row];
      const auto in = [&](const PlanState& s) {
        const auto it = std::find_if(s.fields.begin(), s.fields.end(),
                                     [&](const FieldSpec& g) { return g.name == f.name; });
        return it == s.fields.end() ? std::string("not at all")
                                    : "as " + DescribeField(*it);
      };
      return Status::InvalidArgument(
          longer.field_writers[row] + " writes the batch field '" + f.name + "' " +
          in(out.states[which]) + " on source.mix entry '" + out.chains[which].entry +
          "' but " + in(out.states[which == 0 ? c : 0]) + " on '" +
          out.chains[which == 0 ? c : 0].entry + "': the entries of a blend fill one batch "
          "layout, so the shared ops must write the same fields for each (give the entries' "
          "own ops the same output sizes)");
    }
  }
  layout.fields = first.fields;
  layout.writers = first.field_writers;
  layout.sources = first.field_sources;
  layout.written.assign(out.states.size(), std::vector<bool>(layout.fields.size(), false));
  for (size_t c = 0; c < out.states.size(); ++c) {
    for (int row : out.states[c].rows_written) layout.written[c][static_cast<size_t>(row)] = true;
  }
  out.layout = std::make_unique<BatchLayout>(std::move(layout));
  return out;
}

// The op that fills, for one chain's samples, the fields of the layout only other chains
// write (AbsentFieldsOp); null when there are none. A list's items counted by a field
// this chain writes would be miscounted: refused.
Result<std::unique_ptr<Op>> AbsentFields(const BatchLayout& layout, size_t chain,
                                         const std::string& entry) {
  AbsentFieldsOp::Options options;
  const std::vector<bool>& written = layout.written[chain];
  for (size_t row = 0; row < layout.fields.size(); ++row) {
    if (written[row]) continue;
    const FieldSpec& f = layout.fields[row];
    options.names.push_back(f.name);
    if (!f.concatenated()) {
      options.zero.push_back({static_cast<int>(row), f.sample_bytes()});
    } else if (f.layout == FieldLayout::kLengths) {
      options.names.pop_back();  // the assemble stage writes it from its field's entries
    } else if (f.count_field.empty()) {
      options.empty.push_back(static_cast<int>(row));  // one entry per sample: an empty one
    } else {
      const auto count = std::find_if(layout.fields.begin(), layout.fields.end(),
                                      [&](const FieldSpec& g) { return g.name == f.count_field; });
      if (count != layout.fields.end() && written[static_cast<size_t>(count - layout.fields.begin())]) {
        return Status::InvalidArgument(
            "source.mix entry '" + entry + "': its ops write '" + f.count_field +
            "', which counts the items of '" + f.name + "' (from " + layout.writers[row] +
            "), but not '" + f.name + "' itself: its samples' counts would not match their "
            "items; give the entry the ops that write '" + f.name + "' too");
      }
    }
  }
  if (options.names.empty()) return std::unique_ptr<Op>();
  return std::unique_ptr<Op>(std::make_unique<AbsentFieldsOp>(std::move(options)));
}

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

// What an op's Make sees of the plan (its record: what it reads and writes, where, with
// which kinds and shapes, and what the ops after it need), as text: equal in two chains,
// the op made in one is the op the other would make.
std::string Signature(const PlanOpRecord& r) {
  std::string s;
  const auto pairs = [&s](char tag, const std::vector<std::pair<std::string, int>>& v) {
    for (const auto& [name, at] : v) s += std::string(1, tag) + name + "@" + std::to_string(at) + ";";
  };
  pairs('r', r.reads);
  pairs('w', r.writes);
  pairs('f', r.fields);
  pairs('b', r.field_reads);
  s += "l" + std::to_string(r.list_field) + "/" + std::to_string(r.items) + ";";
  for (const ValueDesc& in : r.inputs) {
    s += "i" + std::to_string(static_cast<int>(in.kind)) + "/" + std::to_string(in.items) + "/" +
         std::to_string(in.rate) + "/" + std::to_string(in.geometry.patch_size) + "/" +
         std::to_string(in.geometry.merge_size) + ":";
    for (int64_t d : in.shape) s += std::to_string(d) + ",";
    s += ";";
  }
  for (const auto* v : {&r.reads, &r.writes}) {
    for (const auto& [name, at] : *v) {
      const SizeHint h = r.hints_after.Get(name);
      const AudioWindowHint w = r.hints_after.Window(name);
      s += "h" + name + ":" + std::to_string(h.min_shorter_side) + "," +
           std::to_string(h.min_width) + "," + std::to_string(h.min_height) + "," +
           std::to_string(w.seconds) + "," + std::to_string(static_cast<int>(w.start)) + "," +
           std::to_string(w.rng_op) + ";";
    }
  }
  return s;
}

// The shared ops (spec.ops) of several chains, each made once when its declaration is the
// same in every chain (Signature; null where it is not, and for one chain).
Result<std::vector<std::shared_ptr<const Op>>> MakeSharedOps(const PipelineSpec& spec,
                                                            DeclaredChains& declared) {
  std::vector<std::shared_ptr<const Op>> shared(spec.ops.size());
  if (declared.chains.size() < 2) return shared;
  for (size_t k = 0; k < spec.ops.size(); ++k) {
    const auto record = [&](size_t c) -> PlanOpRecord& {
      return declared.states[c].ops[declared.chains[c].own + k];
    };
    const std::string first = Signature(record(0));
    bool same = true;
    for (size_t c = 1; c < declared.chains.size() && same; ++c) same = Signature(record(c)) == first;
    if (!same) continue;
    PlanContext ctx(declared.states[0], static_cast<int>(declared.chains[0].own + k));
    Result<std::unique_ptr<Op>> op = VisitOpType(
        spec.ops[k], [&]<typename T>(const auto& s) { return T::Make(s, ctx); });
    HR_RETURN_IF_ERROR(op.status());
    shared[k] = std::shared_ptr<const Op>(*std::move(op));
  }
  return shared;
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
