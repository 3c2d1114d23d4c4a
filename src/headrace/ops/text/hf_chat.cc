#include "headrace/ops/text/hf_chat.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "headrace/ops/text/tokenize.h"

namespace headrace {
namespace {

// Where to cut `text` at or before `limit` (< text.size()) so that no pre-token spans
// the cut: before the whitespace run nearest `limit` when one starts in its second
// half, else at the start of the UTF-8 character `limit` falls in.
size_t CutBeforeSpace(std::string_view text, size_t limit) {
  const auto space = [](char c) { return c == ' ' || c == '\n'; };
  for (size_t p = limit; p > limit / 2; --p) {
    if (!space(text[p])) continue;
    while (p > 0 && space(text[p - 1])) --p;
    if (p > 0) return p;
    break;
  }
  size_t p = limit;
  while (p > 0 && (static_cast<uint8_t>(text[p]) & 0xC0) == 0x80) --p;
  return p;
}

Result<int> RequireToken(const HfTokenizer& t, const std::string& token, const std::string& key) {
  const int id = t.TokenToId(token);
  if (id < 0) {
    return Status::InvalidArgument("text.tokenize." + key + " '" + token +
                                   "' is not a token of the tokenizer (add it as a special "
                                   "token, or leave " + key + " empty)");
  }
  return id;
}

}  // namespace

Result<std::unique_ptr<HfChat>> HfChat::Make(const TokenizeSpec& spec,
                                             std::string_view tokenizer_json,
                                             const TokenizerConfig& config) {
  auto chat = std::make_unique<HfChat>();
  auto tokenizer = HfTokenizer::Shared(tokenizer_json, spec.tokenizer);
  if (!tokenizer.ok()) return tokenizer.status().WithContext("text.tokenize.tokenizer");
  chat->tokenizer = std::move(tokenizer).value();
  const HfTokenizer& t = *chat->tokenizer;

  // The config's template, else the tokenizer_config.json's, else the preset's
  // (ops/vision/preset.h): the model's own, as its processor would use it.
  const VisionPreset* preset = FindVisionPreset(spec.preset);
  const std::string source = !spec.chat_template.empty() ? spec.chat_template
                             : !config.chat_template.empty() || preset == nullptr
                                 ? config.chat_template
                                 : std::string(preset->chat_template);
  if (source.empty()) {
    return Status::InvalidArgument(
        "text.tokenize.chat_template: none given and the tokenizer config has none" +
        std::string(preset != nullptr ? ", nor does preset " + std::string(EnumName(spec.preset))
                                      : std::string()) +
        " (set chat_template, or tokenizer_config to a tokenizer_config.json with one)");
  }
  std::string bos = config.bos_token, eos = config.eos_token;
  if (!config.read) {
    if (bos.empty()) bos = t.PostProcessorFirstToken();
    if (bos.empty() && source.find("bos_token") != std::string::npos) {
      return Status::InvalidArgument(
          "text.tokenize.chat_template writes bos_token, and there is no tokenizer_config.json "
          "to name it nor a post-processor in the tokenizer that adds one: set "
          "tokenizer_config to the model's tokenizer_config.json");
    }
  }
  HR_ASSIGN_OR_RETURN(chat->chat_template,
                      JinjaChatTemplate::Parse(source, bos, eos, "text.tokenize.chat_template",
                                               ChatTemplateLimits::ForMaxLength(spec.max_length),
                                               spec.template_date));

  const ImageTokenKeys keys = ResolveImageTokens(spec);
  chat->image_placeholder = spec.image_placeholder;
  chat->image_start = keys.start;
  chat->image_token = keys.token;
  chat->image_end = keys.end;
  chat->image_tokens = spec.image_tokens;
  chat->image_divisor = (keys.patch_size > 0 ? keys.patch_size : 14) *
                        (keys.merge_size > 0 ? keys.merge_size : 2);
  if (!keys.token.empty()) {
    HR_ASSIGN_OR_RETURN(chat->image_token_id, RequireToken(t, keys.token, "image_token"));
    if (!keys.start.empty()) {
      HR_RETURN_IF_ERROR(RequireToken(t, keys.start, "image_start").status());
    }
    if (!keys.end.empty()) {
      HR_RETURN_IF_ERROR(RequireToken(t, keys.end, "image_end").status());
    }
  }

  chat->video_placeholder = spec.video_placeholder;
  chat->video_token = keys.video_token;
  if (!keys.video_token.empty()) {
    HR_ASSIGN_OR_RETURN(chat->video_token_id, RequireToken(t, keys.video_token, "video_token"));
  }

  chat->max_length = spec.max_length;
  chat->ignore_index = spec.ignore_index;
  if (spec.pad_id >= t.vocab_size()) {
    return Status::InvalidArgument("text.tokenize.pad_id " + std::to_string(spec.pad_id) +
                                   " is outside the tokenizer's vocabulary of " +
                                   std::to_string(t.vocab_size()));
  }
  if (spec.pad_id >= 0) {
    chat->pad_id = spec.pad_id;
  } else if (!config.pad_token.empty() && t.TokenToId(config.pad_token) >= 0) {
    chat->pad_id = t.TokenToId(config.pad_token);
  } else {
    chat->pad_id = 0;
  }
  return chat;
}

Result<int> HfChat::ImageTokens(int width, int height) const {
  if (image_tokens > 0) return image_tokens;
  if (image_divisor <= 0) return 0;
  if (width < image_divisor || height < image_divisor || width % image_divisor != 0 ||
      height % image_divisor != 0) {
    const std::string d = std::to_string(image_divisor);
    return Status::TokenizeError(
        "text.tokenize: an image of " + std::to_string(width) + "x" + std::to_string(height) +
        " is not a multiple of patch_size*merge_size = " + d + " on both sides; its image "
        "token count would differ from the model processor's (which resizes it first): "
        "resize or crop the image to multiples of " + d + ", or set image_tokens");
  }
  return (height / image_divisor) * (width / image_divisor);
}

namespace {

// The occurrences of `placeholder` in `turns`.
int64_t CountPlaceholders(std::string_view placeholder, std::span<const Turn> turns) {
  if (placeholder.empty()) return 0;
  int64_t n = 0;
  for (const Turn& turn : turns) {
    const std::string_view text = turn.text;
    for (size_t at = text.find(placeholder); at != std::string_view::npos;
         at = text.find(placeholder, at + placeholder.size())) {
      ++n;
    }
  }
  return n;
}

// Appends video `v` of `videos` (its timestamps from `*group` on) as TokenizeChat's
// video form writes it.
void ExpandVideo(const HfChat& chat, const VideoCounts& videos, size_t v, size_t* group,
                 std::string* out) {
  const int64_t t = videos.thw[3 * v], hw = videos.thw[3 * v + 1] * videos.thw[3 * v + 2];
  const int64_t per_group = hw / (int64_t{videos.merge_size} * videos.merge_size);
  out->append(chat.image_start);
  if (videos.timestamps.empty()) {
    for (int64_t k = 0; k < t * per_group; ++k) out->append(chat.video_token);
  } else {
    for (int64_t g = 0; g < t; ++g, ++*group) {
      char stamp[48];
      std::snprintf(stamp, sizeof stamp, "<%.1f seconds>",
                    static_cast<double>(videos.timestamps[*group]));
      out->append(stamp).append(chat.image_start);
      for (int64_t k = 0; k < per_group; ++k) out->append(chat.video_token);
      out->append(chat.image_end);
    }
  }
  out->append(chat.image_end);
}

// The forms of TokenizeChat: `count(i)` is the token count of image placeholder i;
// `videos` null: video placeholders stay text.
template <typename Count>
Status TokenizeChatWith(const HfChat& chat, std::span<const Turn> turns, Count&& count,
                        const VideoCounts* videos, int64_t* ids, int64_t* mask,
                        int64_t* labels, bool expand_images = true) {
  if (turns.empty()) return Status::TokenizeError("the conversation has no turns");
  // Per-thread buffers whose capacity settles after a few samples.
  thread_local std::vector<Turn> prepared;
  thread_local std::string sanitized, expansion, rendered;
  thread_local std::vector<std::pair<size_t, size_t>> spans;
  thread_local std::vector<int> tokens;
  thread_local std::vector<uint32_t> starts;

  int64_t placeholder = 0;
  size_t video = 0, group = 0;
  const bool images_expand =
      expand_images && !chat.image_token.empty() && !chat.image_placeholder.empty();
  const bool videos_expand =
      videos != nullptr && !chat.video_token.empty() && !chat.video_placeholder.empty();
  const auto expand = [&] {
    expansion = chat.image_start;
    for (int64_t i = count(placeholder), k = 0; k < i; ++k) expansion += chat.image_token;
    expansion += chat.image_end;
    ++placeholder;
    return std::string_view(expansion);
  };
  prepared.resize(turns.size());
  for (size_t i = 0; i < turns.size(); ++i) {
    prepared[i].role = turns[i].role;
    std::string_view text = turns[i].text;
    if (SanitizeUtf8(text, &sanitized)) text = sanitized;
    std::string& out = prepared[i].text;
    out.clear();
    if (!images_expand && !videos_expand) {  // no expansion
      out.assign(text);
      continue;
    }
    for (size_t at = 0;;) {  // the nearer of the next image and video placeholder
      const size_t image =
          images_expand ? text.find(chat.image_placeholder, at) : std::string_view::npos;
      const size_t clip =
          videos_expand ? text.find(chat.video_placeholder, at) : std::string_view::npos;
      const size_t hit = std::min(image, clip);
      if (hit == std::string_view::npos) {
        out.append(text.substr(at));
        break;
      }
      out.append(text.substr(at, hit - at));
      if (hit == image) {
        out.append(expand());
        at = hit + chat.image_placeholder.size();
      } else {
        if (3 * video + 2 < videos->thw.size()) ExpandVideo(chat, *videos, video, &group, &out);
        ++video;
        at = hit + chat.video_placeholder.size();
      }
    }
  }

  spans.clear();
  HR_RETURN_IF_ERROR(chat.chat_template->RenderWithSpans(prepared, &rendered, &spans));

  // Only as much of the rendering as the row has room for (plus slack for a cut that
  // changes the last tokens before it), doubling until enough.
  const int64_t want = chat.max_length + kLeadingSlackTokens;
  const std::string_view text = rendered;
  for (size_t limit = static_cast<size_t>(want * kLeadingBytesPerToken);; limit *= 2) {
    tokens.clear();
    starts.clear();
    if (limit >= text.size()) {
      chat.tokenizer->Encode(text, /*add_special_tokens=*/false, &tokens, &starts);
      break;
    }
    chat.tokenizer->Encode(text.substr(0, CutBeforeSpace(text, limit)), false, &tokens, &starts);
    if (static_cast<int64_t>(tokens.size()) >= want) break;
  }

  const int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), chat.max_length);
  size_t span = 0;
  for (int64_t i = 0; i < n; ++i) {
    // A token is trained when it overlaps an assistant span, as transformers'
    // assistant masks mark it (a token spanning the template's "\n" and the turn's
    // first characters is trained). Tokens are contiguous: one ends where the next starts.
    const auto k = static_cast<size_t>(i);
    const size_t start = starts[k];
    const size_t end = std::max<size_t>(k + 1 < starts.size() ? starts[k + 1] : text.size(),
                                        start + 1);
    while (span < spans.size() && spans[span].second <= start) ++span;
    const bool trained = span < spans.size() && spans[span].first < end;
    ids[i] = tokens[static_cast<size_t>(i)];
    mask[i] = 1;
    labels[i] = trained ? ids[i] : chat.ignore_index;
  }
  for (int64_t i = n; i < chat.max_length; ++i) {
    ids[i] = chat.pad_id;
    mask[i] = 0;
    labels[i] = chat.ignore_index;
  }
  return Status::Ok();
}

}  // namespace

