#include "headrace/ops/ocr/text.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "headrace/ops/ocr/render.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kPage = {"The quick brown fox jumps", "over the lazy dog 2024"};

Image Page(const std::vector<std::string>& lines, int channels = 1) {
  auto image = RenderText(lines, {.channels = channels});
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  return image.ok() ? std::move(*image) : Image();
}

// The words of `text`, lower-cased, punctuation dropped.
std::vector<std::string> Words(std::string_view text) {
  std::vector<std::string> out(1);
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out.back() += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.back().empty()) {
      out.emplace_back();
    }
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

std::vector<std::string> Words(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return Words(all);
}

OcrConfig Config(PageSegMode psm = PageSegMode::kAuto) {
  auto config = ResolveOcrConfig({.psm = psm}, "ocr.text");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return config.ok() ? *config : OcrConfig{};
}

std::string Recognize(const ImageView& image, PageSegMode psm = PageSegMode::kAuto) {
  auto engine = OcrEngine::Open(Config(psm));
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return "<no engine>";
  std::string text;
  const Status status = (*engine)->Recognize(image, &text);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return text;
}

// The op reading slot 0 (image), optionally slot 1 (conversation), writing slot 2, and
// with max_bytes rows 0 (utf8) and 1 (length).
std::unique_ptr<OcrTextOp> MakeOp(OcrTextSpec spec, int64_t decode_bytes = 0) {
  auto config = ResolveOcrConfig(spec, "ocr.text");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  const bool fields = spec.max_bytes > 0;
  return std::make_unique<OcrTextOp>(spec, *config, nullptr, 0,
                                     spec.conversation.empty() ? -1 : 1, 2, fields ? 0 : -1,
                                     fields ? 1 : -1, decode_bytes);
}

struct Ran {
  Status status;
  std::vector<Turn> turns;  // copied out of the op's storage
  std::string utf8;         // the batch row up to its length
  int64_t length = -1;
};

Ran RunOp(const OcrTextOp& op, const ImageView& image, int max_bytes = 0,
          const std::vector<Turn>* conversation = nullptr) {
  std::vector<Value> values(3);
  values[0] = image;
  if (conversation != nullptr) values[1] = TurnsView{*conversation};
  std::vector<uint8_t> utf8(static_cast<size_t>(max_bytes), 0xEE);
  Ran out;
  uint8_t* rows[2] = {utf8.data(), reinterpret_cast<uint8_t*>(&out.length)};
  ScratchArena scratch;
  SampleContext ctx;
  ctx.scratch = &scratch;
  ctx.values = values;
  ctx.rows = rows;
  out.status = op.Run(ctx);
  if (const auto* turns = std::get_if<TurnsView>(&values[2])) {
    out.turns.assign(turns->turns.begin(), turns->turns.end());
  }
  if (out.length >= 0) {
    out.utf8.assign(reinterpret_cast<const char*>(utf8.data()), static_cast<size_t>(out.length));
    for (size_t i = static_cast<size_t>(out.length); i < utf8.size(); ++i) {
      EXPECT_EQ(utf8[i], 0) << "padding at byte " << i;
    }
  }
  return out;
}

int ThreadsInProcess() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(OcrEngine, ReadsTheWordsOfARenderedPage) {
  const Image page = Page(kPage);
  EXPECT_EQ(Words(Recognize(page.view())), Words(kPage));
}

TEST(OcrEngine, GrayRgbAndRgbxPagesReadTheSame) {
  const Image gray = Page(kPage, 1);
  const Image rgb = Page(kPage, 3);
  auto rgba = Image::Allocate(rgb.width(), rgb.height(), 4);
  ASSERT_TRUE(rgba.ok());
  for (int y = 0; y < rgb.height(); ++y) {
    for (int x = 0; x < rgb.width(); ++x) {
      for (int c = 0; c < 3; ++c) rgba->mutable_view().row(y)[x * 4 + c] = rgb.view().row(y)[x * 3 + c];
      rgba->mutable_view().row(y)[x * 4 + 3] = 0;  // image.decode leaves the 4th byte unspecified
    }
  }
  const std::string text = Recognize(gray.view());
  EXPECT_EQ(Words(text), Words(kPage));
  EXPECT_EQ(Recognize(rgb.view()), text);
  EXPECT_EQ(Recognize(rgba->view()), text);
}

