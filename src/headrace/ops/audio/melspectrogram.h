// audio.melspectrogram: a fixed-length window of mono audio (chosen as audio.crop
// chooses it: random — seeded per sample and epoch —, start or center; zero-padded when
// the audio is shorter) into a mel spectrogram, f32 [n_mels, frames] in the batch, plus
// `<output>_length` (i64): the frames whose centre lies in real audio.
//
// The semantics are torchaudio.transforms.MelSpectrogram's with its defaults, so that a
// model trained on one takes the other: a periodic Hann window of win_length, zero-padded
// to n_fft in the middle; center: the window reflect-padded by n_fft / 2 on each side;
// frames = 1 + (N + 2 * (n_fft / 2) - n_fft) / hop_length (N = seconds x the rate);
// |STFT|^power; the HTK mel scale (mel = 2595 log10(1 + f / 700)) with triangular
// filters and no area normalization (torchaudio's mel_scale="htk", norm=None). Then
// optionally `log`: ln(x + log_eps), or dB as torchaudio.transforms.AmplitudeToDB
// ((20 / power) log10(max(x, 1e-10)): 10 log10 of power, 20 log10 of magnitude) with
// values below the spectrogram's maximum minus top_db raised to it (top_db 0: no floor).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/window.h"

namespace headrace {

enum class MelLog {
  kNone,  // the mel power (or magnitude) itself: torchaudio's MelSpectrogram output
  kLog,   // ln(x + log_eps)
  kDb,    // decibels, as torchaudio's AmplitudeToDB, floored at max - top_db
};
// "none", "log", "db".
EnumTable<MelLog> TableOf(MelLog);

struct AudioMelSpectrogramSpec {  // audio.melspectrogram
  double seconds = 4.0;                  // the window: N = seconds x the audio's rate
  ClipStart start = ClipStart::kRandom;  // random, start, center
  int n_fft = 400;
  int win_length = 0;  // <= n_fft; 0: n_fft
  int hop_length = 0;  // 0: win_length / 2
  int n_mels = 128;
  double f_min = 0;
  double f_max = 0;  // <= sample_rate / 2; 0: sample_rate / 2
  double power = 2.0;  // 2: power, 1: magnitude
  bool center = true;  // reflect-pad n_fft / 2 on each side, frames centred on t x hop
  MelLog log = MelLog::kNone;
  double log_eps = 1e-6;  // log: ln(x + log_eps)
  double top_db = 0;      // db: floor at the maximum minus top_db; 0: none
  std::string field = "audio";
  std::string output;  // the batch field written; empty: named like `field`
};

class AudioMelSpectrogramOp : public Op {
 public:
  static constexpr std::string_view kName = "audio.melspectrogram";
  static constexpr std::string_view kDoc =
      "A fixed-length mono audio window to a (log-)mel spectrogram f32 [n_mels, frames] "
      "plus <output>_length (torchaudio MelSpectrogram semantics, HTK mel scale).";
  using Spec = AudioMelSpectrogramSpec;
  static void Fields(auto& s, auto&& f) {
    f("seconds", s.seconds);
    f("start", s.start);
    f("n_fft", s.n_fft);
    f("win_length", s.win_length);
    f("hop_length", s.hop_length);
    f("n_mels", s.n_mels);
    f("f_min", s.f_min);
    f("f_max", s.f_max);
    f("power", s.power);
    f("center", s.center);
    f("log", s.log);
    f("log_eps", s.log_eps);
    f("top_db", s.top_db);
    f("field", s.field);
    f("output", s.output);
  }
  static Status Validate(const Spec& spec, const std::string& key);
  // Needs mono audio at a rate fixed at plan time (audio.decode's channels: 1 and
  // sample_rate, or audio.resample); checks f_max against that rate's Nyquist frequency
  // and the window against n_fft.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  // Reads one window of the audio, as audio.crop does (AudioWindowHint).
  static void Hint(const Spec& spec, ValueHints& hints, int position);
  // A random window start draws from the op's stream, as audio.crop's does.
  static bool DrawsRandom(const Spec& spec) { return spec.start == ClipStart::kRandom; }
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() {
    return Spec{.seconds = 0.1, .n_fft = 256, .n_mels = 40, .log = MelLog::kDb, .top_db = 80};
  }

  // The HTK mel filterbank, torchaudio's melscale_fbanks(n_fft / 2 + 1, f_min, f_max,
  // n_mels, sample_rate, norm=None, mel_scale="htk"): weights[f * n_mels + m].
  static std::vector<float> MelFilterbank(int n_fft, int n_mels, double f_min, double f_max,
                                          int sample_rate);

  AudioMelSpectrogramOp(const Spec& spec, int op_position, int slot, int row, int length_row,
                        int sample_rate);
  std::string_view name() const override { return kName; }
  Status Run(SampleContext& ctx) const override;

  int64_t frames() const { return frames_; }  // STFT frames per sample

  // The n_fft-point DFT's plan (melspectrogram.cc): immutable, shared by the threads.
  struct DftPlan;

 private:
  // One mel filter: its nonzero weights, for the FFT bins first, first + 1, ...
  struct Filter {
    int first = 0;
    std::vector<float> weights;
  };

  Spec spec_;
  int op_position_, slot_, row_, length_row_;
  int64_t samples_;  // N: the window's length in samples
  int hop_;
  int64_t frames_;
  std::vector<float> window_;  // n_fft: the Hann window, centred
  std::vector<Filter> filters_;
  std::shared_ptr<const DftPlan> dft_;
};

}  // namespace headrace
