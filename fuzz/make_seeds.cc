// hr_fuzz_seeds OUT_DIR: writes the seed corpus of every fuzz target, one folder each
// (OUT_DIR/decode, manifest, config, tokenize, hf_tokenize, chat_template, tar, parquet, state,
// pointcloud, video, audio), generated rather than
// checked in: tiny images in every form the decoder handles, manifest lines good and
// bad, the example config and the canonical YAML of a spec with every op,
// conversations, chat templates (real ones and every hostile one of
// hostile_chat_templates.h), small WebDataset shards (whole, truncated) and a shard index, and
// small Parquet files written by Arrow (whole, truncated), point clouds (KITTI, PCD ascii,
// binary and binary_compressed, a lying header), short videos (H.264 in MP4 and MKV,
// MPEG-4 part 2, a truncated MP4) and audio (WAV, FLAC, MP3, Opus, stereo, truncated),
// encoded with the FFmpeg encoders make-sample uses.
#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>
#include <png.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "fuzz/hostile_chat_templates.h"
#include "headrace/formats/parquet_footer_patch.h"
#include "headrace/formats/tar_shard.h"
#include "headrace/ops/av/av_encode.h"
#include "headrace/ops/pointcloud/pointcloud_test_util.h"
#include "headrace/pipeline/config.h"

namespace fs = std::filesystem;

namespace headrace::fuzz {
namespace {

using Bytes = std::vector<uint8_t>;

bool Write(const fs::path& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::fprintf(stderr, "hr_fuzz_seeds: cannot write %s\n", path.c_str());
  return static_cast<bool>(out);
}
bool Write(const fs::path& path, const Bytes& b) { return Write(path, b.data(), b.size()); }
bool Write(const fs::path& path, std::string_view s) { return Write(path, s.data(), s.size()); }

// A small gradient with some edges, `channels` bytes per pixel.
Bytes Pixels(int w, int h, int channels) {
  Bytes p(static_cast<size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        p[(static_cast<size_t>(y) * w + x) * channels + c] =
            static_cast<uint8_t>(x * 29 + y * 13 + c * 71 + ((x / 4 + y / 4) % 2) * 90);
      }
    }
  }
  return p;
}

Bytes Jpeg(int w, int h, int pixel_format, int channels, int subsamp, int quality, int flags) {
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const Bytes pixels = Pixels(w, h, channels);
  Bytes jpeg;
  if (tjCompress2(handle, pixels.data(), w, 0, h, pixel_format, &out, &size, subsamp, quality,
                  flags) == 0) {
    jpeg.assign(out, out + size);
  } else {
    std::fprintf(stderr, "hr_fuzz_seeds: tjCompress2: %s\n", tjGetErrorStr2(handle));
  }
  tjFree(out);
  tjDestroy(handle);
  return jpeg;
}

// `jpeg` with an APP1 Exif segment after SOI whose IFD0 holds Orientation = `orientation`.
Bytes WithExifOrientation(const Bytes& jpeg, int orientation) {
  // clang-format off
  const Bytes segment = {0xFF, 0xE1, 0x00, 0x22, 'E', 'x', 'i', 'f', 0, 0,  // APP1, length 34
                         'M', 'M', 0, 42, 0, 0, 0, 8,                        // TIFF, IFD0 at 8
                         0, 1,                                               // one entry
                         0x01, 0x12, 0, 3, 0, 0, 0, 1,                       // Orientation SHORT
                         0, static_cast<uint8_t>(orientation), 0, 0,         //   value
                         0, 0, 0, 0};                                        // no next IFD
  // clang-format on
  Bytes out(jpeg.begin(), jpeg.begin() + 2);
  out.insert(out.end(), segment.begin(), segment.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

Bytes Png(int w, int h, uint32_t format) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = w;
  image.height = h;
  image.format = format;
  const Bytes pixels = Pixels(w, h, PNG_IMAGE_PIXEL_SIZE(format));
  Bytes colormap;
  if (format & PNG_FORMAT_FLAG_COLORMAP) {
    image.colormap_entries = 256;
    colormap = Pixels(16, 16, PNG_IMAGE_SAMPLE_CHANNELS(format));
  }
  png_alloc_size_t size = 0;
  const void* cmap = colormap.empty() ? nullptr : colormap.data();
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, cmap)) return {};
  Bytes png(size);
  if (!png_image_write_to_memory(&image, png.data(), &size, 0, pixels.data(), 0, cmap)) {
    std::fprintf(stderr, "hr_fuzz_seeds: png: %s\n", image.message);
    return {};
  }
  png.resize(size);
  return png;
}

