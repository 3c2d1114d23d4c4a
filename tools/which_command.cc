// headrace which CONFIG --step N --rank R | --sample ID [--epoch E] [--world-size W]:
// which samples rank R's batch of data-parallel step N holds, or where a sample lands,
// from the plan alone: the source's records and the epoch's order, and with batch.balance
// the deal, made by the former a run of that rank makes (it sizes the step by the size
// pass, or reads batch.balance.index). Nothing is decoded and no op runs.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "headrace/core/json_writer.h"
#include "headrace/exec/batch_formers.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/formats/source_spec.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/prepared.h"

namespace headrace::tools {
namespace {

constexpr const char* kWhichUsage =
    "usage: headrace which CONFIG --step N --rank R [--epoch E] [--world-size W] [--json]\n"
    "       headrace which CONFIG --sample ID [--epoch E] [--world-size W] [--json]\n"
    "                            [--set key=value ...]\n"
    "  --step N --rank R  the samples of rank R's batch of data-parallel step N (its batch N\n"
    "                     of the epoch): dataset index, id, media (and a mix's entry)\n"
    "  --sample ID        where the sample with id ID lands: step, rank, position\n"
    "  --epoch E          the epoch (default 0); --world-size W: ranks (default 1)\n"
    "With batch.balance the step's samples are listed as the balanced deal gives them to\n"
    "the ranks; with batch.pack or batch.max_tokens, as the input batch holds them (a\n"
    "packing window > 0 may carry a sample into a later packed batch); with both and a\n"
    "packing window, the rank's packed batch (each step's rows are dealt).\n";

using std::to_string;

int Fail(const std::string& message) {
  std::fprintf(stderr, "headrace which: %s\n", message.c_str());
  return 2;
}

// Prints the JSON object, or the table.
int Print(const JsonWriter& json, const std::string& table, bool as_json) {
  std::fputs(as_json ? (json.str() + "\n").c_str() : table.c_str(), stdout);
  return 0;
}

// `text` as an integer in [low, high]; nullopt when it is not one.
std::optional<int64_t> ParseInt(const std::string& text, int64_t low, int64_t high) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < low || v > high) {
    return std::nullopt;
  }
  return v;
}

// The samples rank `rank` of `world` computes for its batches of steps [from, to) of
// `epoch`: the order's, composed by the former a run of that rank makes, as
// Engine::StartBatch does (batch.balance deals them). Packing is not planned (a planned
// pack's Compose gives the packed batch's rows; this lists the input batch's samples),
// but where `rows` (batch.balance with a packing window: the step's rows are dealt,
// balanced_former.cc) the packed batch's: its rows' samples in row order, the epoch
// planned from its first step.
Result<std::vector<std::vector<int64_t>>> SamplesOfBatches(const PreparedPipeline& prepared,
                                                           int64_t epoch, int64_t from,
                                                           int64_t to, int rank, int world,
                                                           bool rows) {
  LoaderOptions options;
  options.rank = rank;
  options.world_size = world;
  options.plan_packing = rows;
  HR_ASSIGN_OR_RETURN(PreparedPipeline::Forming forming, prepared.Form(options));
  HR_ASSIGN_OR_RETURN(EpochOrder order, EpochOrder::Make(forming.engine.order));
  std::vector<std::vector<int64_t>> out;
  for (int64_t step = rows ? 0 : from; step < to; ++step) {
    const BatchPosition position = order.Position(epoch * order.batches_per_rank_epoch() + step);
    std::vector<int64_t> samples = order.SampleIndices(position);
    std::optional<std::vector<int64_t>> composed = forming.former->Compose(position, samples, {});
    if (step < from) continue;
    out.push_back(composed.has_value() ? *std::move(composed) : std::move(samples));
  }
  return out;
}

// What the output says of every listing: the epoch, the world and how the steps are dealt.
struct Plan {
  const PreparedPipeline* prepared = nullptr;
  const EpochOrder* order = nullptr;  // the ranks' share of the epoch, undealt
  int64_t epoch = 0;
  int world = 1;
  int64_t steps = 0;  // an epoch's, each rank's batches
  bool dealt = false;  // batch.balance over more than one rank
  bool packed = false;
  bool rows = false;  // ... with batch.pack and a window: the step's rows dealt
  std::vector<SourceFieldSpec> fields;  // the source's, as its media refs number them