TEST(OcrEngine, ASingleLineInSingleLineMode) {
  const Image line = Page({"Headrace reads text"});
  EXPECT_EQ(Words(Recognize(line.view(), PageSegMode::kSingleLine)),
            (std::vector<std::string>{"headrace", "reads", "text"}));
}

TEST(OcrEngine, AnImageWithNoTextIsEmptyTextNotAnError) {
  const Image blank = Page({});
  EXPECT_EQ(Recognize(blank.view()), "");
  auto big_blank = Image::Allocate(400, 300, 3);
  ASSERT_TRUE(big_blank.ok());
  for (int y = 0; y < 300; ++y) std::fill(big_blank->mutable_view().row(y), big_blank->mutable_view().row(y) + 1200, 200);
  EXPECT_EQ(Recognize(big_blank->view()), "");
  auto tiny = Image::Allocate(1, 1, 1);
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(Recognize(tiny->view()), "");
}

TEST(OcrEngine, OtherChannelCountsAreAnError) {
  auto engine = OcrEngine::Open(Config());
  ASSERT_TRUE(engine.ok());
  std::vector<uint8_t> pixels(40 * 30 * 2, 128);
  const ImageView two{pixels.data(), 40, 30, 2, 80};
  std::string text = "stale";
  const Status status = (*engine)->Recognize(two, &text);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("2 channels"), std::string::npos) << status.message();
  EXPECT_EQ(text, "");
}

TEST(OcrEngine, StartsNoOpenMpThreads) {
  // Debian's libtesseract runs its LSTM under OpenMP; a team would stay parked beside
  // every engine thread. The recognizing thread here is a new one, as in the executor.
  const Image page = Page(kPage);
  auto engine = OcrEngine::Open(Config());
  ASSERT_TRUE(engine.ok());
  int before = 0, after = 0;
  std::string text;
  std::thread([&] {
    before = ThreadsInProcess();
    ASSERT_TRUE((*engine)->Recognize(page.view(), &text).ok());
    after = ThreadsInProcess();
  }).join();
  EXPECT_EQ(Words(text), Words(kPage));
  EXPECT_EQ(after, before);
}

TEST(OcrTextOp, WritesATurnAndTheUtf8Row) {
  const auto op = MakeOp({.max_bytes = 256});
  const Image page = Page(kPage);
  const Ran ran = RunOp(*op, page.view(), 256);
  ASSERT_TRUE(ran.status.ok()) << ran.status.ToString();
  ASSERT_EQ(ran.turns.size(), 1u);
  EXPECT_EQ(ran.turns[0].role, Role::kAssistant);
  EXPECT_EQ(Words(ran.turns[0].text), Words(kPage));
  EXPECT_EQ(ran.utf8, ran.turns[0].text);
}

TEST(OcrTextOp, CutsTheRowAtACharacterBoundary) {
  const auto op = MakeOp({.psm = PageSegMode::kSingleLine, .max_bytes = 7});
  const Image page = Page({"caf\xC3\xA9 ol\xC3\xA9"});  // "café olé"
  const Ran ran = RunOp(*op, page.view(), 7);
  ASSERT_TRUE(ran.status.ok()) << ran.status.ToString();
  ASSERT_EQ(ran.turns.size(), 1u);
  // "café ol" is 8 bytes; 7 would split nothing, so check against the recognized text.
  const std::string& text = ran.turns[0].text;
  ASSERT_GE(text.size(), 7u);
  EXPECT_EQ(ran.utf8, text.substr(0, ran.utf8.size()));
  EXPECT_LE(ran.utf8.size(), 7u);
  if (text.size() > ran.utf8.size()) {
    EXPECT_NE(static_cast<unsigned char>(text[ran.utf8.size()]) & 0xC0, 0x80)
        << "cut inside a character";
  }
}

