"""Trains small byte-level BPE tokenizers in the shapes real VLMs ship, with the
`tokenizers` package, for text.tokenize's `tokenizer:` parameter, its tests and benchmark.

    python tools/make_hf_tokenizer.py --out data/sample/hf --style qwen2

writes `tokenizer.json` and `tokenizer_config.json` (with the style's chat template) to
--out. The styles copy the configuration of the real files, not their vocabularies:
  qwen2   NFC normalizer; Split(Qwen2 regex, Isolated) + ByteLevel; ChatML template
          with <|im_start|>/<|im_end|> and the vision tokens; merges as "a b" strings
  llama3  no normalizer; Split(Llama-3 regex) + ByteLevel; ignore_merges; a
          TemplateProcessing post-processor adding <|begin_of_text|>; the Llama 3
          header template; merges as [a, b] pairs
"""
import argparse
import json
import random
from pathlib import Path

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                 "<|vision_end|>", "<|image_pad|>"]
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|eot_id|>"]

# ChatML as Qwen2-VL renders string contents: a default system turn, each turn between
# <|im_start|>role\n and <|im_end|>\n.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# Llama 3's: BOS, then per turn a header, two newlines, the trimmed content and <|eot_id|>.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}"
    "{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")

_WORDS = ("the a of to and in is it you that he was for on are with as I his they be at one "
          "have this from or had by word but what some we can out other were all there when "
          "colour image photo left right bus cat dog red blue green yellow circle square "
          "don't I'm we've they'll she'd it's YOU'RE HE'S Café naïve résumé Ünïcödé").split()
_CJK = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出要就下得可你年生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双"
_KANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコ"
_HANGUL = "한국어조선말안녕하세요감사합니다"
_ARABIC = ["مرحبا", "بالعالم", "كيف", "حالك", "اللغة", "العربية", "صورة", "قطة", "أزرق", "١٢٣", "٤٥٦"]
_EMOJI = ["😀", "🚌", "🐱", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "🔥", "✨", "🤖"]
_CODE = ["def f(x):\n    return x*2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
         "if x != None and y >= 3.14:", "#include <vector>\n", "arr[::-1]", "λx.x+1",
         "{\"key\": [1, 2, 3]}", "SELECT * FROM t WHERE id=42;", "0x1F600 == 128512", "a_b-c.d/e\\f"]
_SPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "    \n", "\u00a0", "\u3000",
          "\u2009", "\n\n\n   ", "\t\t"]
_COMBINING = ["e\u0301", "a\u0308", "n\u0303", "\u1100\u1161", "o\u0302\u0323", "A\u030a",
              "\u2126", "\u212b", "\uf900", "\u0958"]  # the last four change under NFC alone
_NUMBERS = ["0", "7", "42", "123", "2024", "3.14159", "1,000,000", "12345678", "٣", "½", "Ⅻ"]


def _piece(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.35:
        w = rng.choice(_WORDS)
        return w.capitalize() if rng.random() < 0.1 else w.upper() if rng.random() < 0.05 else w
    if kind < 0.50:
        return "".join(rng.choice(_CJK) for _ in range(rng.randint(1, 8)))
    if kind < 0.55:
        return "".join(rng.choice(_KANA + _HANGUL) for _ in range(rng.randint(1, 6)))
    if kind < 0.62:
        return rng.choice(_ARABIC)
    if kind < 0.67:
        return "".join(rng.choice(_EMOJI) for _ in range(rng.randint(1, 3)))
    if kind < 0.73:
        return rng.choice(_CODE)
    if kind < 0.78:
        return rng.choice(_NUMBERS)
    if kind < 0.82:
        return rng.choice(_COMBINING)
    if kind < 0.87:
        return rng.choice(".,!?;:'\"()[]-—…«»「」、。！")
    return rng.choice(_SPACE)


def make_text(rng: random.Random, max_pieces: int = 24) -> str:
    """One string of mixed scripts, code, emoji, numbers, punctuation and whitespace."""
    out = []
    for _ in range(rng.randint(0, max_pieces)):
        out.append(_piece(rng))
        if rng.random() < 0.6:
            out.append(" ")
    return "".join(out)


def make_corpus(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [make_text(rng) for _ in range(n)]


def train(style: str, corpus: list, vocab_size: int = 3000):
    """A trained `tokenizers.Tokenizer` in the given style's configuration."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors
    from tokenizers import trainers

    special = QWEN2_SPECIAL if style == "qwen2" else LLAMA3_SPECIAL
    pattern = QWEN2_PATTERN if style == "qwen2" else LLAMA3_PATTERN
    tok = Tokenizer(models.BPE(ignore_merges=(style == "llama3")))
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.decoder = decoders.ByteLevel()
    if style == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def write(style: str, out: Path, corpus: list, vocab_size: int = 3000):
    """Trains and writes tokenizer.json and tokenizer_config.json to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    tok = train(style, corpus, vocab_size)
    data = json.loads(tok.to_str())
    if style == "qwen2":  # the older "a b" merges format, as Qwen2's files have it
        data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                   for m in data["model"]["merges"]]
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    if style == "qwen2":
        config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                  "chat_template": CHATML_TEMPLATE}
    else:
        config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                  "chat_template": LLAMA3_TEMPLATE}
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_max_length"] = 4096
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False))
    return out / "tokenizer.json"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--style", choices=["qwen2", "llama3"], default="qwen2")
    parser.add_argument("--vocab-size", type=int, default=3000)
    parser.add_argument("--lines", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = write(args.style, args.out, make_corpus(args.lines, args.seed), args.vocab_size)
    print(path)


if __name__ == "__main__":
    main()
