#include "headrace/ops/audio/melspectrogram.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "headrace/ops/op_test_util.h"

namespace headrace {
namespace {

using ::testing::HasSubstr;

constexpr int kRate = 16000;

struct Planned {
  Status status;
  std::unique_ptr<Op> op;
  std::vector<int64_t> shape;  // of the spectrogram field
};

// Declares and makes the op after a mono (or `channels`) audio value at `rate`, as the
// planner does.
Planned Plan(const AudioMelSpectrogramSpec& spec, int rate = kRate, int channels = 1) {
  Planned out;
  out.status = AudioMelSpectrogramOp::Validate(spec, "ops[1].audio.melspectrogram");
  if (!out.status.ok()) return out;
  PlanState state;
  ValueDesc audio{ValueKind::kAudio, {channels, -1}, "ops[0].audio.decode"};
  audio.rate = rate;
  state.values.push_back(PlanValue{"audio", audio, "ops[0].audio.decode", 0, -1, false});
  state.ops.resize(1);
  state.ops[0].key = "ops[1].audio.melspectrogram";
  PlanContext ctx(state, 0);
  out.status = AudioMelSpectrogramOp::Declare(spec, ctx);
  if (!out.status.ok()) return out;
  out.shape = state.fields.at(0).sample_shape;
  Result<std::unique_ptr<Op>> op = AudioMelSpectrogramOp::Make(spec, ctx);
  out.status = op.status();
  if (op.ok()) out.op = *std::move(op);
  return out;
}

struct Spectrogram {
  Status status;
  std::vector<int64_t> shape;
  std::vector<float> values;  // [n_mels, frames]
  int64_t length = -1;

