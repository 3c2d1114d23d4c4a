// The operator contract, at plan time: what an operator type declares about itself.
//
// An operator type is a class deriving from Op (op.h) that also carries its own
// description as static members; the one list of them is ops/all_ops.h, which the
// config parser and emitter, the planner, the Python builders and the conformance
// battery all iterate. Adding an operator is its file, its test and one entry there.
//
//   static constexpr std::string_view kName = "image.resize";  // the config name
//   static constexpr std::string_view kDoc = "...";            // one line, for Python
//   using Spec = ResizeSpec;           // plain data beside the op, with documented defaults
//   static void Fields(auto& spec, auto&& f);
//       each parameter once, in order: f("key", spec.member). The config parser (allowed
//       keys, types), the canonical YAML and the Python schema come from it.
//   static Status Validate(const Spec&, const std::string& key);
//       the parameter rules, the only copy: kInvalidArgument naming `key` + ".param".
//   static Status Declare(const Spec&, PlanContext&);
//       the named values it reads and writes, with their kind and known shape, and the
//       batch fields it writes. Runs at config validation and at planning; reads no file.
//   static Result<std::unique_ptr<Op>> Make(const Spec&, PlanContext&);
//       builds the op after every op has declared: slots, rows and hints come from ctx.
//   static Spec ExampleSpec();          // a representative spec, for the conformance battery
// Optional:
//   static void Hint(const Spec&, ValueHints&);   // see ValueHints
//   static void Hint(const Spec&, ValueHints&, int position);  // the same, given the op's
//       place in the chain (the key of its random stream: an AudioWindowHint names it)
//   static constexpr bool kSizeKey = true;        // also takes `size: N` (width = height = N)
//   static bool DrawsRandom(const Spec&);         // true when it draws from OpRng with this
//       spec, so its output changes with the seed and the epoch (a random crop, a coin
//       of 0 < p < 1); absent: it does not. Materialization (tools/materialize.h) reads it.
//
// Planning is three passes over the chain: Declare forward (kinds and shapes checked),
// Hint backward, Make forward. Errors name the op by key: "ops[1].image.resize: ...".
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/core/batch.h"
#include "headrace/core/buffer.h"
#include "headrace/core/status.h"
#include "headrace/ops/value.h"
#include "headrace/ops/window.h"

namespace headrace {

// The patch geometry an image's size or a grid's token count was made for. The Qwen-VL
// ops must agree on it: image.smart_resize makes sides multiples of patch_size *
// merge_size, vision.patchify cuts patch_size patches and merges merge_size^2 of them
// per token, text.tokenize counts grid tokens with merge_size. Carried from the op that
// set it to the ops after it (ValueDesc::geometry for an image, FieldRead::geometry for
// a grid field), so that a later op made for other sizes is a configuration error
// naming both keys, not a per-sample error on every sample.
struct PatchGeometry {
  int patch_size = 0;  // 0: not known
  int merge_size = 0;  // 0: not known
  std::string key;     // the op whose keys set them: "ops[1].image.smart_resize"
  std::string preset;  // the preset that gave them ("qwen2_vl"), or "": for messages

  bool known() const { return patch_size > 0 || merge_size > 0; }
};

// Ok when `mine` and `earlier` agree on every size both know; else kInvalidArgument
// naming both keys, e.g. "ops[3].vision.patchify.patch_size 16 (preset qwen3_vl)
// disagrees with ops[1].image.smart_resize.patch_size 14: <why>; give both the same
// value (or the same preset)". `why` says what the earlier size fixed.
Status CheckSameGeometry(const PatchGeometry& mine, const PatchGeometry& earlier,
                         std::string_view why);

// What is known at plan time about a named value at one point of the chain.
struct ValueDesc {
  ValueKind kind = ValueKind::kEncoded;
  // The per-sample shape, where known; a dimension that varies between samples is -1.
  // Images: {height, width, channels}. Empty: no shape (encoded bytes, conversations).
  std::vector<int64_t> shape;
  // The key, with its value, that set the shape, for messages: what fixed it
  // ("ops[2].image.center_crop.size 224"), or what makes it vary ("ops[1].image.resize
  // .shorter_side 256 (keeps each image's aspect ratio)").
  std::string shape_source;
  // 0: one value per sample. N > 0: a list of up to N items per sample (a media field
  // with max_items N and what ops make of it); `kind` and `shape` describe each item.
  int items = 0;
  // Audio: samples per second, when every sample has the same (0: it varies).
  int rate = 0;
  // Images: the patch geometry the shape was made for (image.smart_resize), while the
  // shape is the one that op set: PlanContext::Write drops it when an op writes the
  // value with a shape_source that is not that op's (a resize or crop after it).
  PatchGeometry geometry{};
};

// "an image", "a list of up to 4 items, each an image": for messages.
std::string DescribeValue(const ValueDesc& desc);

// The smallest image later operators need of a value, so that its producer may make it
// smaller for less work (image.decode scales JPEGs in the DCT domain). Sizes are of the
// displayed image; 0 = no constraint.
struct SizeHint {
  int min_shorter_side = 0;
  int min_width = 0;
  int min_height = 0;
  // The widest image a later op takes (its longer side / its shorter side; 0: any), so
  // that the producer may refuse a wider one from its header before decoding it
  // (image.smart_resize's max_aspect_ratio). Not a size: any() leaves it out.
  double max_aspect_ratio = 0;