Bytes Webp(int w, int h, int channels, float quality) {
  const Bytes pixels = Pixels(w, h, channels);
  uint8_t* out = nullptr;
  size_t size = 0;
  const int stride = w * channels;
  if (quality < 0) {
    size = channels == 4 ? WebPEncodeLosslessRGBA(pixels.data(), w, h, stride, &out)
                         : WebPEncodeLosslessRGB(pixels.data(), w, h, stride, &out);
  } else {
    size = channels == 4 ? WebPEncodeRGBA(pixels.data(), w, h, stride, quality, &out)
                         : WebPEncodeRGB(pixels.data(), w, h, stride, quality, &out);
  }
  Bytes webp(out, out + size);
  WebPFree(out);
  return webp;
}

bool DecodeSeeds(const fs::path& dir) {
  bool ok = true;
  ok &= Write(dir / "rgb444.jpg", Jpeg(8, 6, TJPF_RGB, 3, TJSAMP_444, 90, 0));
  ok &= Write(dir / "rgb420.jpg", Jpeg(17, 9, TJPF_RGB, 3, TJSAMP_420, 50, 0));
  ok &= Write(dir / "gray.jpg", Jpeg(9, 7, TJPF_GRAY, 1, TJSAMP_GRAY, 75, 0));
  ok &= Write(dir / "cmyk.jpg", Jpeg(8, 8, TJPF_CMYK, 4, TJSAMP_444, 90, 0));
  ok &=
      Write(dir / "progressive.jpg", Jpeg(16, 12, TJPF_RGB, 3, TJSAMP_422, 80, TJFLAG_PROGRESSIVE));
  ok &=
      Write(dir / "exif6.jpg", WithExifOrientation(Jpeg(12, 5, TJPF_RGB, 3, TJSAMP_420, 80, 0), 6));
  ok &=
      Write(dir / "exif3.jpg", WithExifOrientation(Jpeg(7, 4, TJPF_RGB, 3, TJSAMP_444, 80, 0), 3));
  ok &= Write(dir / "rgb.png", Png(7, 5, PNG_FORMAT_RGB));
  ok &= Write(dir / "rgba.png", Png(6, 6, PNG_FORMAT_RGBA));
  ok &= Write(dir / "gray.png", Png(5, 9, PNG_FORMAT_GRAY));
  ok &= Write(dir / "rgba16.png", Png(4, 3, PNG_FORMAT_LINEAR_RGB_ALPHA));
  ok &= Write(dir / "palette.png", Png(8, 4, PNG_FORMAT_RGB_COLORMAP));
  ok &= Write(dir / "lossy.webp", Webp(10, 6, 3, 60));
  ok &= Write(dir / "lossy_alpha.webp", Webp(6, 6, 4, 60));
  ok &= Write(dir / "lossless.webp", Webp(5, 7, 4, -1));
  return ok;
}

bool ManifestSeeds(const fs::path& dir) {
  constexpr std::string_view kGood =
      R"({"id": "000001", "image": "images/000001.jpg", "conversations": [{"from": "human", "value": "<image>\nWhat colour is the bus?"}, {"from": "gpt", "value": "Blue."}]})";
  // A byte-order mark, CRLF and blank lines, then one line per way a record can go wrong.
  constexpr std::string_view kMixed[] = {
      kGood,
      R"({"id": 2, "image": null, "conversations": [{"from": "system", "value": "s"}, {"from": "user", "value": "u"}, {"from": "assistant", "value": "a"}]})"
      "\r",
      "",
      "   ",
      R"({"id": "3", "image": "a/./b//../c.png", "conversations": []})",
      R"({"id": "4", "image": "../outside.jpg", "conversations": []})",
      R"({"id": "5", "image": "/data/set/abs.jpg", "conversations": []})",
      R"({"id": "6", "image": "s3://bucket/set/x.jpg", "conversations": []})",
      R"({"id": "7", "conversations": [{"from": "robot", "value": "?"}]})",
      R"({"id": 1.5, "conversations": [{"from": "gpt"}]})",
      R"(["not", "an", "object"])",
      R"({"id": "8", "conversations": [{"from": "gpt", "value": "\u00e9\ud83d\ude8c"}]})",
      "not json",
      R"({"id": "9", "image": "", "conversations": {}})",
  };
  std::string mixed = "\xEF\xBB\xBF";
  for (std::string_view line : kMixed) mixed.append(line).append("\n");
  // The same records as one JSON array (LLaVA's files), a missing value among them.
  std::string array = "[\n";
  for (std::string_view line : kMixed) {
    if (line.empty()) continue;
    array.append(line.ends_with('\r') ? line.substr(0, line.size() - 1) : line).append(" ,\n");
  }
  array.append(", ").append(kGood).append("]\n");
  return Write(dir / "good.jsonl", std::string(kGood) + "\n") && Write(dir / "mixed.jsonl", mixed) &&
         Write(dir / "mixed_array.json", array);
}