Status TokenizeChat(const HfChat& chat, std::span<const Turn> turns, int image_tokens,
                    int64_t* ids, int64_t* mask, int64_t* labels) {
  return TokenizeChatWith(chat, turns, [&](int64_t) { return int64_t{image_tokens}; }, nullptr,
                          ids, mask, labels);
}

namespace {

std::string Plural(int64_t n, std::string_view word) {
  return std::to_string(n) + " " + std::string(word) + (n == 1 ? "" : "s");
}

// The tokens of `id` in the written rows against `want`: kTokenizeError when max_length
// cut into them.
// The row holds exactly the `want` vision tokens (`id`, written as `token`) that the
// sample's grids need: fewer when max_length cut into them; more when the messages' own
// text holds the token (a user typing <|image_pad|>), which a model would take for
// features the sample does not have (transformers raises "Image features and image
// tokens do not match" on that batch; a model that does not check trains on garbage).
Status CheckVisionTokens(const HfChat& chat, int id, std::string_view token, int64_t want,
                         int64_t items, std::string_view item, std::string_view token_kind,
                         const int64_t* ids, const int64_t* mask) {
  if (id < 0) return Status::Ok();
  int64_t got = 0;
  for (int64_t i = 0; i < chat.max_length && mask[i] != 0; ++i) got += ids[i] == id;
  if (got == want) return Status::Ok();
  if (got > want) {
    return Status::TokenizeError(
        "the messages' text holds " + Plural(got - want, std::string(token_kind) + " token") +
        " ('" + std::string(token) + "') of its own beside the " + std::to_string(want) +
        " that its " + Plural(items, item) + (items == 1 ? " needs" : " need") +
        ": a model would take " +
        (got - want == 1 ? "it" : "them") + " for " + std::string(item) +
        " features the sample does not have");
  }
  return Status::TokenizeError(
      "max_length " + std::to_string(chat.max_length) + " cuts into the " +
      std::string(token_kind) + " tokens: the " + Plural(items, item) + " need " +
      std::to_string(want) + " " + std::string(token_kind) + " tokens and " +
      std::to_string(got) + " fit (raise max_length, or lower the " + std::string(item) +
      "s' max_pixels)");
}

}  // namespace

