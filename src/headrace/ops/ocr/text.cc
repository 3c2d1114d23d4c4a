#include "headrace/ops/ocr/text.h"

#include <dlfcn.h>
#include <tesseract/baseapi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <span>
#include <utility>

namespace headrace {
namespace {

namespace fs = std::filesystem;

constexpr std::pair<PageSegMode, std::string_view> kPageSegModes[] = {
    {PageSegMode::kAutoOsd, "auto_osd"},
    {PageSegMode::kAuto, "auto"},
    {PageSegMode::kSingleColumn, "single_column"},
    {PageSegMode::kSingleBlockVertText, "single_block_vert_text"},
    {PageSegMode::kSingleBlock, "single_block"},
    {PageSegMode::kSingleLine, "single_line"},
    {PageSegMode::kSingleWord, "single_word"},
    {PageSegMode::kCircleWord, "circle_word"},
    {PageSegMode::kSingleChar, "single_char"},
    {PageSegMode::kSparseText, "sparse_text"},
    {PageSegMode::kSparseTextOsd, "sparse_text_osd"},
    {PageSegMode::kRawLine, "raw_line"},
};

constexpr std::pair<Role, std::string_view> kRoles[] = {
    {Role::kSystem, "system"}, {Role::kUser, "user"}, {Role::kAssistant, "assistant"}};

// Smaller images (a 1x1 placeholder, a 3-pixel sliver) hold no legible text: they are
// "no text" without asking Tesseract, whose layout analysis has nothing to scale there.
constexpr int kMinSide = 4;

std::vector<std::string> SplitLanguages(const std::string& language) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= language.size()) {
    const size_t end = std::min(language.find('+', begin), language.size());
    out.push_back(language.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

bool ValidLanguageName(const std::string& name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
  });
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// The longest prefix of `text` of at most `max` bytes that ends at a UTF-8 character
// boundary.
size_t Utf8Prefix(std::string_view text, size_t max) {
  if (text.size() <= max) return text.size();
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return n;
}

// Per thread, the turns each OcrTextOp wrote for the sample in flight there: the
// storage behind the TurnsView it writes. A few ops' worth, most recent first; the
// oldest (in practice, of ops already destroyed) is dropped past kKeep. Moving an entry
// keeps its vector's buffer, so views of it stay valid.
struct ThreadTurns {
  uint64_t op = 0;
  std::vector<Turn> turns;
};
constexpr size_t kKeep = 8;

std::vector<Turn>& TurnsOf(uint64_t op) {
  thread_local std::vector<ThreadTurns> entries;
  auto it = std::find_if(entries.begin(), entries.end(),
                         [op](const ThreadTurns& e) { return e.op == op; });
  if (it == entries.end()) {
    if (entries.size() == kKeep) entries.pop_back();
    entries.insert(entries.begin(), ThreadTurns{op, {}});
  } else if (it != entries.begin()) {
    std::rotate(entries.begin(), it, it + 1);
  }
  return entries.front().turns;
}

std::atomic<uint64_t> next_op_id{1};

// Serializes Tesseract's Init: it reads and writes process-wide parameters.
std::mutex& InitMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace
}  // namespace headrace

// Tesseract's log function (tprintf.h, exported but not among the installed headers):
// in its namespace since Tesseract 5, outside it in 4 (Debian 11's, which the manylinux
// wheel links: scripts/build_wheel_manylinux.sh).
#if TESSERACT_MAJOR_VERSION >= 5
namespace tesseract {
void tprintf(const char* format, ...);
}  // namespace tesseract
#else
void tprintf(const char* format, ...);
namespace tesseract {
using ::tprintf;
}  // namespace tesseract
#endif

namespace headrace {
namespace {

// Sends Tesseract's log to /dev/null, once, before any instance opens. Its tprintf
// writes routine notes to stderr per image ("Estimating resolution as 304" for every
// image without a DPI, which is every decoded image), which in a data loader is noise
// by the million. `debug_file` is a process-wide parameter, read by every tprintf: it is
// set here once, before any engine exists, so no reader races the write; the first
// tprintf then opens its FILE here, not in racing recognitions.
void QuietTesseractLog(tesseract::TessBaseAPI& api) {
  static std::once_flag once;
  std::call_once(once, [&] {
    api.SetVariable("debug_file", "/dev/null");
    tesseract::tprintf("%s", "");
  });
}

}  // namespace

EnumTable<PageSegMode> TableOf(PageSegMode) { return kPageSegModes; }
EnumTable<Role> TableOf(Role) { return kRoles; }

std::vector<std::string> InstalledLanguages(const std::string& data_path) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(data_path, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() == ".traineddata") out.push_back(p.stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<OcrConfig> ResolveOcrConfig(const OcrTextSpec& spec, const std::string& key) {
  OcrConfig config{spec.data_path, spec.language, spec.psm};
  std::error_code ec;
  if (config.data_path.empty()) {
    std::vector<std::string> candidates;
    if (const char* prefix = std::getenv("TESSDATA_PREFIX"); prefix != nullptr && *prefix) {
      candidates.emplace_back(prefix);
    }
    for (std::string_view dir : kTessdataDirs) candidates.emplace_back(dir);
    for (const std::string& dir : candidates) {
      if (fs::is_directory(dir, ec)) {
        config.data_path = dir;
        break;
      }
    }
    if (config.data_path.empty()) {
      return schema::Invalid(key + ".data_path",
                             "no tessdata directory found ($TESSDATA_PREFIX, " +
                                 Joined(candidates) +
                                 "): install tesseract-ocr-eng or set data_path");
    }
  } else if (!fs::is_directory(config.data_path, ec)) {
    return schema::Invalid(key + ".data_path",
                           "'" + config.data_path + "' is not a directory");
  }
  const std::vector<std::string> installed = InstalledLanguages(config.data_path);
  const auto missing = [&](const std::string& lang) {
    return std::find(installed.begin(), installed.end(), lang) == installed.end()
               ? "no " + lang + ".traineddata in " + config.data_path + " (installed: " +
                     Joined(installed) + "; Debian: apt-get install tesseract-ocr-" + lang + ")"
               : std::string();
  };
  for (const std::string& lang : SplitLanguages(spec.language)) {
    if (const std::string what = missing(lang); !what.empty()) {
      return schema::Invalid(key + ".language", what);
    }
  }
  if (NeedsOsd(spec.psm)) {
    if (const std::string what = missing("osd"); !what.empty()) {
      return schema::Invalid(key + ".psm", std::string(EnumName(spec.psm)) +
                                               " detects orientation and script, which needs " +
                                               what);
    }
  }
  return config;
}

void KeepOpenMpSerialOnThisThread() {
  // Looked up, not linked: the OpenMP runtime is whatever libtesseract brought in (none
  // for a build without OpenMP), and the engine itself does not use OpenMP. glibc
  // resolves RTLD_DEFAULT in the caller's scope, which holds libtesseract's libgomp
  // also inside the Python module (loaded RTLD_LOCAL; test_ocr.py counts the threads).
  using SetLevels = void (*)(int);
  static const auto set_levels =
      reinterpret_cast<SetLevels>(dlsym(RTLD_DEFAULT, "omp_set_max_active_levels"));
  thread_local bool done = false;
  if (done) return;
  done = true;
  if (set_levels != nullptr) set_levels(0);
}

// --- OcrEngine -------------------------------------------------------------------------

struct OcrEngine::Api {
  tesseract::TessBaseAPI tess;
  std::vector<uint8_t> gray;  // a colour image's luma; capacity kept between images
  ~Api() { tess.End(); }
};

Result<std::unique_ptr<OcrEngine>> OcrEngine::Open(const OcrConfig& config) {
  auto api = std::make_unique<Api>();
  std::lock_guard lock(InitMutex());
  QuietTesseractLog(api->tess);
  if (api->tess.Init(config.data_path.c_str(), config.language.c_str(),
                     tesseract::OEM_LSTM_ONLY) != 0) {
    return Status::InvalidArgument("Tesseract cannot load language '" + config.language +
                                   "' from " + config.data_path);
  }
  api->tess.SetPageSegMode(static_cast<tesseract::PageSegMode>(config.psm));
  return std::unique_ptr<OcrEngine>(new OcrEngine(std::move(api)));
}

OcrEngine::OcrEngine(std::unique_ptr<Api> api) : api_(std::move(api)) {}
OcrEngine::~OcrEngine() = default;

Status OcrEngine::Recognize(const ImageView& image, std::string* text) {
  text->clear();
  if (image.channels != 1 && image.channels != 3 && image.channels != 4) {
    return Status::InvalidArgument("ocr.text: an image of " + std::to_string(image.channels) +
                                   " channels (1, 3 or 4 are read)");
  }
  if (image.empty() || image.width < kMinSide || image.height < kMinSide) return Status::Ok();
  KeepOpenMpSerialOnThisThread();
  tesseract::TessBaseAPI& tess = api_->tess;
  if (image.channels == 1) {
    tess.SetImage(image.data, image.width, image.height, 1, static_cast<int>(image.stride));
  } else {
    // Tesseract reads text from luma anyway; given colour it also thresholds each
    // channel (Otsu per channel), which costs more than this conversion.
    std::vector<uint8_t>& gray = api_->gray;
    gray.resize(static_cast<size_t>(image.width) * static_cast<size_t>(image.height));
    for (int y = 0; y < image.height; ++y) {
      const uint8_t* in = image.row(y);
      uint8_t* out = gray.data() + static_cast<size_t>(y) * static_cast<size_t>(image.width);
      for (int x = 0; x < image.width; ++x, in += image.channels) {
        out[x] = static_cast<uint8_t>((77 * in[0] + 150 * in[1] + 29 * in[2] + 128) >> 8);
      }
    }
    tess.SetImage(gray.data(), image.width, image.height, 1, image.width);
  }
  // The grey copy of a large page is not kept for the engine's next image.
  struct TrimGray {
    std::vector<uint8_t>& gray;
    ~TrimGray() {
      if (gray.capacity() > (size_t{8} << 20)) std::vector<uint8_t>().swap(gray);
    }
  } trim_gray{api_->gray};
  if (tess.Recognize(nullptr) != 0) {
    tess.Clear();
    return Status::Internal("ocr.text: Tesseract failed to recognize a " +
                            std::to_string(image.width) + "x" + std::to_string(image.height) +
                            " image");
  }
  const std::unique_ptr<char[]> utf8(tess.GetUTF8Text());
  tess.Clear();
  if (utf8 == nullptr) return Status::Ok();
  std::string_view s(utf8.get());
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  text->assign(s);
  return Status::Ok();
}

// --- OcrTextOp -------------------------------------------------------------------------

Status OcrTextOp::Validate(const Spec& s, const std::string& p) {
  for (const std::string& lang : SplitLanguages(s.language)) {
    if (!ValidLanguageName(lang)) {
      return schema::Invalid(p + ".language",
                             "'" + s.language + "' is not a traineddata name or names joined "
                             "by '+' (e.g. eng, eng+deu)");
    }
  }
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".psm", s.psm));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".role", s.role));
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value read"));
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".output", s.output, "the conversation value written"));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".max_bytes", s.max_bytes, 0, kMaxOcrBytes));
  if (!s.write_turn && s.max_bytes == 0) {
    return schema::Invalid(p + ".max_bytes", "must be > 0 when write_turn is false (the op "
                                             "would write nothing)");
  }
  if (!s.write_turn && !s.conversation.empty()) {
    return schema::Invalid(p + ".conversation", "is extended only when write_turn is true");
  }
  return Status::Ok();
}