  bool any() const { return min_shorter_side > 0 || min_width > 0 || min_height > 0; }
};

// The one window of an audio value that every later reader of it reads, placed as
// WindowBegin (ops/window.h) places it in the whole stream: `seconds` long (frames(rate)
// samples at the value's rate), at `start`, a random start drawn from the random stream
// of the op at `rng_op` (SampleContext::OpRng). Its producer may then decode about that
// window only (audio.decode), and give a view of part of the stream (AudioView::first).
// seconds 0: no window (the value is read whole, or not at all).
struct AudioWindowHint {
  double seconds = 0;
  ClipStart start = ClipStart::kRandom;
  int rng_op = -1;

  bool any() const { return seconds > 0; }
  // The window's length in samples at `rate`: what its readers and its producer use.
  int64_t frames(int rate) const { return std::llround(seconds * rate); }
};

// Per value name, what the operators after a point of the chain need of it. The planner
// walks the chain backward: before an op's Hint runs, `hints` is what the ops after it
// need; after, what the ops after its predecessor need. An op without a Hint hook
// clears the hints of every value it reads (it needs them as they are: the safe
// default); a geometry-neutral op declares an empty Hint (needs pass through it); an
// op that rescales replaces the need of its input with its own (image.resize). A name
// with no entry: no later op needs anything of it (none reads it, or those that do pass
// the needs after them through).
class ValueHints {
 public:
  SizeHint Get(std::string_view name) const;
  void Set(std::string_view name, SizeHint hint);
  void Clear(std::string_view name);
  // The window of `name` that the later ops read, when they read nothing else of it.
  AudioWindowHint Window(std::string_view name) const;
  // An op reads the window `window` of `name`: it becomes the need when no later op
  // needs anything of `name`; otherwise the need is the whole value (two readers, two
  // windows).
  void ReadWindow(std::string_view name, AudioWindowHint window);