TEST(OcrTextOp, AppendsToAConversation) {
  const auto op = MakeOp({.conversation = "conversation", .role = Role::kAssistant});
  const std::vector<Turn> before = {{Role::kUser, "<image>\nWhat does the page say?"}};
  const Image page = Page({"hello world"});
  const Ran ran = RunOp(*op, page.view(), 0, &before);
  ASSERT_TRUE(ran.status.ok()) << ran.status.ToString();
  ASSERT_EQ(ran.turns.size(), 2u);
  EXPECT_EQ(ran.turns[0].text, before[0].text);
  EXPECT_EQ(ran.turns[0].role, Role::kUser);
  EXPECT_EQ(Words(ran.turns[1].text), (std::vector<std::string>{"hello", "world"}));
  // Without the conversation: a named error.
  const Ran missing = RunOp(*op, page.view());
  EXPECT_EQ(missing.status.code(), StatusCode::kMissingField);
  EXPECT_NE(missing.status.message().find("conversation"), std::string::npos);
}

// The decode allowance (memory.decode_bytes_per_thread) bounds the page Tesseract gets: a
// 9000x9000 image took 1.5 GiB and 49 s; one past the allowance fails before it starts.
TEST(OcrTextOp, APagePastTheDecodeAllowanceFailsBeforeTesseractSeesIt) {
  const Image page = Page({"hello world"});
  const ImageView view = page.view();
  const int64_t working = kOcrBytesPerPixel * view.width * view.height;
  const Ran over = RunOp(*MakeOp({}, working - 1), view);
  EXPECT_EQ(over.status.code(), StatusCode::kResourceExhausted) << over.status.ToString();
  EXPECT_NE(over.status.message().find("memory.decode_bytes_per_thread"), std::string::npos);
  const Ran within = RunOp(*MakeOp({}, working), view);
  ASSERT_TRUE(within.status.ok()) << within.status.ToString();
  EXPECT_EQ(Words(within.turns[0].text), (std::vector<std::string>{"hello", "world"}));
}

TEST(OcrTextOp, AMissingImageIsANamedError) {
  const auto op = MakeOp({});
  const Ran ran = RunOp(*op, ImageView{});
  (void)ran;
  std::vector<Value> values(3);
  SampleContext ctx;
  ctx.values = values;
  const Status status = op->Run(ctx);
  EXPECT_EQ(status.code(), StatusCode::kMissingField);
  EXPECT_NE(status.message().find("'image'"), std::string::npos) << status.message();
}

TEST(OcrTextOp, ThreadsGetInstancesOfTheirOwnAndTheSameText) {
  constexpr int kThreads = 4;
  const auto op = MakeOp({.max_bytes = 128});
  const Image page = Page(kPage);
  std::vector<Ran> ran(kThreads);
  std::latch start(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();  // all recognize at once
        for (int round = 0; round < 2; ++round) ran[t] = RunOp(*op, page.view(), 128);
      });
    }
  }
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(ran[t].status.ok()) << ran[t].status.ToString();
    EXPECT_EQ(Words(ran[t].utf8), Words(kPage)) << "thread " << t;
    EXPECT_EQ(ran[t].utf8, ran[0].utf8);
  }
  // One engine per thread at most, each opened once, kept across rounds.
  EXPECT_GE(op->engines_opened(), 1);
  EXPECT_LE(op->engines_opened(), kThreads);
}

TEST(OcrTextOp, TwoOpsOnOneThreadKeepTheirOwnTurns) {
  const auto a = MakeOp({.psm = PageSegMode::kSingleLine});
  const auto b = MakeOp({.psm = PageSegMode::kSingleLine});
  const Image first = Page({"alpha"});
  const Image second = Page({"omega"});
  std::vector<Value> values(3);
  SampleContext ctx;
  ScratchArena scratch;
  ctx.scratch = &scratch;
  ctx.values = values;
  values[0] = first.view();
  ASSERT_TRUE(a->Run(ctx).ok());
  const TurnsView from_a = std::get<TurnsView>(values[2]);
  values[0] = second.view();
  ASSERT_TRUE(b->Run(ctx).ok());
  const TurnsView from_b = std::get<TurnsView>(values[2]);
  EXPECT_EQ(Words(from_a.turns[0].text), std::vector<std::string>{"alpha"});
  EXPECT_EQ(Words(from_b.turns[0].text), std::vector<std::string>{"omega"});
}

// --- configuration -------------------------------------------------------------------

