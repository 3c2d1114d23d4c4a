#include "headrace/formats/source_spec.h"

namespace headrace {

std::vector<SourceFieldSpec> ResolvedFields(const SourceSpec& spec) {
  if (!spec.mix.empty()) {
    // A blend: its entries' layout (the first's; source_mix.cc checks that the others
    // match) and each sample's entry name.
    std::vector<SourceFieldSpec> out = ResolvedFields(spec.mix.front().source);
    out.push_back(SourceFieldSpec{std::string(kMixSourceField), FieldKind::kString,
                                  std::string(kMixSourceField), 0, false});
    return out;
  }
  if (spec.fields.empty()) {
    // The LLaVA form; the order is kImageField, kConversationField.
    return {SourceFieldSpec{"image", FieldKind::kImage, spec.image_field, 0, false},
            SourceFieldSpec{"conversation", FieldKind::kConversation, spec.conversations_field,
                            0, true}};
  }
  std::vector<SourceFieldSpec> out = spec.fields;
  for (SourceFieldSpec& f : out) {
    if (f.key.empty()) f.key = f.name;
  }
  return out;
}

std::vector<std::string> ManifestKeysOf(const SourceFieldSpec& field) {
  std::vector<std::string> out;
  const std::string& key = field.key.empty() ? field.name : field.key;
  size_t start = 0;
  for (;;) {
    const size_t comma = key.find(',', start);
    out.push_back(key.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::vector<SourceField> SourceFieldsOf(const SourceSpec& spec) {
  std::vector<SourceField> out;
  for (const SourceFieldSpec& f : ResolvedFields(spec)) {
    out.push_back(SourceField{f.name, f.kind, f.max_items, f.pad_items});
  }
  return out;
}

}  // namespace headrace