  void Describe(JsonWriter& json) const {
    const PipelineSpec& spec = prepared->spec();
    json.Key("epoch").Int(epoch).Key("world_size").Int(world).Key("steps").Int(steps);
    json.Key("deal").String(dealt ? "dealt" : "ordered");
    json.Key("cost");
    if (dealt) json.String(spec.batch.balance.cost);
    else json.Null();
    json.Key("packed").Bool(packed);
    if (packed) json.Key("note").String(PackNote());
  }
  Result<std::vector<std::vector<int64_t>>> Batches(int64_t from, int64_t to, int rank) const {
    return SamplesOfBatches(*prepared, epoch, from, to, rank, world, rows);
  }
  std::string DealText() const {
    return dealt ? "dealt by batch.balance (cost " + prepared->spec().batch.balance.cost + ")"
                 : "as the epoch's order deals them";
  }
  std::string PackNote() const {
    return rows ? "batch.balance with batch.pack and a window: the packed batch's rows' "
                  "samples, in row order (each step's rows are planned over every rank's "
                  "samples and dealt; a sample may land in a later step)"
                : "batch.pack / batch.max_tokens: the input batch's samples; a packing window "
                  "> 0 may carry a sample into a later packed batch";
  }
  // A mix's entry that `index` belongs to; empty for any other source.
  std::string EntryOf(int64_t index) const {
    const Source& source = prepared->source();
    const std::vector<std::string>& entries = source.info().entries;
    return entries.empty() ? std::string() : entries[source.EntryOf(index)];
  }
};

// One sample of a listing: its record's id and media refs.
void WriteSample(const Plan& plan, int64_t index, JsonWriter& json, std::string& table) {
  const Source& source = plan.prepared->source();
  SampleRecord scratch;
  const SampleRecord& record = source.records(plan.epoch).Get(index, scratch);
  const std::string entry = plan.EntryOf(index);
  json.BeginObject().Key("index").Int(index).Key("id").String(record.id);
  if (!entry.empty()) json.Key("entry").String(entry);
  json.Key("media").BeginArray();
  std::string media;
  for (const MediaRef& ref : record.media) {
    const std::string field =
        ref.field < int(plan.fields.size()) ? plan.fields[ref.field].name : "?";
    json.BeginObject().Key("field").String(field).Key("uri").String(ref.uri);
    std::string uri = ref.uri;
    if (ref.length >= 0) {  // a range of the object (a shard's member)
      json.Key("offset").Int(ref.offset).Key("length").Int(ref.length);
      uri += "@" + to_string(ref.offset) + "+" + to_string(ref.length);
    }
    json.EndObject();
    media += (media.empty() ? "" : " ") + field + "=" + uri;
  }
  json.EndArray();
  if (!record.status.ok()) json.Key("error").String(record.status.ToString());
  json.EndObject();
  char column[32];
  std::snprintf(column, sizeof column, "%10lld  ", static_cast<long long>(index));
  table += column + record.id + (entry.empty() ? "" : "  [" + entry + "]") + "  " +
           (record.status.ok() ? media : "bad record: " + record.status.ToString()) + "\n";
}

int ListStep(const Plan& plan, int64_t step, int rank, bool as_json) {
  if (step >= plan.steps) {
    return Fail("--step " + to_string(step) + ": epoch " + to_string(plan.epoch) +
                " has " + to_string(plan.steps) + " steps at world size " +
                to_string(plan.world) + " (allowed: 0.." + to_string(plan.steps - 1) +
                ")");
  }
  Result<std::vector<std::vector<int64_t>>> batches = plan.Batches(step, step + 1, rank);
  if (!batches.ok()) return Fail(batches.status().ToString());
  const std::vector<int64_t>* samples = &batches->front();
  JsonWriter json;
  json.BeginObject();
  plan.Describe(json);
  json.Key("step").Int(step).Key("rank").Int(rank).Key("samples").BeginArray();
  std::string table;
  for (int64_t index : *samples) WriteSample(plan, index, json, table);
  json.EndArray().EndObject();
  return Print(json,
               "epoch " + to_string(plan.epoch) + ", step " + to_string(step) + " of " +
                   to_string(plan.steps) + ", rank " + to_string(rank) + " of " +
                   to_string(plan.world) + ": " + to_string(samples->size()) + " samples, " +
                   plan.DealText() + "\n" + (plan.packed ? plan.PackNote() + "\n" : "") +
                   "     index  id  media\n" + table,
               as_json);
}

