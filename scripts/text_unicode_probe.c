/* Helper of scripts/gen_text_unicode_tables.py: prints, per code point, what the
 * libraries text.tokenize links (PCRE2, utf8proc) think of it:
 *   cp  general-category-index  is-\s  ccc  NFD  NFKD  NFC  NFKC   (hex, '.'-joined)
 * The category index is into kCategories below, as PCRE2 (UTF+UCP) matches \p{..}. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

static const char* kCategories[] = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl",
                                    "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc",
                                    "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cn"};
enum { kCount = sizeof kCategories / sizeof *kCategories };

static pcre2_code* Compile(const char* pattern) {
  int error;
  PCRE2_SIZE offset;
  pcre2_code* c = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &error, &offset, NULL);
  pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
  return c;
}

static void PrintForm(const utf8proc_uint8_t* s, utf8proc_ssize_t n, int options) {
  utf8proc_uint8_t* out = NULL;
  utf8proc_ssize_t m = utf8proc_map(s, n, &out, (utf8proc_option_t)(options | UTF8PROC_STABLE));
  putchar(' ');
  for (utf8proc_ssize_t i = 0; i < m;) {
    utf8proc_int32_t cp;
    i += utf8proc_iterate(out + i, m - i, &cp);
    printf(i < m ? "%x." : "%x", cp);
  }
  free(out);
}

int main(void) {
  pcre2_code* cat[kCount];
  char pattern[16];
  for (int k = 0; k < kCount; ++k) {
    snprintf(pattern, sizeof pattern, "\\p{%s}", kCategories[k]);
    cat[k] = Compile(pattern);
  }
  pcre2_code* space = Compile("\\s");
  pcre2_match_data* md = pcre2_match_data_create(1, NULL);
  for (utf8proc_int32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    utf8proc_uint8_t s[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(cp, s);
    int which = -1;
    for (int k = 0; k < kCount && which < 0; ++k) {
      if (pcre2_match(cat[k], s, (PCRE2_SIZE)n, 0, 0, md, NULL) > 0) which = k;
    }
    const int ws = pcre2_match(space, s, (PCRE2_SIZE)n, 0, 0, md, NULL) > 0;
    printf("%x %d %d %d", cp, which, ws, utf8proc_get_property(cp)->combining_class);
    PrintForm(s, n, UTF8PROC_DECOMPOSE);
    PrintForm(s, n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    PrintForm(s, n, UTF8PROC_COMPOSE);
    PrintForm(s, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    putchar('\n');
  }
  return 0;
}
