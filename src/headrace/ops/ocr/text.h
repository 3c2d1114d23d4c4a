// ocr.text: Tesseract on an image value; the recognized text joins the sample as a
// conversation value (one turn), so that text.tokenize can follow (`field: <output>`).
//
// Three layers, each usable on its own:
//   OcrConfig / FindTessdata   what Tesseract is opened with, checked at plan time
//   OcrEngine                  one Tesseract instance; the only place its API is seen
//   RecognizeText              the pure kernel: an 8-bit image -> UTF-8 text
// OcrTextOp adapts the kernel to a SampleContext, with a pool of engines that gives
// each thread running it an instance of its own (see the README's design decisions).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/ops/image_view.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/schema.h"

namespace headrace {

// Tesseract's page segmentation modes (tesseract::PageSegMode, same numbers), by the
// names configs write. osd_only and auto_only are not here: they recognize no text.
enum class PageSegMode {
  kAutoOsd = 1,               // automatic segmentation with orientation/script detection
  kAuto = 3,                  // fully automatic segmentation, no OSD (the CLI's default)
  kSingleColumn = 4,          // one column of text of variable sizes
  kSingleBlockVertText = 5,   // one uniform block of vertically aligned text
  kSingleBlock = 6,           // one uniform block of text
  kSingleLine = 7,            // the image is one text line
  kSingleWord = 8,            // the image is one word
  kCircleWord = 9,            // one word in a circle
  kSingleChar = 10,           // one character
  kSparseText = 11,           // as much text as possible, in no particular order
  kSparseTextOsd = 12,        // sparse text with orientation/script detection
  kRawLine = 13,              // one text line, bypassing Tesseract's hacks
};
EnumTable<PageSegMode> TableOf(PageSegMode);
// Whether the mode needs osd.traineddata (orientation and script detection).
constexpr bool NeedsOsd(PageSegMode psm) {
  return psm == PageSegMode::kAutoOsd || psm == PageSegMode::kSparseTextOsd;
}

// Who the OCR turn is spoken by: "system", "user", "assistant".
EnumTable<Role> TableOf(Role);

// Where Debian's tesseract-ocr-* packages put their data, newest first; FindTessdata
// looks here when data_path is empty (after $TESSDATA_PREFIX).
inline constexpr std::string_view kTessdataDirs[] = {
    "/usr/share/tesseract-ocr/5/tessdata",
    "/usr/share/tesseract-ocr/4.00/tessdata",
    "/usr/share/tessdata",
};

struct OcrTextSpec {  // ocr.text
  // Tesseract's language(s): a traineddata name, several joined by '+' ("eng+deu").
  std::string language = "eng";
  PageSegMode psm = PageSegMode::kAuto;
  // The tessdata directory; "": $TESSDATA_PREFIX, else the first of kTessdataDirs that
  // exists. Resolved at plan time.
  std::string data_path{};
  std::string field = "image";      // the image value read
  std::string output = "ocr_text";  // the conversation value written
  // "": the output is one turn, the recognized text. Else the conversation value whose
  // turns come first (the record's "conversation"): the OCR turn is appended to a copy.
  std::string conversation{};
  Role role = Role::kAssistant;  // the OCR turn's speaker (text.tokenize trains on assistant)
  // > 0: also writes batch fields <output>_utf8 (u8[max_bytes]: the text's first bytes,
  // cut at a UTF-8 character boundary, zero-padded) and <output>_length (i64: the bytes
  // in it). 0: no batch field.
  int max_bytes = 0;
  // false: no conversation value, only the batch fields (a chain that ends here: the
  // planner rejects a value no later op reads). Needs max_bytes > 0.
  bool write_turn = true;
};

// Tesseract's working memory per pixel of the page it recognizes, measured: a 9000x9000
// noise image (81 Mpx) peaked at 1.5 GiB of RSS, about 20 bytes a pixel (thresholded
// copies, connected components, the LSTM's line images).
inline constexpr int64_t kOcrBytesPerPixel = 20;

// ocr.text.max_bytes' upper bound.
inline constexpr int kMaxOcrBytes = 1 << 20;

// What one Tesseract instance is opened with: a spec resolved at plan time.
struct OcrConfig {
  std::string data_path;  // the tessdata directory, existing
  std::string language;   // "eng", "eng+deu"
  PageSegMode psm = PageSegMode::kAuto;
};

// Resolves spec.data_path and checks that each of spec.language's traineddata files
// (and osd.traineddata for the OSD modes) is there. kInvalidArgument naming
// `key.data_path` when no tessdata directory exists, `key.language` when a language is
// missing (listing the installed ones and the Debian package to install).
Result<OcrConfig> ResolveOcrConfig(const OcrTextSpec& spec, const std::string& key);

// The languages installed in a tessdata directory (its *.traineddata), sorted.
std::vector<std::string> InstalledLanguages(const std::string& data_path);

// One Tesseract instance (TessBaseAPI, LSTM engine), opened once. Not thread-safe: one
// thread uses it at a time (it may move between threads). End()s Tesseract when
// destroyed.
class OcrEngine {
 public:
  // Loads the language data. kInvalidArgument naming the languages and data path when
  // Tesseract refuses them (a corrupt traineddata file).
  static Result<std::unique_ptr<OcrEngine>> Open(const OcrConfig& config);
  ~OcrEngine();
  OcrEngine(const OcrEngine&) = delete;
  OcrEngine& operator=(const OcrEngine&) = delete;