// Where sample `id` lands. The order puts it in a step; a deal moves samples only
// between the ranks of their step (balanced_former.cc), so only that step is dealt; rows
// dealt (a packing window) may carry it to a later step.
int FindSample(const Plan& plan, const std::string& id, bool as_json) {
  const PreparedPipeline& prepared = *plan.prepared;
  const RecordStore& records = prepared.source().records(plan.epoch);
  std::vector<int64_t> indices;
  SampleRecord scratch;
  for (int64_t i = 0; i < records.size(); ++i) {
    if (records.Get(i, scratch).id == id) indices.push_back(i);
  }
  if (indices.empty()) {
    return Fail("--sample " + id + ": no sample has that id in epoch " +
                to_string(plan.epoch) + " (" + to_string(records.size()) +
                " records; a manifest record's id is its source.id_field, a shard "
                "sample's its key)");
  }
  const EpochOrder& order = *plan.order;
  struct Landing {
    int64_t index, step, rank, position, batch_samples;
  };
  std::vector<Landing> lands;
  const auto wanted = [&](int64_t s) {
    return std::find(indices.begin(), indices.end(), s) != indices.end();
  };
  const auto land = [&](const std::vector<int64_t>& share, int64_t step, int r) {
    for (size_t k = 0; k < share.size(); ++k) {
      if (wanted(share[k])) lands.push_back({share[k], step, r, int64_t(k), int64_t(share.size())});
    }
  };
  int64_t last = -1;  // the order's last step that holds it
  for (int64_t step = 0; step < plan.steps; ++step) {
    std::vector<std::vector<int64_t>> ordered(plan.world);
    bool holds = false;
    for (int r = 0; r < plan.world; ++r) {
      ordered[r] = order.SampleIndices(PositionOf(plan.epoch * plan.steps + step,
                                                  order.batches_per_epoch(), plan.world, r));
      holds = holds || std::any_of(ordered[r].begin(), ordered[r].end(), wanted);
    }
    if (holds) last = step;
    for (int r = 0; holds && !plan.rows && r < plan.world; ++r) {
      // Only a deal needs the run's former; the order's batches are those above.
      if (!plan.dealt) {
        land(ordered[r], step, r);
        continue;
      }
      Result<std::vector<std::vector<int64_t>>> dealt = plan.Batches(step, step + 1, r);
      if (!dealt.ok()) return Fail(dealt.status().ToString());
      land(dealt->front(), step, r);
    }
  }
  if (plan.rows && last >= 0) {
    // Rows dealt: a sample waits in the shared window for at most about `window` steps
    // (each step's rows start with the oldest waiting samples), so every rank's packed
    // batches from the epoch's start to that many steps past the order's are searched.
    const int64_t to =
        std::min(plan.steps, last + prepared.spec().batch.pack.window + 2);
    for (int r = 0; r < plan.world; ++r) {
      Result<std::vector<std::vector<int64_t>>> rows = plan.Batches(0, to, r);
      if (!rows.ok()) return Fail(rows.status().ToString());
      for (int64_t step = 0; step < to; ++step) land((*rows)[step], step, r);
    }
  }
  if (lands.empty()) {
    return Fail("--sample " + id + ": no step of epoch " + to_string(plan.epoch) +
                " at world size " + to_string(plan.world) + " holds it (dataset index " +
                to_string(indices.front()) + "; a mix's epoch may not pick it, and an "
                "epoch's last batches, fewer than the ranks, are left out)");
  }
  JsonWriter json;
  json.BeginObject().Key("id").String(id);
  plan.Describe(json);
  json.Key("lands").BeginArray();
  std::string table = "sample '" + id + "' in epoch " + to_string(plan.epoch) +
                      " at world size " + to_string(plan.world) + ", " + plan.DealText() + ":\n";
  for (const Landing& l : lands) {
    const std::string entry = plan.EntryOf(l.index);
    json.BeginObject().Key("index").Int(l.index).Key("step").Int(l.step).Key("rank").Int(l.rank);
    json.Key("position").Int(l.position).Key("batch_samples").Int(l.batch_samples);
    if (!entry.empty()) json.Key("entry").String(entry);
    json.EndObject();
    table += "  index " + to_string(l.index) + (entry.empty() ? "" : " [" + entry + "]") +
             ": step " + to_string(l.step) + " of " + to_string(plan.steps) + ", rank " +
             to_string(l.rank) + ", position " + to_string(l.position) + " of " +
             to_string(l.batch_samples) + "\n";
  }
  json.EndArray().EndObject();
  return Print(json, table + (plan.packed ? plan.PackNote() + "\n" : ""), as_json);
}

}  // namespace