bool ConfigSeeds(const fs::path& dir, const fs::path& source_dir) {
  bool ok = true;
  for (const char* example : {"examples/vqa.yaml"}) {
    std::ifstream in(source_dir / example, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) {
      std::fprintf(stderr, "hr_fuzz_seeds: cannot read %s\n", (source_dir / example).c_str());
      return false;
    }
    ok &= Write(dir / fs::path(example).filename(),
                text.str() +
                    "#--set\nbatch.size=64\nops.1.image.resize.shorter_side=320\n"
                    "memory.budget_bytes=1.5GiB\nops.4.image.normalize.mean=[0.5,0.5,0.5]\n");
  }
  // The canonical YAML of a spec with every op names every key there is.
  PipelineSpec spec;
  spec.source.manifest = "data/sample/manifest.jsonl";
  spec.ops = {DecodeSpec{},
              RandomResizedCropSpec{.width = 224, .height = 224},
              FlipSpec{},
              ResizeSpec{.shorter_side = 256},
              CenterCropSpec{.width = 224, .height = 224},
              NormalizeSpec{},
              TokenizeSpec{.model = "tokenizer.model"}};
  ok &= Write(dir / "canonical.yaml", PipelineSpecToYaml(spec));
  ok &= Write(dir / "overrides.yaml",
              "source: {manifest: m.jsonl}\nops: [image.decode, image.flip]\n#--set\n"
              "ops[1].image.flip.p=0.25\nops.2={image.normalize: {dtype: bf16, layout: hwc}}\n"
              "execution.io_budget_bytes=64 MB\nstorage.endpoint=http://localhost:9000\n");
  // Issue 26's hostile configs: a second YAML document (was run as the first alone), real
  // parameters that overflowed where they became integers, and a shard pattern of 10^10
  // names (refused by the shard source, counted before it expands).
  ok &= Write(dir / "two-documents.yaml",
              "source: {manifest: m.jsonl}\n---\nbatch: {size: 2}\n---\n");
  ok &= Write(dir / "huge-reals.yaml",
              "source: {manifest: m.jsonl}\nops:\n  - audio.decode: {max_seconds: 1e300, "
              "field: image}\n  - video.decode: {fps: 1e-300, field: image}\n"
              "  - pointcloud.voxelize: {voxel_size: [1e-300, 1, 1]}\n");
  ok &= Write(dir / "brace-bomb.yaml",
              "source: {shards: 's-{0..99999}{0..99999}{0..99999}.tar'}\n");
  return ok;
}

bool TokenizeSeeds(const fs::path& dir) {
  // max_length - 1, flags, then role byte + text per turn, separated by 0x00.
  using namespace std::string_literals;
  bool ok =
      Write(dir / "chat", "\x7f\x03\x01<image>\nWhat colour is the bus?\0\x02The bus is blue.\0"s);
  ok &= Write(dir / "system",
              "\x0f\x01\x03"
              "Describe it.\0\x01What?\0\x02"
              "A cat.\0\x01"
              "And?"s);
  ok &= Write(dir / "unicode",
              "\xff\x02\x02\xc3\xa9\xe7\x8c\xab\xf0\x9f\x9a\x8c \xff\xfe bad\0\x01\n\n\t"s);
  return ok;
}