TEST(OcrTextConfig, AMissingLanguageNamesTheKeyAndWhatIsInstalled) {
  const auto config = ResolveOcrConfig({.language = "eng+klingon"}, "ops[1].ocr.text");
  ASSERT_FALSE(config.ok());
  const std::string& m = config.status().message();
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.find("ops[1].ocr.text.language"), std::string::npos) << m;
  EXPECT_NE(m.find("klingon.traineddata"), std::string::npos) << m;
  EXPECT_NE(m.find("installed: eng"), std::string::npos) << m;
  EXPECT_NE(m.find("tesseract-ocr-klingon"), std::string::npos) << m;
}

TEST(OcrTextConfig, AMissingDataPathNamesTheKey) {
  const auto config = ResolveOcrConfig({.data_path = "/no/such/tessdata"}, "ocr.text");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("ocr.text.data_path"), std::string::npos);
  EXPECT_NE(config.status().message().find("/no/such/tessdata"), std::string::npos);
}

TEST(OcrTextConfig, ADataPathWithoutTheLanguageListsWhatIsThere) {
  const char* tmp = std::getenv("HEADRACE_TEST_TMP");
  const fs::path dir = fs::path(tmp != nullptr ? tmp : fs::temp_directory_path().string()) /
                       ("ocr-tessdata-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto empty = ResolveOcrConfig({.data_path = dir.string()}, "ocr.text");
  // Only eng: the OSD modes need osd.traineddata, which the error names under `psm`.
  const OcrConfig installed = Config();
  fs::create_symlink(fs::path(installed.data_path) / "eng.traineddata", dir / "eng.traineddata");
  const auto eng = ResolveOcrConfig({.data_path = dir.string()}, "ocr.text");
  const auto osd =
      ResolveOcrConfig({.psm = PageSegMode::kAutoOsd, .data_path = dir.string()}, "ocr.text");
  fs::remove_all(dir);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("ocr.text.language: no eng.traineddata"),
            std::string::npos) << empty.status().message();
  EXPECT_NE(empty.status().message().find("installed: none"), std::string::npos);
  ASSERT_TRUE(eng.ok()) << eng.status().ToString();
  EXPECT_EQ(eng->data_path, dir.string());
  ASSERT_FALSE(osd.ok());
  EXPECT_NE(osd.status().message().find("ocr.text.psm: auto_osd"), std::string::npos)
      << osd.status().message();
  EXPECT_NE(osd.status().message().find("no osd.traineddata"), std::string::npos);
  EXPECT_NE(osd.status().message().find("installed: eng;"), std::string::npos);
}

TEST(OcrTextConfig, ValidateNamesBadParameters) {
  const auto message = [](const OcrTextSpec& spec) {
    return OcrTextOp::Validate(spec, "ocr.text").message();
  };
  EXPECT_TRUE(OcrTextOp::Validate({}, "ocr.text").ok());
  EXPECT_NE(message({.language = "eng+"}).find("ocr.text.language"), std::string::npos);
  EXPECT_NE(message({.language = "../eng"}).find("ocr.text.language"), std::string::npos);
  const std::string psm = message({.psm = static_cast<PageSegMode>(0)});
  EXPECT_NE(psm.find("ocr.text.psm"), std::string::npos) << psm;
  EXPECT_NE(psm.find("single_line"), std::string::npos) << psm;
  EXPECT_NE(psm.find("sparse_text"), std::string::npos) << psm;
  EXPECT_NE(message({.max_bytes = -1}).find("ocr.text.max_bytes"), std::string::npos);
  EXPECT_NE(message({.output = ""}).find("ocr.text.output"), std::string::npos);
  EXPECT_NE(message({.write_turn = false}).find("ocr.text.max_bytes: must be > 0 when write_turn"),
            std::string::npos);
  EXPECT_NE(message({.conversation = "conversation", .max_bytes = 8, .write_turn = false})
                .find("ocr.text.conversation"),
            std::string::npos);
  EXPECT_TRUE(OcrTextOp::Validate({.max_bytes = 8, .write_turn = false}, "ocr.text").ok());
}

TEST(OcrTextConfig, TheModeNamesAreTesseractsNumbers) {
  EXPECT_EQ(EnumName(PageSegMode::kAuto), "auto");
  EXPECT_EQ(static_cast<int>(PageSegMode::kSingleBlock), 6);
  EXPECT_EQ(static_cast<int>(PageSegMode::kRawLine), 13);
  EXPECT_EQ(TableOf(PageSegMode{}).size(), 12u);
}

}  // namespace
}  // namespace headrace