 private:
  struct Need {
    SizeHint size;
    AudioWindowHint window;
  };
  const Need* Find(std::string_view name) const;
  Need* Find(std::string_view name) {
    return const_cast<Need*>(std::as_const(*this).Find(name));
  }
  std::vector<std::pair<std::string, Need>> hints_;
};

// A named value of the chain being planned. Its slot is its index in PlanState::values:
// one slot per name, reused by every op that writes the name.
struct PlanValue {
  std::string name;
  ValueDesc desc;
  std::string written_by;  // "ops[0].image.decode", or "the source field 'image'"
  int writer = -1;         // the op that wrote it, -1 for the source
  int source_field = -1;   // for source values: the index of the source's field
  bool read = false;       // read since it was written
  // For a list value (desc.items > 0): the source field whose items it comes from. Every
  // value made from one list is of that list; the ops over it run once per item.
  int list_field = -1;
};

// What one op declared, kept from Declare to Make.
struct PlanOpRecord {
  std::string key;                                   // "ops[2].image.resize"
  std::vector<std::pair<std::string, int>> reads;    // value name, slot
  std::vector<std::pair<std::string, int>> writes;   // value name, slot
  std::vector<std::pair<std::string, int>> fields;   // batch field name, row
  std::vector<ValueDesc> inputs;                     // parallel to reads: as read
  ValueHints hints_after;                            // what later ops need (Make)
  // An op that reads a list value runs once per item of that list (a mapped op): the
  // list's source field and its max items; -1/0 for an op that runs once per sample.
  // Its writes are items of the same list, and its batch fields gain a leading [items]
  // dimension. See ForEachItemOp (ops/for_each_item.h).
  int list_field = -1;
  int items = 0;
  bool reads_single = false;  // it read a value that is not a list item
  // Batch fields of earlier ops that it reads back from the sample (PlanContext::
  // ReadField): name, row.
  std::vector<std::pair<std::string, int>> field_reads;
  // The patch geometry of the fields it writes (PlanContext::SetGeometry).
  PatchGeometry geometry;
};

// A batch field an earlier op of the chain writes, as a later op reads it back from the
// same sample: a fixed field from SampleContext::rows[row] ([max_items, ...] there when
// the list pads its items), a concatenated one (kItems, kRagged) from the rows the
// sample appended so far, SampleContext::ragged->bytes(row). The planner checks that
// the writer runs before the reader (a list's ops run together at the last of them:
// none of that list may come after the reader).
struct FieldRead {
  int row = -1;
  FieldSpec spec;          // as declared, its layout resolved (FinishDeclare)
  int items = 0;           // written per item of a list of up to `items`; 0: per sample
  std::string writer;      // "ops[3].vision.patchify"
  PatchGeometry geometry;  // what the writer declared for its fields
};

// The chain being planned (pipeline/plan.cc drives it).
// A token sequence an op writes unpadded (text.tokenize {pad: false}): what packing
// (exec/packer.h) pads it and its labels with, and which of its ids carry vision
// features (a cut must not drop them).
struct TokenSequence {
  std::string field;  // "input_ids"
  int64_t pad_id = 0;
  int64_t ignore_index = -100;
  std::vector<int64_t> vision_token_ids;
};

struct PlanState {
  std::vector<PlanValue> values;
  std::vector<FieldSpec> fields;
  std::vector<std::string> field_sources;  // per field: the key that sets its size
  std::vector<std::string> field_writers;  // per field: who writes it (an op's key)
  std::vector<PlanOpRecord> ops;
  // Per source field (PlanValue::source_field): the slot of its value once an op reads
  // it, else -1 (or past the end). The engine fills only these.
  std::vector<int> source_slots;
  // Per source field: how many reads of its value the ops declared, and whether one of
  // them asked to read it in byte ranges (ReadInRanges). The engine hands such a field
  // a reader instead of its bytes when that op is its only reader (pipeline/plan.cc).
  std::vector<int> source_reads;
  std::vector<bool> ranged_sources;
  // Per source field: a media list whose fixed batch fields are padded to max_items
  // (SourceField::pad_items) rather than concatenated.
  std::vector<bool> pad_items;
  // Per source field: the `<list>_count` batch field of a media list ("" otherwise).
  std::vector<std::string> list_counts;
  // Reads a file an op's parameter names (a tokenizer model), wherever it lives. Unset
  // during config validation, which reads no file.
  std::function<Result<Buffer>(const std::string& uri)> read_file;
  // The name of an op that turns a value of kind `from` into one of kind `to` (encoded
  // bytes into an image: "image.decode"), or "": for the advice in a kind mismatch. The
  // planner answers from the op list's declarations. Optional.
  std::function<std::string(ValueKind from, ValueKind to)> producer_of;
  // What one thread's decoder may hold for one sample (memory.decode_bytes_per_thread,
  // resolved): decoders check a sample's header against it before they allocate.
  int64_t decode_bytes_per_thread = int64_t{256} << 20;
  // Tests only (the conformance battery): a read of a value that does not exist creates
  // it as a source value of the kind asked, images of fixed size kSynthImage*.
  bool synthesize_inputs = false;
  // The unpadded token sequences the ops write (AddSequence).
  std::vector<TokenSequence> sequences;

  // Planning one of several chains that fill one batch layout (a blend whose entries have
  // ops of their own: pipeline/plan.h). `fields` then starts as the whole layout, and
  // layout[row] says who writes each field and whether this chain does. A field this
  // chain declares takes its row there by name (AddFieldRow); a field it reads back that
  // only other chains write is read as this chain's samples leave it: with no rows
  // (ReadField). Empty: one chain, its fields added as declared.
  struct LayoutField {
    std::string writer;      // the op that writes it in its chain (FieldRead::writer)
    int items = 0;           // as FieldRead::items
    PatchGeometry geometry;  // as FieldRead::geometry
    bool this_chain = false;  // this chain writes it too
  };
  std::vector<LayoutField> layout;