bool HfTokenizeSeeds(const fs::path& dir) {
  // max_length - 1, images per placeholder, then role byte + text per turn, by 0x00.
  using namespace std::string_literals;
  bool ok = Write(dir / "chat",
                  "\x7f\x04\x01<image>\nWhat colour is the bus?\0\x02The bus is blue.\0"s);
  ok &= Write(dir / "system", "\x0f\x01\x00Be brief.\0\x01<image><image>What?\0\x02A cat.\0"s);
  ok &= Write(dir / "unicode",
              "\xff\x02\x02e\xcc\x81\xe7\x8c\xab\xf0\x9f\x9a\x8c   \xff\xfe bad<|im_end|>\0\x01\n\n\t"s);
  // Issue 25: a long run of out-of-order combining marks (U+0301 U+0316 repeated: NFC
  // reorders every pair; it was quadratic, 38 s for 320 KB), opening an assistant turn.
  std::string marks = "\xff\x00\x01Q\0\x02a"s;
  for (int i = 0; i < 8000; ++i) marks += "\xcc\x81\xcc\x96";
  ok &= Write(dir / "marks_out_of_order", marks);
  // Letters PCRE2 10.42 does not know (Kawi U+11F04, Gurung Khema U+16100), U+180E (not
  // white space to the reference), a Unicode 14 mark the reference's NFC does not order.
  ok &= Write(dir / "new_unicode",
              "\x3f\x00\x01\xf0\x91\xbc\x84\xf0\x91\xbc\x85 \xf0\x96\x84\x80x\xe1\xa0\x8e"
              "\xe1\xa0\x8e y a\xe1\xab\x81\xcc\x96\0\x02ok"s);
  return ok;
}