Status OcrTextOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(const ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  (void)image;
  if (!spec.conversation.empty()) {
    HR_ASSIGN_OR_RETURN(const ValueDesc conversation,
                        ctx.Read(spec.conversation, ValueKind::kConversation));
    (void)conversation;
  }
  if (spec.write_turn) {
    HR_RETURN_IF_ERROR(ctx.Write(spec.output, ValueDesc{ValueKind::kConversation, {}, {}}));
  }
  if (spec.max_bytes > 0) {
    const std::string source = ctx.key() + ".max_bytes " + std::to_string(spec.max_bytes);
    ctx.AddField(FieldSpec{spec.output + "_utf8", DType::kU8, {spec.max_bytes}}, source);
    ctx.AddField(FieldSpec{spec.output + "_length", DType::kI64, {}}, source);
  }
  return Status::Ok();
}

Result<std::unique_ptr<Op>> OcrTextOp::Make(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(OcrConfig config, ResolveOcrConfig(spec, ctx.key()));
  auto first = OcrEngine::Open(config);
  if (!first.ok()) return ctx.Error(first.status().message());
  const bool fields = spec.max_bytes > 0;
  return std::unique_ptr<Op>(std::make_unique<OcrTextOp>(
      spec, std::move(config), std::move(*first), ctx.slot(spec.field),
      spec.conversation.empty() ? -1 : ctx.slot(spec.conversation),
      spec.write_turn ? ctx.slot(spec.output) : -1,
      fields ? ctx.row(spec.output + "_utf8") : -1,
      fields ? ctx.row(spec.output + "_length") : -1, ctx.decode_bytes_per_thread()));
}