  float at(int64_t mel, int64_t frame) const { return values[mel * shape[1] + frame]; }
};

Spectrogram MelOf(const AudioMelSpectrogramSpec& spec, const std::vector<float>& audio,
                uint64_t seed = 1) {
  Spectrogram out;
  Planned p = Plan(spec);
  out.status = p.status;
  if (!p.status.ok()) return out;
  out.shape = p.shape;
  out.values.assign(static_cast<size_t>(p.shape[0] * p.shape[1]), -1.0f);
  uint8_t* rows[2] = {reinterpret_cast<uint8_t*>(out.values.data()),
                      reinterpret_cast<uint8_t*>(&out.length)};
  Value values[1] = {AudioView{audio.data(), 1, static_cast<int64_t>(audio.size()), kRate}};
  out.status = testing::RunOp(*p.op, values, rows, seed);
  return out;
}

std::vector<float> Tone(double hz, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(0.5 * std::sin(2 * M_PI * hz * i / kRate));
  return x;
}

// The signal the torch reference below was computed on: 4000 samples at 16 kHz.
std::vector<float> ReferenceSignal() {
  std::vector<float> x(4000);
  for (size_t k = 0; k < x.size(); ++k) {
    const double i = static_cast<double>(k);
    x[k] = static_cast<float>(0.5 * std::sin(2 * M_PI * 440 * i / 16000) +
                              0.25 * std::sin(2 * M_PI * 3000 * i / 16000 + 0.3) +
                              0.1 * std::sin(i * i * 1e-4));
  }
  return x;
}

TEST(AudioMelSpectrogram, AToneLandsInTheMelBinOfItsFrequency) {
  const AudioMelSpectrogramSpec spec{.seconds = 0.5, .start = ClipStart::kStart, .n_fft = 512,
                                     .n_mels = 40};
  const std::vector<float> fb =
      AudioMelSpectrogramOp::MelFilterbank(512, 40, 0, kRate / 2.0, kRate);
  for (double hz : {300.0, 1000.0, 2500.0, 6000.0}) {
    const Spectrogram s = MelOf(spec, Tone(hz, kRate / 2));
    ASSERT_TRUE(s.status.ok()) << s.status.ToString();
    ASSERT_EQ(s.shape, (std::vector<int64_t>{40, 1 + 8000 / 256}));
    // The mel bin whose filter weighs the tone's FFT bin most.
    const int bin = static_cast<int>(std::lround(hz * 512 / kRate));
    const int expected = static_cast<int>(
        std::max_element(fb.begin() + bin * 40, fb.begin() + (bin + 1) * 40) - (fb.begin() + bin * 40));
    const int64_t frame = s.shape[1] / 2;  // away from the reflected edges
    int loudest = 0;
    for (int m = 1; m < 40; ++m) loudest = s.at(m, frame) > s.at(loudest, frame) ? m : loudest;
    EXPECT_EQ(loudest, expected) << hz << " Hz";
    EXPECT_EQ(s.length, s.shape[1]);  // all real audio
  }
}

// torchaudio.transforms.MelSpectrogram (and AmplitudeToDB) computed with torch 2.13's
// torch.stft and torchaudio's melscale_fbanks (torchaudio itself is not installed here):
//   spec = torch.stft(x, n_fft, hop, win, torch.hann_window(win), center=True,
//                     pad_mode="reflect", onesided=True, return_complex=True).abs().pow(p)
//   all_freqs = torch.linspace(0, sr // 2, n_fft // 2 + 1)
//   m_pts = torch.linspace(hz2mel(f_min), hz2mel(f_max), n_mels + 2)   # HTK
//   f_pts = 700 * (10 ** (m_pts / 2595) - 1); slopes = f_pts[None] - all_freqs[:, None]
//   fb = max(0, min(-slopes[:, :-2] / diff(f_pts)[:-1], slopes[:, 2:] / diff(f_pts)[1:]))
//   mel = (spec.T @ fb).T; db = (10 if p == 2 else 20) * log10(clamp(mel, 1e-10))
//   db = max(db, db.max() - top_db)
struct Expected {
  int mel, frame;
  float value;
};

void ExpectReference(const Spectrogram& s, const std::vector<Expected>& expected, double sum,
                     double tolerance) {
  ASSERT_TRUE(s.status.ok()) << s.status.ToString();
  for (const Expected& e : expected) {
    EXPECT_NEAR(s.at(e.mel, e.frame), e.value, tolerance * std::max(1.0f, std::abs(e.value)))
        << "mel " << e.mel << " frame " << e.frame;
  }
  double total = 0;
  for (float v : s.values) total += v;
  EXPECT_NEAR(total, sum, tolerance * std::abs(sum));
}

TEST(AudioMelSpectrogram, EqualsTorchaudioPower) {
  const Spectrogram s = MelOf({.seconds = 0.25, .start = ClipStart::kStart, .n_fft = 400,
                             .win_length = 320, .hop_length = 160, .n_mels = 40, .f_min = 50,
                             .f_max = 7600},
                            ReferenceSignal());
  ASSERT_EQ(s.shape, (std::vector<int64_t>{40, 26}));
  ExpectReference(s,
                  {{0, 0, 23.297264f},
                   {3, 5, 0.2874755f},
                   {5, 12, 342.27155f},
                   {10, 7, 0.41592857f},
                   {20, 24, 53.303043f},
                   {39, 25, 0.14403719f}},
                  100617.1406, 1e-4);
}

TEST(AudioMelSpectrogram, EqualsTorchaudioMagnitudeInDecibels) {
  const Spectrogram s = MelOf({.seconds = 0.25, .start = ClipStart::kStart, .n_fft = 256,
                             .n_mels = 24, .power = 1, .log = MelLog::kDb, .top_db = 60},
                            ReferenceSignal());
  ASSERT_EQ(s.shape, (std::vector<int64_t>{24, 32}));
  ExpectReference(s,
                  {{0, 0, 17.280205f},
                   {3, 5, 27.71368f},
                   {5, 12, 16.024445f},
                   {10, 7, -26.730045f},  // the floor: max - top_db
                   {20, 24, -26.730045f},
                   {23, 31, 1.7694265f}},
                  -7839.580566, 1e-4);
}

// A direct DFT in double, over every value, at lengths the FFT splits differently (odd,
// 2 mod 4) and with a window shorter than n_fft, uncentred, and ln(x + eps).
TEST(AudioMelSpectrogram, EqualsADirectDft) {
  const std::vector<float> x = ReferenceSignal();
  for (const AudioMelSpectrogramSpec& spec :
       {AudioMelSpectrogramSpec{.seconds = 0.1, .start = ClipStart::kStart, .n_fft = 255,
                                .hop_length = 100, .n_mels = 16, .log = MelLog::kLog},
        AudioMelSpectrogramSpec{.seconds = 0.1, .start = ClipStart::kStart, .n_fft = 150,
                                .win_length = 101, .hop_length = 37, .n_mels = 10,
                                .f_min = 100, .f_max = 6000, .power = 1.5, .center = false}}) {
    const Spectrogram s = MelOf(spec, x);
    ASSERT_TRUE(s.status.ok()) << s.status.ToString();
    const int n_fft = spec.n_fft, win = spec.win_length > 0 ? spec.win_length : n_fft;
    const int hop = spec.hop_length, n_freqs = n_fft / 2 + 1;
    const auto n = static_cast<int64_t>(std::llround(spec.seconds * kRate));
    const int64_t pad = spec.center ? n_fft / 2 : 0;
    auto sample = [&](int64_t i) {  // the padded signal
      i -= pad;
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
      return static_cast<double>(x[i]);
    };
    const std::vector<float> fb = AudioMelSpectrogramOp::MelFilterbank(
        n_fft, spec.n_mels, spec.f_min, spec.f_max > 0 ? spec.f_max : kRate / 2.0, kRate);
    ASSERT_EQ(s.shape[1], 1 + (n + 2 * pad - n_fft) / hop);
    for (int64_t t = 0; t < s.shape[1]; ++t) {
      std::vector<double> power(n_freqs);
      for (int f = 0; f < n_freqs; ++f) {
        double re = 0, im = 0;
        for (int k = 0; k < n_fft; ++k) {
          const int w = k - (n_fft - win) / 2;
          const double hann = w >= 0 && w < win ? 0.5 - 0.5 * std::cos(2 * M_PI * w / win) : 0;
          const double v = sample(t * hop + k) * hann;
          re += v * std::cos(2 * M_PI * f * k / n_fft);
          im -= v * std::sin(2 * M_PI * f * k / n_fft);
        }
        power[f] = std::pow(re * re + im * im, spec.power / 2);
      }
      for (int m = 0; m < spec.n_mels; ++m) {
        double mel = 0;
        for (int f = 0; f < n_freqs; ++f) mel += fb[f * spec.n_mels + m] * power[f];
        const double want = spec.log == MelLog::kLog ? std::log(mel + spec.log_eps) : mel;
        EXPECT_NEAR(s.at(m, t), want, 1e-3 * std::max(1.0, std::abs(want)))
            << "n_fft " << n_fft << " mel " << m << " frame " << t;
      }
    }
  }
}

TEST(AudioMelSpectrogram, ShortAudioIsZeroPaddedAndTheLengthSaysSo) {
  // 0.05 s of tone in a 0.25 s window, hop 160: frames 0..4 have their centre in it.
  const Spectrogram s = MelOf({.seconds = 0.25, .n_fft = 400, .hop_length = 160, .n_mels = 8},
                            Tone(1000, 800));
  ASSERT_TRUE(s.status.ok()) << s.status.ToString();
  EXPECT_EQ(s.length, 5);
  float loudest = 0;
  for (int m = 0; m < 8; ++m) loudest = std::max(loudest, s.at(m, 2));
  EXPECT_GT(loudest, 1.0f);
  for (int m = 0; m < 8; ++m) EXPECT_EQ(s.at(m, 20), 0.0f);  // silence
}

TEST(AudioMelSpectrogram, RandomWindowsAreSeeded) {
  std::vector<float> chirp(kRate);
  for (int i = 0; i < kRate; ++i) chirp[i] = static_cast<float>(std::sin(1e-4 * i * i));
  const AudioMelSpectrogramSpec spec{.seconds = 0.1, .n_fft = 256, .n_mels = 16};
  EXPECT_EQ(MelOf(spec, chirp, 7).values, MelOf(spec, chirp, 7).values);
  EXPECT_NE(MelOf(spec, chirp, 7).values, MelOf(spec, chirp, 8).values);
}

TEST(AudioMelSpectrogram, BadParametersAreRefusedNamingTheKey) {
  auto refused = [](const AudioMelSpectrogramSpec& spec, int channels = 1) {
    return Plan(spec, kRate, channels).status;
  };
  EXPECT_THAT(refused({.n_fft = 256, .win_length = 400}).message(),
              HasSubstr("ops[1].audio.melspectrogram.win_length: must be <= n_fft 256"));
  EXPECT_THAT(refused({.n_mels = 0}).message(),
              HasSubstr("ops[1].audio.melspectrogram.n_mels: must be in [1, 4096]"));
  EXPECT_THAT(refused({.f_max = 9000}).message(),
              HasSubstr("ops[1].audio.melspectrogram.f_max: must be <= sample_rate / 2 = 8000 "
                        "at 16000 Hz"));
  EXPECT_THAT(refused({.f_min = 500, .f_max = 400}).message(),
              HasSubstr("audio.melspectrogram.f_max: must be > f_min 500"));
  EXPECT_THAT(refused({.power = 0}).message(), HasSubstr("audio.melspectrogram.power"));
  EXPECT_THAT(refused({.n_fft = 1}).message(), HasSubstr("audio.melspectrogram.n_fft"));
  EXPECT_THAT(refused({.seconds = 0.01, .n_fft = 400}).message(),
              HasSubstr("audio.melspectrogram.seconds: gives 160 samples at 16000 Hz, not more "
                        "than n_fft / 2 = 200"));
  EXPECT_THAT(refused({}, 2).message(), HasSubstr("reads mono audio, but 'audio' has 2 channels"));
  EXPECT_EQ(refused({}).code(), StatusCode::kOk);
}

}  // namespace
}  // namespace headrace