  // Recognizes `image` (1, 3 or 4 channels of 8 bits) into `text` (replaced, capacity
  // kept): Tesseract's UTF-8 lines ('\n' between lines, a blank line between blocks)
  // without leading or trailing whitespace. An image with no text, or one too small to
  // hold any, gives "" and Ok. kInvalidArgument for other channel counts; kInternal
  // when Tesseract fails.
  Status Recognize(const ImageView& image, std::string* text);

 private:
  struct Api;
  explicit OcrEngine(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

// Keeps Tesseract's internal OpenMP (Debian's libtesseract is built with it: the LSTM
// runs its gates on a team of 4) from starting a thread team under the calling thread:
// sets that thread's max-active-levels to 0, so its parallel regions run on it alone.
// The engine's threads are the parallelism; a team under each would oversubscribe the
// cores. Per calling thread; a no-op when the process has no OpenMP runtime.
void KeepOpenMpSerialOnThisThread();

// The kernel: `engine` on `image`. See OcrEngine::Recognize.
inline Status RecognizeText(OcrEngine& engine, const ImageView& image, std::string* text) {
  return engine.Recognize(image, text);
}

// The op. Reads the image `field`; writes the conversation `output` (and, with
// max_bytes, the two batch fields). The TurnsView it writes points into storage of this
// op on the calling thread, valid until the op runs again on that thread (the next
// sample's chain) or is destroyed.
class OcrTextOp : public Op {
 public:
  static constexpr std::string_view kName = "ocr.text";
  static constexpr std::string_view kDoc =
      "Tesseract OCR on an image: the text becomes a conversation turn (for text.tokenize), "
      "optionally also <output>_utf8 / <output>_length batch fields.";
  using Spec = OcrTextSpec;
  static void Fields(auto& s, auto&& f) {
    f("language", s.language);
    f("psm", s.psm);
    f("data_path", s.data_path);
    f("field", s.field);
    f("output", s.output);
    f("conversation", s.conversation);
    f("role", s.role);
    f("max_bytes", s.max_bytes);
    f("write_turn", s.write_turn);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads the image `field` (and the conversation `conversation`, when set); writes the
  // conversation `output` (unless write_turn is false) and, with max_bytes,
  // <output>_utf8 u8[max_bytes] and <output>_length i64.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Resolves the data path and opens one engine (the first thread's), so that a missing
  // or corrupt language fails the config, not the first sample.
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.max_bytes = 64}; }

  // Rows: -1 for none (max_bytes 0). `conversation_slot` -1: no conversation read;
  // `output_slot` -1: no value written (write_turn false).
  // `decode_bytes` > 0 (memory.decode_bytes_per_thread): an image whose recognition
  // would take more of Tesseract's working memory (kOcrBytesPerPixel a pixel) fails its
  // sample (kResourceExhausted) before Tesseract sees it.
  OcrTextOp(const OcrTextSpec& spec, OcrConfig config, std::unique_ptr<OcrEngine> first,
            int image_slot, int conversation_slot, int output_slot, int utf8_row,
            int length_row, int64_t decode_bytes = 0);
  ~OcrTextOp() override;
  std::string_view name() const override { return kName; }
  // kMissingField when the sample has no such image (or conversation); the engine's
  // errors otherwise. No text is not an error: the turn is then empty.
  Status Run(SampleContext& ctx) const override;

  // Engines opened so far (each Init'ed once): at most the threads that ran the op at
  // the same time. For tests.
  int engines_opened() const;

 private:
  // An idle engine, or a new one: a thread takes it for one Run.
  Result<std::unique_ptr<OcrEngine>> Acquire() const;
  void Release(std::unique_ptr<OcrEngine> engine) const;

  OcrTextSpec spec_;
  OcrConfig config_;
  uint64_t id_;  // keys this op's per-thread turn storage
  int image_slot_, conversation_slot_, output_slot_, utf8_row_, length_row_;
  int64_t decode_bytes_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<OcrEngine>> idle_;  // guarded by mu_; LIFO
  mutable int opened_ = 0;                                // guarded by mu_
};

}  // namespace headrace