OcrTextOp::OcrTextOp(const OcrTextSpec& spec, OcrConfig config, std::unique_ptr<OcrEngine> first,
                     int image_slot, int conversation_slot, int output_slot, int utf8_row,
                     int length_row, int64_t decode_bytes)
    : spec_(spec),
      config_(std::move(config)),
      id_(next_op_id.fetch_add(1, std::memory_order_relaxed)),
      image_slot_(image_slot),
      conversation_slot_(conversation_slot),
      output_slot_(output_slot),
      utf8_row_(utf8_row),
      length_row_(length_row),
      decode_bytes_(decode_bytes) {
  if (first != nullptr) {
    idle_.push_back(std::move(first));
    opened_ = 1;
  }
}

OcrTextOp::~OcrTextOp() = default;

int OcrTextOp::engines_opened() const {
  std::lock_guard lock(mu_);
  return opened_;
}

Result<std::unique_ptr<OcrEngine>> OcrTextOp::Acquire() const {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<OcrEngine> engine = std::move(idle_.back());
      idle_.pop_back();
      return engine;
    }
    ++opened_;
  }
  // Opened outside the lock: loading a language takes tens of milliseconds, and other
  // threads returning or taking engines need not wait for it.
  auto engine = OcrEngine::Open(config_);
  if (!engine.ok()) {
    std::lock_guard lock(mu_);
    --opened_;
  }
  return engine;
}