Status TokenizeChat(const HfChat& chat, std::span<const Turn> turns,
                    std::span<const int64_t> per_image, std::string_view images, int64_t* ids,
                    int64_t* mask, int64_t* labels) {
  return TokenizeChat(chat, turns, &per_image, images, VideoCounts{}, ids, mask, labels);
}

Status TokenizeChat(const HfChat& chat, std::span<const Turn> turns,
                    const std::span<const int64_t>* per_image, std::string_view images,
                    const VideoCounts& videos, int64_t* ids, int64_t* mask, int64_t* labels) {
  int64_t count = 0;
  if (per_image != nullptr) {
    const int64_t placeholders = CountPlaceholders(chat.image_placeholder, turns);
    count = static_cast<int64_t>(per_image->size());
    if (placeholders != count) {
      return Status::TokenizeError(
          "the conversation has " + Plural(placeholders, "image placeholder") + " ('" +
          chat.image_placeholder + "') and the sample " + Plural(count, "image") + " (" +
          std::string(images) + "): they must agree in number");
    }
  }
  const bool with_videos = !videos.source.empty();
  const auto video_count = static_cast<int64_t>(videos.thw.size() / 3);
  int64_t want_video = 0;
  if (with_videos) {
    const int64_t placeholders = CountPlaceholders(chat.video_placeholder, turns);
    if (placeholders != video_count) {
      return Status::TokenizeError(
          "the conversation has " + Plural(placeholders, "video placeholder") + " ('" +
          chat.video_placeholder + "') and the sample " + Plural(video_count, "video") + " (" +
          std::string(videos.source) + "): they must agree in number");
    }
    int64_t groups = 0;
    const int64_t merge = int64_t{videos.merge_size} * videos.merge_size;
    for (int64_t v = 0; v < video_count; ++v) {
      const int64_t* g = &videos.thw[static_cast<size_t>(3 * v)];
      if (g[0] < 1 || g[1] < 1 || g[2] < 1 || (g[1] * g[2]) % merge != 0) {
        return Status::TokenizeError(
            "text.tokenize: " + std::string(videos.source) + "[" + std::to_string(v) + "] = (" +
            std::to_string(g[0]) + ", " + std::to_string(g[1]) + ", " + std::to_string(g[2]) +
            ") is not a grid of merge_size " + std::to_string(videos.merge_size));
      }
      groups += g[0];
      want_video += g[0] * g[1] * g[2] / merge;
    }
    if (!videos.timestamps.empty() && static_cast<int64_t>(videos.timestamps.size()) != groups) {
      return Status::TokenizeError("text.tokenize: " + std::to_string(videos.timestamps.size()) +
                                   " video timestamps for " + std::to_string(groups) +
                                   " temporal groups of " + std::string(videos.source));
    }
  }
  const auto image_count = [&](int64_t i) {
    if (per_image == nullptr) return int64_t{chat.image_tokens};
    return i < count ? (*per_image)[static_cast<size_t>(i)] : int64_t{0};
  };
  // Without grids, images expand only to a fixed count: a video-only chain leaves <image>
  // as text rather than write empty vision blocks.
  const bool expand_images = per_image != nullptr || chat.image_tokens > 0;
  HR_RETURN_IF_ERROR(TokenizeChatWith(chat, turns, image_count, with_videos ? &videos : nullptr,
                                      ids, mask, labels, expand_images));
  if (per_image != nullptr) {
    int64_t want = 0;
    for (int64_t n : *per_image) want += n;
    HR_RETURN_IF_ERROR(CheckVisionTokens(chat, chat.image_token_id, chat.image_token, want,
                                         count, "image", "image", ids, mask));
  }
  if (with_videos) {
    HR_RETURN_IF_ERROR(CheckVisionTokens(chat, chat.video_token_id, chat.video_token,
                                         want_video, video_count, "video", "video", ids, mask));
  }
  return Status::Ok();
}

}  // namespace headrace