int WhichCommand(const Args& args) {
  std::string config_path, value;
  // The flags' values as given; --epoch and --world-size have defaults.
  std::map<std::string, std::string> given = {{"--epoch", "0"}, {"--world-size", "1"}};
  std::vector<std::string> overrides;
  bool as_json = false;
  ArgReader r{args, 0};
  while (!r.done()) {
    const std::string flag = r.peek();
    if (flag == "--help" || flag == "-h") {
      std::fputs(kWhichUsage, stdout);
      return 0;
    } else if (flag == "--set") {
      if (!r.Value(flag, &value)) return 2;
      overrides.push_back(value);
    } else if (flag == "--step" || flag == "--rank" || flag == "--sample" || flag == "--epoch" ||
               flag == "--world-size") {
      if (!r.Value(flag, &given[flag])) return 2;
    } else if (flag == "--json") {
      as_json = true, ++r.i;
    } else if (config_path.empty() && !flag.empty() && flag[0] != '-') {
      config_path = flag, ++r.i;
    } else {
      std::fprintf(stderr, "headrace which: unknown argument '%s'\n%s", flag.c_str(), kWhichUsage);
      return 2;
    }
  }
  const bool by_sample = given.contains("--sample");
  if (config_path.empty()) return Fail(std::string("give a CONFIG\n") + kWhichUsage);
  if (by_sample == (given.contains("--step") || given.contains("--rank"))) {
    return Fail(std::string("give --step N with --rank R, or --sample ID (one of them)\n") +
                kWhichUsage);
  }
  if (!by_sample && given.contains("--step") != given.contains("--rank")) {
    return Fail(given.contains("--step") ? "--step needs --rank R (allowed: 0 to world size - 1)"
                                         : "--rank needs --step N (allowed: 0 to steps - 1)");
  }
  // Each integer flag given, parsed; nullopt after printing which is wrong.
  const auto number = [&](const char* flag, int64_t low, int64_t high) {
    const std::optional<int64_t> v = ParseInt(given[flag], low, high);
    if (!v.has_value()) {
      Fail(std::string(flag) + " " + given[flag] + ": allowed: an integer >= " + to_string(low));
    }
    return v;
  };
  const std::optional<int64_t> epoch = number("--epoch", 0, INT64_MAX);
  const std::optional<int64_t> world = number("--world-size", 1, INT32_MAX);
  if (!epoch.has_value() || !world.has_value()) return 2;
  std::optional<int64_t> step, rank;
  if (!by_sample) {
    if (!(step = number("--step", 0, INT64_MAX)).has_value()) return 2;
    rank = ParseInt(given["--rank"], 0, *world - 1);
    if (!rank.has_value()) {
      return Fail("--rank " + given["--rank"] + ": allowed: 0 to " + to_string(*world - 1) +
                  " (--world-size " + to_string(*world) + ")");
    }
  }

  Result<PipelineSpec> spec = LoadPipelineConfig(config_path, overrides);
  if (!spec.ok()) return Fail(config_path + ": " + spec.status().ToString());
  if (spec->epochs.has_value() && *epoch >= *spec->epochs) {
    return Fail("--epoch " + given["--epoch"] + ": allowed: 0 to " +
                to_string(*spec->epochs - 1) + " (the config's epochs: " +
                to_string(*spec->epochs) + "; --set epochs=N for more)");
  }
  Result<std::shared_ptr<const PreparedPipeline>> prepared = PreparedPipeline::Make(*spec);
  if (!prepared.ok()) return Fail(prepared.status().ToString());
  if (Status st = (*prepared)->source().CheckRun(*epoch, spec->epochs); !st.ok()) {
    return Fail(st.ToString());
  }
  // The ranks' share of an epoch, checked as a run checks it.
  Result<EpochOrder> order = (*prepared)->RankOrder(int(*world), std::nullopt, {});
  if (!order.ok()) return Fail(order.status().ToString());
  const Plan plan{.prepared = prepared->get(),
                  .order = &*order,
                  .epoch = *epoch,
                  .world = int(*world),
                  .steps = order->batches_per_rank_epoch(),
                  .dealt = spec->batch.balance.enabled() && *world > 1,
                  .packed = spec->batch.regroups(),
                  .rows = spec->batch.balance.enabled() &&
                          BalanceDealsRows(spec->batch.regroups()
                                               ? std::optional(spec->batch.pack_options())
                                               : std::nullopt,
                                           int(*world)),
                  .fields = ResolvedFields((*prepared)->source().spec())};
  return by_sample ? FindSample(plan, given["--sample"], as_json)
                   : ListStep(plan, *step, int(*rank), as_json);
}

}  // namespace headrace::tools