void OcrTextOp::Release(std::unique_ptr<OcrEngine> engine) const {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(engine));
}

Status OcrTextOp::Run(SampleContext& ctx) const {
  const ImageView* image = ctx.Get<ImageView>(image_slot_);
  if (image == nullptr) return Status::MissingField("ocr.text: no image '" + spec_.field + "'");
  const TurnsView* before = nullptr;
  if (conversation_slot_ >= 0) {
    before = ctx.Get<TurnsView>(conversation_slot_);
    if (before == nullptr) {
      return Status::MissingField("ocr.text: no conversation '" + spec_.conversation + "'");
    }
  }
  std::vector<Turn>& turns = TurnsOf(id_);
  const size_t prior = before != nullptr ? before->turns.size() : 0;
  // Reuses the strings' capacity: assign, not a fresh vector, per sample.
  turns.resize(prior + 1);
  for (size_t i = 0; i < prior; ++i) {
    turns[i].role = before->turns[i].role;
    turns[i].text.assign(before->turns[i].text);
  }
  Turn& ocr = turns.back();
  ocr.role = spec_.role;

  const int64_t working = kOcrBytesPerPixel * image->width * image->height;
  if (decode_bytes_ > 0 && working > decode_bytes_) {
    return Status::ResourceExhausted(
        "ocr.text: recognizing a " + std::to_string(image->width) + "x" +
        std::to_string(image->height) + " image takes about " + std::to_string(working) +
        " bytes (" + std::to_string(kOcrBytesPerPixel) +
        " a pixel), past the decode allowance of " + std::to_string(decode_bytes_) +
        " bytes per thread (memory.decode_bytes_per_thread; by default memory.budget_bytes / 4): "
        "resize the image before ocr.text, or raise the allowance");
  }
  HR_ASSIGN_OR_RETURN(std::unique_ptr<OcrEngine> engine, Acquire());
  const Status recognized = RecognizeText(*engine, *image, &ocr.text);
  Release(std::move(engine));
  HR_RETURN_IF_ERROR(recognized);

  if (output_slot_ >= 0) ctx.Set(output_slot_, TurnsView{std::span<const Turn>(turns)});
  if (utf8_row_ >= 0) {
    const size_t n = Utf8Prefix(ocr.text, static_cast<size_t>(spec_.max_bytes));
    uint8_t* row = ctx.rows[utf8_row_];
    std::memcpy(row, ocr.text.data(), n);
    std::memset(row + n, 0, static_cast<size_t>(spec_.max_bytes) - n);
    const auto length = static_cast<int64_t>(n);
    std::memcpy(ctx.rows[length_row_], &length, sizeof length);
  }
  return Status::Ok();
}

}  // namespace headrace