  // Adds a batch field (and, for a ragged one, its `<name>_lengths` after it), or with a
  // layout takes the row of the field of that name; returns its row.
  int AddFieldRow(FieldSpec field, std::string size_source, std::string writer);
  // The rows AddFieldRow gave, lengths included, in order: what this chain writes.
  std::vector<int> rows_written;
};

inline constexpr int kSynthImageWidth = 40;
inline constexpr int kSynthImageHeight = 30;
inline constexpr int kSynthAudioRate = 16000;  // synthesized audio: mono at this rate

// One op's view of the plan: what Declare, Hint and Make see.
class PlanContext {
 public:
  // `op` indexes state.ops (which the caller has sized).
  PlanContext(PlanState& state, int op) : state_(state), op_(op) {}

  // The op's place in the chain: keys its random stream (SampleContext::OpRng).
  int position() const { return op_; }
  // "ops[2].image.resize": the prefix of every key this op names in a message.
  const std::string& key() const { return record().key; }
  // kInvalidArgument "<key>: <what>".
  Status Error(std::string_view what) const;

  // --- Declare -------------------------------------------------------------------------
  // Reads the value `name` as `kind`: its description, or a config error naming the op,
  // the value and what is available ("reads 'image' as an image, but at this point
  // 'image' is encoded bytes: add image.decode before it").
  Result<ValueDesc> Read(std::string_view name, ValueKind kind);
  // Reads every value of `kind` that exists here (for code ops that take what there
  // is): their names, in slot order.
  std::vector<std::string> ReadEvery(ValueKind kind);
  // The encoded value `name`, which this op read (Read), may come as a MediaReader
  // (EncodedBytes::reader) rather than bytes: the engine then reads it in the ranges the
  // op asks for. Honoured for a source field of loose objects that no other op reads;
  // otherwise the op gets the bytes, as always.
  void ReadInRanges(std::string_view name);
  // Writes `name` (replacing what it held). Fails when the value it replaces was written
  // by an op and never read: that op's work would be thrown away.
  Status Write(std::string_view name, ValueDesc desc);
  // Declares a batch field this op writes, a row per sample; `size_source` is the key
  // that sets its size, `writer` who writes it (default: key()), for messages. A ragged
  // field (FieldLayout::kRagged, appended with SampleContext::AppendRows) gets its
  // `<name>_lengths` declared after it.
  void AddField(FieldSpec field, std::string size_source, std::string writer = "");
  // Reads back the batch field `name` that an earlier op declared (FieldRead); a config
  // error naming the op, the field and the fields that exist when none did. In tests
  // (PlanState::synthesize_inputs) a field no op writes is made up as `synthetic`, when
  // given: declared before this op by "the test", its rows empty (ragged) or as the test
  // leaves them.
  Result<FieldRead> ReadField(std::string_view name, const FieldSpec* synthetic = nullptr);
  // The patch geometry of the batch fields this op writes, for the ops that read them.
  void SetGeometry(PatchGeometry geometry);
  // In Make: this op writes the unpadded token sequence `sequence` (for packing).
  void AddSequence(TokenSequence sequence) { state_.sequences.push_back(std::move(sequence)); }
  // After the op's Declare (the planner calls it): a mapped op's writes become items of
  // its list; its fixed batch fields become the list's items concatenated (kItems), or
  // [items, ...shape] when the list pads them (SourceField::pad_items); its ragged
  // fields get one entry per item.
  void FinishDeclare();

  // --- Make (after every op declared) --------------------------------------------------
  // The slot of a value this op read or wrote; -1 if it declared none of that name.
  int slot(std::string_view name) const;
  // The row index of a batch field this op declared, or read back (ReadField); -1 if
  // none of that name.
  int row(std::string_view field) const;
  // The values this op read, in order: name and slot.
  const std::vector<std::pair<std::string, int>>& reads() const { return record().reads; }
  // The value as this op read it (the first read of that name).
  const ValueDesc* input(std::string_view name) const;
  // What the ops after this one need of `name`.
  SizeHint hint(std::string_view name) const { return record().hints_after.Get(name); }
  AudioWindowHint window_hint(std::string_view name) const {
    return record().hints_after.Window(name);
  }
  // memory.decode_bytes_per_thread, resolved (PlanState).
  int64_t decode_bytes_per_thread() const { return state_.decode_bytes_per_thread; }
  // Reads the file at `uri`, named by this op's parameter `param`. A missing file is a
  // config error (kInvalidArgument); other failures keep their code. Messages name the
  // op, the key and the URI.
  Result<Buffer> ReadFile(std::string_view param, const std::string& uri) const;

 private:
  const PlanOpRecord& record() const { return state_.ops[static_cast<size_t>(op_)]; }
  PlanOpRecord& record() { return state_.ops[static_cast<size_t>(op_)]; }
  int Find(std::string_view name) const;

  PlanState& state_;
  int op_;
};

}  // namespace headrace
