// The conversations: questions about what a scene holds, with answers that are true of
// the picture drawn, in a few phrasings each.
#include <algorithm>
#include <initializer_list>

#include "headrace/core/rng.h"
#include "make_sample/make_sample_internal.h"

namespace headrace::make_sample_detail {
namespace {

template <size_t N>
std::string_view Pick(Rng& rng, const std::string_view (&options)[N]) {
  return options[rng.Below(N)];
}

std::string Capitalized(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += p;
  return out;
}

std::string_view NumberWord(size_t n) {
  static constexpr std::string_view kWords[] = {"zero", "one",  "two", "three",
                                                "four", "five", "six"};
  return kWords[std::min<size_t>(n, 6)];
}

std::string_view ColourName(const Object& o) { return kColours[o.colour].name; }

std::string Named(const Object& o) { return Cat({ColourName(o), " ", o.noun}); }

// "in the top left corner", "on the right side", "in the centre", ...
std::string Location(const Scene& s, const Object& o) {
  const int col = std::clamp(static_cast<int>(3 * o.cx / static_cast<float>(s.width)), 0, 2);
  const int row = std::clamp(static_cast<int>(3 * o.cy / static_cast<float>(s.height)), 0, 2);
  static constexpr std::string_view kCol[] = {"left", "centre", "right"};
  static constexpr std::string_view kRow[] = {"top", "middle", "bottom"};
  if (col == 1 && row == 1) return "in the centre";
  if (row == 1) return Cat({"on the ", kCol[col], " side"});
  if (col == 1) return Cat({"at the ", kRow[row]});
  return Cat({"in the ", kRow[row], " ", kCol[col], " corner"});
}

std::string BackdropPhrase(const Scene& s) {
  std::string_view sky;
  switch (s.sky) {
    case Sky::kClear: sky = "under a clear blue sky"; break;
    case Sky::kCloudy: sky = "under a cloudy sky"; break;
    case Sky::kSunset: sky = "at sunset"; break;
  }
  switch (s.backdrop) {
    case Backdrop::kField: return Cat({"on a grassy field ", sky});
    case Backdrop::kBeach: return Cat({"on a sandy beach ", sky});
    case Backdrop::kStreet: return Cat({"on a street ", sky});
    case Backdrop::kRoom:
      return Cat({"in a room with a ", kWalls[s.wall].name, " wall and a wooden floor"});
    case Backdrop::kStudio: return "against a plain grey background";
  }
  return {};
}

std::string_view ShapeWord(const Object& o) {
  switch (o.shape) {
    case Shape::kCircle: return "circle";
    case Shape::kBox: return std::abs(o.hw / o.hh - 1) < 0.12f ? "square" : "rectangle";
    case Shape::kTriangle: return "triangle";
    case Shape::kBus: return "bus";
  }
  return {};
}

// Question kinds; each asks about what Draw put in the picture.
enum class Ask {
  kColour,       // the colour of a named object
  kShape,        // the shape of an object named by its colour
  kCount,        // how many objects
  kWhere,        // where an object is
  kDescribe,     // a one-sentence caption
  kExists,       // whether a noun is in the picture
  kLargest,      // the biggest object
  kBackground,   // the backdrop
  kLeftOrRight,  // the relative position of two objects
};
constexpr int kAskKinds = 9;

// One function per question kind: the question about `o` (or the scene) and its answer.

QA AskColour(const Scene& s, const Object& o, Rng& rng) {
  static constexpr std::string_view kQ[] = {
      "What colour is the ", "What color is the ", "Which colour is the ",
      "Can you tell me the colour of the ", "What is the colour of the "};
  const std::string_view q = Pick(rng, kQ);
  std::string question = Cat({q, o.noun, rng.Bernoulli(0.4) ? " in the picture?" : "?"});
  switch (rng.Below(3)) {
    case 0: return {question, Capitalized(Cat({ColourName(o), "."}))};
    case 1: return {question, Cat({"The ", o.noun, " is ", ColourName(o), "."})};
    default: return {question, Cat({"It is ", ColourName(o), "."})};
  }
}

QA AskShape(const Scene& s, const Object& o, Rng& rng) {
  if (o.shape == Shape::kBus) return {};
  static constexpr std::string_view kQ[] = {"What shape is the ", "What is the shape of the ",
                                            "Describe the shape of the "};
  std::string question =
      Cat({Pick(rng, kQ), ColourName(o), rng.Bernoulli(0.5) ? " object?" : " thing?"});
  const std::string_view shape = ShapeWord(o);
  const std::string_view article = "a ";
  switch (rng.Below(3)) {
    case 0: return {question, Cat({"It is ", article, shape, "."})};
    case 1: return {question, Capitalized(Cat({article, shape, "."}))};
    default:
      return {question, Cat({"It is ", article, ColourName(o), " ", shape, ", probably a ",
                             o.noun, "."})};
  }
}

QA AskCount(const Scene& s, const Object& o, Rng& rng) {
  const auto& objs = s.objects;
  static constexpr std::string_view kQ[] = {
      "How many objects are there?", "How many objects can you see?",
      "How many shapes are in the image?", "Count the objects in this picture."};
  std::string question(Pick(rng, kQ));
  const size_t n = objs.size();
  if (n == 1) {
    return {question, rng.Bernoulli(0.5) ? "There is one object." : "Just one."};
  }
  switch (rng.Below(3)) {
    case 0: return {question, Capitalized(Cat({NumberWord(n), "."}))};
    case 1: return {question, Cat({"There are ", NumberWord(n), " objects."})};
    default: return {question, Cat({"I can see ", NumberWord(n), " objects."})};
  }
}

QA AskWhere(const Scene& s, const Object& o, Rng& rng) {
  static constexpr std::string_view kQ[] = {"Where is the ", "Where is the ",
                                            "In which part of the image is the "};
  const bool with_colour = rng.Bernoulli(0.4);
  std::string question =
      Cat({Pick(rng, kQ), with_colour ? Named(o) : std::string(o.noun), "?"});
  const std::string where = Location(s, o);
  return {question, rng.Bernoulli(0.5) ? Cat({"It is ", where, "."})
                                       : Cat({"The ", o.noun, " is ", where, "."})};
}

QA AskDescribe(const Scene& s, const Object& o, Rng& rng) {
  static constexpr std::string_view kQ[] = {"Describe the image briefly.", "What do you see?",
                                            "Give a short description of this picture.",
                                            "What is in this image?",
                                            "Write a one-sentence caption for the image."};
  std::string question(Pick(rng, kQ));
  return {question, Caption(s)};
}

QA AskExists(const Scene& s, const Object& o, Rng& rng) {
  const auto& objs = s.objects;
  static constexpr std::string_view kAll[] = {
      "ball", "balloon", "plate", "clock", "coin", "box",  "crate", "sign",
      "book", "tile",    "tent",  "sail",  "flag", "roof", "cone",  "bus"};
  const std::string_view noun = rng.Bernoulli(0.5) ? o.noun : Pick(rng, kAll);
  std::string question = Cat({"Is there a ", noun, " in the image?"});
  const auto it =
      std::find_if(objs.begin(), objs.end(), [&](const Object& x) { return x.noun == noun; });
  if (it == objs.end()) return {question, Cat({"No, there is no ", noun, "."})};
  return {question, Cat({"Yes, there is a ", Named(*it), " ", Location(s, *it), "."})};
}

QA AskLargest(const Scene& s, const Object& o, Rng& rng) {
  const auto& objs = s.objects;
  if (objs.size() < 2) return {};
  std::vector<const Object*> by_area;
  for (const Object& x : objs) by_area.push_back(&x);
  std::sort(by_area.begin(), by_area.end(),
            [](const Object* a, const Object* b) { return a->area() > b->area(); });
  if (by_area[0]->area() < 1.3f * by_area[1]->area()) return {};  // too close to call
  static constexpr std::string_view kQ[] = {"What is the largest object?",
                                            "Which object is the biggest?",
                                            "Which object takes up the most space?"};
  std::string question(Pick(rng, kQ));
  return {question, rng.Bernoulli(0.5)
                        ? Cat({"The ", Named(*by_area[0]), "."})
                        : Cat({"The largest object is the ", Named(*by_area[0]), "."})};
}

QA AskBackground(const Scene& s, const Object& o, Rng& rng) {
  const auto& objs = s.objects;
  const bool one = objs.size() == 1;
  static constexpr std::string_view kQ[] = {"What is in the background?",
                                            "Where was this picture taken?", "What is behind "};
  std::string question(Pick(rng, kQ));
  if (question.ends_with(' ')) question += one ? "the object?" : "the objects?";
  return {question, Cat({one ? "The object is " : "The objects are ", BackdropPhrase(s), "."})};
}

QA AskLeftOrRight(const Scene& s, const Object& o, Rng& rng) {
  const auto& objs = s.objects;
  if (objs.size() < 2) return {};
  const Object& a = objs[0];
  const Object& b = objs[1 + rng.Below(objs.size() - 1)];
  if (std::abs(a.cx - b.cx) < 0.1f * static_cast<float>(s.width)) return {};
  std::string question =
      Cat({"Is the ", a.noun, " to the left or to the right of the ", b.noun, "?"});
  return {question, Cat({"The ", a.noun, " is to the ", a.cx < b.cx ? "left" : "right",
                         " of the ", Named(b), "."})};
}

// One question of kind `ask` and its answer; empty when it does not apply to the scene.
// The object asked about is drawn first, whatever the kind.
QA Question(Ask ask, const Scene& s, Rng& rng) {
  const auto& objs = s.objects;
  const Object& o = objs[rng.Bernoulli(0.6) ? 0 : rng.Below(objs.size())];
  switch (ask) {
    case Ask::kColour: return AskColour(s, o, rng);
    case Ask::kShape: return AskShape(s, o, rng);
    case Ask::kCount: return AskCount(s, o, rng);
    case Ask::kWhere: return AskWhere(s, o, rng);
    case Ask::kDescribe: return AskDescribe(s, o, rng);
    case Ask::kExists: return AskExists(s, o, rng);
    case Ask::kLargest: return AskLargest(s, o, rng);
    case Ask::kBackground: return AskBackground(s, o, rng);
    case Ask::kLeftOrRight: return AskLeftOrRight(s, o, rng);
  }
  return {};
}

}  // namespace

std::string Caption(const Scene& s) {
  const auto& objs = s.objects;
  const Object& main = objs[0];
  std::string caption = Cat({"A ", main.area() > 0.08f * s.width * s.height ? "large " : "",
                             Named(main), " ", Location(s, main), ", ", BackdropPhrase(s)});
  for (size_t i = 1; i < objs.size(); ++i) {
    caption += i == 1 ? ", next to a " : (i + 1 == objs.size() ? " and a " : ", a ");
    if (i == 1) caption += "small ";
    caption += Named(objs[i]);
  }
  return caption + ".";
}

QA AskAny(const Scene& s, Rng& rng) {
  // A few draws find a kind that applies; the colour question always does.
  for (int attempt = 0; attempt < 8; ++attempt) {
    QA qa = Question(static_cast<Ask>(rng.Below(kAskKinds)), s, rng);
    if (!qa.question.empty()) return qa;
  }
  return Question(Ask::kColour, s, rng);
}

std::vector<QA> MakeConversation(const Scene& s, uint64_t key) {
  Rng rng(key);
  const double u = rng.Uniform();
  const size_t turns = u < 0.4 ? 1 : (u < 0.75 ? 2 : 3);
  std::array<int, kAskKinds> kinds;
  for (int i = 0; i < kAskKinds; ++i) kinds[i] = i;
  std::vector<QA> out;
  for (int i = 0; i < kAskKinds && out.size() < turns; ++i) {
    std::swap(kinds[i], kinds[i + rng.Below(kAskKinds - i)]);
    QA qa = Question(static_cast<Ask>(kinds[i]), s, rng);
    if (!qa.question.empty()) out.push_back(std::move(qa));
  }
  out[0].question = "<image>\n" + out[0].question;  // kColour and kCount always apply
  return out;
}

}  // namespace headrace::make_sample_detail