bool ChatTemplateSeeds(const fs::path& dir) {
  using namespace std::string_literals;
  // Templates in the forms models ship: ChatML (Qwen), Llama 3's headers with trim, a
  // strict one that raises on roles out of order, and one with a macro and a namespace.
  bool ok = Write(dir / "chatml",
                  "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                  "{{ message['content'] }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  ok &= Write(dir / "llama3",
              "{{ bos_token }}{% for message in messages %}{% set content = "
              "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + "
              "message['content'] | trim + '<|eot_id|>' %}{{ content }}{% endfor %}"
              "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>"
              "\n\n{% endif %}");
  ok &= Write(dir / "strict",
              "{% for message in messages %}{% if (message['role'] == 'user') != "
              "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
              "alternate user/assistant') }}{% endif %}{{ message['content'] }}{% endfor %}\0"
              "\x01a\0\x02b\0\x02c"s);
  ok &= Write(dir / "macro_namespace",
              "{% macro turn(m) %}[{{ m.role | upper }}] {{ m.content | replace('a', 'b') }}"
              "{% endmacro %}{% set ns = namespace(n=0) %}{% for m in messages %}"
              "{% set ns.n = ns.n + m.content|length %}{{ turn(m) }}{% endfor %}"
              "{{ ns.n // 2 }} {{ messages | map(attribute='role') | join(',') }}");
  // The deeply nested ones cut to 16 KiB: still far past the depth limit, and a mutant
  // then runs in a millisecond, not 60 (the whole 480 KB of nested ifs is tokenized first).
  for (const HostileTemplate& h : HostileChatTemplates()) {
    ok &= Write(dir / ("hostile_" + h.name), std::string_view(h.source).substr(0, 16 << 10));
  }
  return ok;
}

bool TarSeeds(const fs::path& dir) {
  const auto add = [](TarWriter& w, const std::string& name, std::string_view data) {
    return w.Add(name, {reinterpret_cast<const uint8_t*>(data.data()), data.size()}).ok();
  };
  auto writer = TarWriter::Open((dir / "shard.tar").string());
  if (!writer.ok()) return false;
  TarWriter& w = **writer;
  // Pairs, a field with a dot, a long name (a pax header), a sample without its json, a
  // key seen again, a duplicate field, an empty member.
  bool ok = add(w, "000000.jpg", "\xff\xd8\xff\xe0jpeg") && add(w, "000000.json", "{\"id\":0}") &&
            add(w, "dir/000001.seg.png", "png") && add(w, "dir/000001.json", "{}") &&
            add(w, std::string(120, 'd') + "/000002.json", "{}") && add(w, "000003.jpg", "") &&
            add(w, "000000.txt", "again") && add(w, "000004.json", "a") &&
            add(w, "000004.json", "b");
  ok &= (*writer)->Close().ok();
  const std::string shard = [&] {
    std::ifstream in(dir / "shard.tar", std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }();
  ok &= !shard.empty() && Write(dir / "truncated.tar", std::string_view(shard).substr(0, 1700));
  ok &= Write(dir / "index.json",
              R"({"format":"headrace.shard_index","version":1,"shard":"s.tar","bytes":4096,)"
              R"("samples":[{"key":"000000","fields":{"jpg":[512,9],"json":[1536,8]}}]})");
  // Issue 26's damaged shards: a member header that fails its checksum (the sample before
  // it must stay good), and indexes that cannot be trusted: cut short, an unknown
  // version, a negative or too-small size, and more entries than a small shard can hold.
  std::string damaged = shard;
  if (damaged.size() > 2048 + 148) damaged[2048 + 148] ^= 0x7;
  ok &= Write(dir / "damaged_header.tar", damaged);
  const std::string index_head = R"({"format":"headrace.shard_index","version":)";
  ok &= Write(dir / "index_cut.json", index_head + R"(1,"shard":"s.tar","by)");
  ok &= Write(dir / "index_version.json", index_head + R"(9,"shard":"s.tar","bytes":4096,"samples":[]})");
  ok &= Write(dir / "index_negative.json", index_head + R"(1,"shard":"s.tar","bytes":-1,"samples":[]})");
  ok &= Write(dir / "index_small.json",
              index_head + R"(1,"shard":"s.tar","bytes":600,)"
                           R"("samples":[{"key":"000000","fields":{"jpg":[512,9],"json":[1536,8]}}]})");
  std::string many = index_head + R"(1,"shard":"s.tar","bytes":1099511627776,"samples":[)";
  for (int i = 0; i < 2000; ++i) {
    many += (i > 0 ? "," : "") + std::string(R"({"key":")") + std::to_string(i) +
            R"(","fields":{"jpg":[)" + std::to_string(512 + i * 1024) + ",1]}}";
  }
  ok &= Write(dir / "index_many.json", many + "]}");
  return ok;
}

// Parquet files as Arrow writes them: every column kind parquet_table reads (bytes
// with nulls, string, int64, double, bool, struct<bytes, path>), one it does not (a
// list), several row groups; snappy, zstd and uncompressed; a dictionary-encoded column;
// and a copy cut short.
std::string ParquetFile(int rows, int64_t rows_per_group, arrow::Compression::type codec) {
  arrow::BinaryBuilder image;
  arrow::StringBuilder text;
  arrow::Int64Builder id;
  arrow::DoubleBuilder score;
  arrow::BooleanBuilder flag;
  auto media_type =
      arrow::struct_({arrow::field("bytes", arrow::binary()), arrow::field("path", arrow::utf8())});
  auto media_bytes = std::make_shared<arrow::BinaryBuilder>();
  auto media_path = std::make_shared<arrow::StringBuilder>();
  arrow::StructBuilder media(media_type, arrow::default_memory_pool(), {media_bytes, media_path});
  arrow::ListBuilder tags(arrow::default_memory_pool(), std::make_shared<arrow::Int64Builder>());
  bool ok = true;
  const Bytes jpeg = Jpeg(8, 8, TJPF_RGB, 3, TJSAMP_420, 80, 0);
  const std::string_view jpeg_view(reinterpret_cast<const char*>(jpeg.data()), jpeg.size());
  for (int i = 0; i < rows; ++i) {
    ok &= (i % 3 == 1 ? image.AppendNull() : image.Append(jpeg_view)).ok();
    ok &= text.Append(i % 2 ? "a cat" : "a bus").ok();
    ok &= id.Append(i).ok();
    ok &= (i % 4 == 2 ? score.AppendNull() : score.Append(i * 0.5)).ok();
    ok &= flag.Append(i % 2 == 0).ok();
    if (i % 5 == 4) {
      ok &= media.AppendNull().ok();
    } else {
      ok &= media.Append().ok() &&
            (i % 2 ? media_bytes->AppendNull() : media_bytes->Append("bytes")).ok() &&
            media_path->Append("x.jpg").ok();
    }
    ok &= tags.Append().ok();
  }
  std::vector<std::shared_ptr<arrow::Array>> arrays(7);
  ok &= image.Finish(&arrays[0]).ok() && text.Finish(&arrays[1]).ok() &&
        id.Finish(&arrays[2]).ok() && score.Finish(&arrays[3]).ok() &&
        flag.Finish(&arrays[4]).ok() && media.Finish(&arrays[5]).ok() &&
        tags.Finish(&arrays[6]).ok();
  if (!ok) return "";
  auto schema =
      arrow::schema({arrow::field("image", arrow::binary()), arrow::field("text", arrow::utf8()),
                     arrow::field("id", arrow::int64()), arrow::field("score", arrow::float64()),
                     arrow::field("flag", arrow::boolean()), arrow::field("media", media_type),
                     arrow::field("tags", arrow::list(arrow::int64()))});
  auto sink = arrow::io::BufferOutputStream::Create().ValueOrDie();
  auto properties = parquet::WriterProperties::Builder().compression(codec)->build();
  if (!parquet::arrow::WriteTable(*arrow::Table::Make(schema, arrays), arrow::default_memory_pool(),
                                  sink, rows_per_group, properties)
           .ok()) {
    return "";
  }
  std::shared_ptr<arrow::Buffer> bytes = sink->Finish().ValueOrDie();
  return bytes->ToString();
}

bool ParquetSeeds(const fs::path& dir) {
  const std::string snappy = ParquetFile(10, 4, arrow::Compression::SNAPPY);
  bool ok = !snappy.empty() && Write(dir / "snappy.parquet", snappy);
  ok &= Write(dir / "zstd.parquet", ParquetFile(6, 3, arrow::Compression::ZSTD));
  ok &= Write(dir / "plain.parquet", ParquetFile(3, 3, arrow::Compression::UNCOMPRESSED));
  ok &= Write(dir / "truncated.parquet", std::string_view(snappy).substr(0, snappy.size() / 2));
  // Issue 26's damaged footers: a footer length past the file, pages past its end, row
  // groups that declare 2^31 and 2^40 rows (alone, and with every column chunk agreeing).
  std::string long_footer = snappy;
  if (long_footer.size() >= 8) long_footer.replace(long_footer.size() - 8, 4, "\xff\xff\xff\x0f", 4);
  ok &= Write(dir / "footer_length.parquet", long_footer);
  const auto patched = [](const std::string& file, std::vector<std::vector<int16_t>> paths,
                          int64_t value) {
    Buffer bytes = *Buffer::CopyOf(file.data(), file.size());
    for (auto& path : paths) bytes = FooterPatcher::SetI64(bytes, std::move(path), value);
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  const std::string one_group = ParquetFile(6, 6, arrow::Compression::UNCOMPRESSED);
  ok &= Write(dir / "pages_past_end.parquet", patched(snappy, {{4, 1, 3, 9}, {4, 1, 3, 11}}, int64_t{1} << 30));
  ok &= Write(dir / "rows_2_31.parquet", patched(one_group, {{4, 3}, {3}}, int64_t{1} << 31));
  ok &= Write(dir / "rows_2_40.parquet", patched(one_group, {{4, 3}, {3}}, int64_t{1} << 40));
  ok &= Write(dir / "rows_and_values_2_40.parquet",
              patched(one_group, {{4, 1, 3, 5}, {4, 3}, {3}}, int64_t{1} << 40));
  return ok;
}

bool PointCloudSeeds(const fs::path& dir) {
  std::vector<float> p;
  for (int i = 0; i < 12; ++i) p.insert(p.end(), {0.5f * i - 3, 1.5f - 0.25f * i, 0.1f * i, 0.5f});
  const auto* raw = reinterpret_cast<const uint8_t*>(p.data());
  const Bytes kitti(raw, raw + p.size() * sizeof(float));
  const std::string header =
      "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS x y z intensity\n"
      "SIZE 4 4 4 4\nTYPE F F F F\nCOUNT 1 1 1 1\nWIDTH 12\nHEIGHT 1\n"
      "VIEWPOINT 0 0 0 1 0 0 0\nPOINTS 12\nDATA ";
  Bytes binary(header.begin(), header.end());
  const std::string data_line = "binary\n";
  binary.insert(binary.end(), data_line.begin(), data_line.end());
  binary.insert(binary.end(), kitti.begin(), kitti.end());
  std::string ascii = header + "ascii\n";
  for (int i = 0; i < 12; ++i) ascii += std::to_string(i) + " -1.5 0.25 " + (i % 3 ? "1" : "nan") + "\n";
  std::string mixed = "FIELDS x rgb y z\nSIZE 8 4 2 1\nTYPE F U I U\nCOUNT 1 1 1 1\nWIDTH 2\nPOINTS 2\nDATA binary\n";
  mixed += std::string(2 * 15, '\x01');
  bool ok = Write(dir / "scan.bin", kitti);
  ok &= Write(dir / "binary.pcd", binary);
  ok &= Write(dir / "ascii.pcd", ascii);
  ok &= Write(dir / "mixed.pcd", mixed);
  ok &= Write(dir / "compressed.pcd", testing::PcdCompressed(p));
  ok &= Write(dir / "lying.pcd", std::string_view(ascii).substr(0, ascii.size() - 20));
  return ok;
}

// A few frames, small: libFuzzer mutates every byte, and each execution decodes them all.
bool VideoSeeds(const fs::path& dir) {
  av::VideoClip clip;
  clip.width = 32;
  clip.height = 24;
  clip.frames = 6;
  clip.fps = 5;
  clip.gop = 3;
  clip.paint = [](int frame, uint8_t* rgb) {
    for (int i = 0; i < 32 * 24; ++i) {
      rgb[3 * i] = static_cast<uint8_t>(frame * 40);
      rgb[3 * i + 1] = static_cast<uint8_t>(i % 32 * 8);
      rgb[3 * i + 2] = static_cast<uint8_t>(i / 32 * 10);
    }
  };
  bool ok = true;
  for (const auto& [name, codec, ext] : {std::tuple{"h264.mp4", "libx264", "mp4"},
                                         std::tuple{"h264.mkv", "libx264", "mkv"},
                                         std::tuple{"mpeg4.mp4", "mpeg4", "mp4"}}) {
    clip.codec = codec;
    Result<Bytes> bytes = av::EncodeVideo(clip, ext);
    ok &= bytes.ok() && Write(dir / name, *bytes);
    if (ok && std::string_view(name) == "h264.mp4") {
      ok &= Write(dir / "truncated.mp4", Bytes(bytes->begin(), bytes->begin() + bytes->size() * 2 / 3));
    }
  }
  return ok;
}

// A quarter second of a tone in each codec audio.decode's tests use.
bool AudioSeeds(const fs::path& dir) {
  bool ok = true;
  for (const auto& [name, codec, ext, rate, channels] :
       {std::tuple{"tone.wav", "pcm_s16le", "wav", 8000, 1},
        std::tuple{"stereo.wav", "pcm_s16le", "wav", 11025, 2},
        std::tuple{"tone.flac", "flac", "flac", 8000, 1},
        std::tuple{"tone.mp3", "libmp3lame", "mp3", 16000, 1},
        std::tuple{"tone.opus", "libopus", "opus", 48000, 2}}) {
    av::AudioClip clip;
    clip.sample_rate = rate;
    clip.channels = channels;
    clip.seconds = 0.25;
    clip.codec = codec;
    clip.sample = [rate = rate](int64_t i, int c) {
      return static_cast<float>(0.5 * std::sin(2 * M_PI * 440 * (c + 1) * static_cast<double>(i) / rate));
    };
    Result<Bytes> bytes = av::EncodeAudio(clip, ext);
    ok &= bytes.ok() && Write(dir / name, *bytes);
    if (ok && std::string_view(name) == "tone.wav") {
      ok &= Write(dir / "truncated.wav", Bytes(bytes->begin(), bytes->begin() + bytes->size() / 2));
    }
  }
  return ok;
}

// Loader states (state_fuzz.cc's encoding: a byte below 0x80 is that value, 0x80 the
// next 8 bytes): bounds of 80 samples, 20 batches an epoch and no blend, then honest
// ranks (a plain one, two packed ones at batch 3, one in the rest of an epoch) and
// issue 50's lies (world_size 0, batch_in_epoch 2^62, a pack window of one sample 8
// times, pack.delivered 2^40).
bool StateSeeds(const fs::path& dir) {
  auto big = [](Bytes& b, int64_t v) {
    b.push_back(0x80);
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  };
  const Bytes bounds = {80, 80, 20, 0, 0};
  // rank, world, batch, epoch, batch_in_epoch, flags(1: per epoch, 2: pack, 4: rest), ...
  const Bytes plain = {0, 2, 4, 1, 3, 1, 10};
  const Bytes packed0 = {0, 2, 4, 1, 3, 3, 10, 1, 2, 3, 0, 2, 7, 9};
  const Bytes packed1 = {1, 2, 4, 1, 3, 3, 10, 1, 2, 3, 0, 1, 11};
  const Bytes rest = {0, 1, 4, 1, 2, 4, 1, 20, 3, 5, 6, 7};
  Bytes lies = bounds;
  lies.insert(lies.end(), {0, 0, 4, 1, 3, 0});  // world_size 0
  lies.insert(lies.end(), {0, 2, 4, 1});
  big(lies, int64_t{1} << 62);
  lies.push_back(0);
  lies.insert(lies.end(), {1, 2, 4, 1, 3, 3, 10, 1, 2, 3, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0});
  Bytes delivered = bounds;
  delivered.insert(delivered.end(), {0, 1, 4, 1, 3, 3, 10, 1, 2, 3});
  big(delivered, int64_t{1} << 40);
  delivered.push_back(0);
  auto cat = [&](std::initializer_list<const Bytes*> parts) {
    Bytes b;
    for (const Bytes* p : parts) b.insert(b.end(), p->begin(), p->end());
    return b;
  };
  return Write(dir / "plain", cat({&bounds, &plain})) &&
         Write(dir / "packed", cat({&bounds, &packed0, &packed1})) &&
         Write(dir / "rest", cat({&bounds, &rest})) && Write(dir / "lies", lies) &&
         Write(dir / "delivered", delivered);
}

// Blends (blend_fuzz.cc's encoding, ValueReader: a byte below 0x80 is that value, 0x80
// the next 8 bytes; weights in eighths): two parts 0.6/0.3 first_exhausted, three parts
// all_exhausted, epochized with a repeat of 2, samples 50, a continuation; and issue
// 50's: weights 1 and 1e-12 all_exhausted (walked toward 2^36 before), samples 2^36 - 1.
bool BlendSeeds(const fs::path& dir) {
  auto big = [](Bytes& b, int64_t v) {
    b.push_back(0x80);
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  };
  auto dbl = [&](Bytes& b, double v) {
    int64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    big(b, bits);
  };
  // parts-1, then per part: size, weight, repeat; until, samples, continuation?, shuffle,
  // seed, epoch.
  const Bytes first = {1, 40, 48, 8, 20, 24, 8, 0, 0, 0, 1, 7, 0};
  const Bytes all = {2, 30, 8, 8, 50, 16, 8, 5, 24, 8, 1, 0, 0, 1, 9, 2};
  const Bytes epochized = {1, 10, 8, 16, 20, 8, 8, 3, 0, 0, 1, 3, 1};
  const Bytes samples = {1, 10, 8, 8, 20, 8, 8, 2, 50, 0, 0, 0, 0};
  const Bytes resumed = {1, 40, 48, 8, 20, 24, 8, 0, 0, 1, 5, 3, 1, 4, 0};
  Bytes tiny = {1, 100, 8, 8, 100};
  dbl(tiny, 1e-12);
  tiny.insert(tiny.end(), {8, 1, 0, 0, 0, 0, 0});
  Bytes huge = {0, 100, 8, 8, 2};
  big(huge, (int64_t{1} << 36) - 1);
  huge.insert(huge.end(), {0, 0, 0, 0});
  return Write(dir / "first_exhausted", first) && Write(dir / "all_exhausted", all) &&
         Write(dir / "epochized", epochized) && Write(dir / "samples", samples) &&
         Write(dir / "resumed", resumed) && Write(dir / "tiny_weight", tiny) &&
         Write(dir / "huge_samples", huge);
}

}  // namespace
}  // namespace headrace::fuzz

int main(int argc, char** argv) {
  using namespace headrace::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* target :
       {"decode", "manifest", "config", "tokenize", "hf_tokenize", "chat_template", "tar",
        "parquet", "pointcloud", "video", "audio", "state", "blend"}) {
    fs::create_directories(out / target);
  }
  const bool ok = DecodeSeeds(out / "decode") && ManifestSeeds(out / "manifest") &&
                  ConfigSeeds(out / "config", HEADRACE_SOURCE_DIR) &&
                  TokenizeSeeds(out / "tokenize") && HfTokenizeSeeds(out / "hf_tokenize") &&
                  ChatTemplateSeeds(out / "chat_template") && TarSeeds(out / "tar") &&
                  ParquetSeeds(out / "parquet") && PointCloudSeeds(out / "pointcloud") &&
                  VideoSeeds(out / "video") && AudioSeeds(out / "audio") &&
                  StateSeeds(out / "state") && BlendSeeds(out / "blend");
  return ok ? 0 : 1;
}
