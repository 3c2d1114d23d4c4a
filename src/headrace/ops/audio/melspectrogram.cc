// The transform is FFmpeg's (libavutil av_tx); the mel filterbank is a few lines of
// arithmetic (torchaudio's melscale_fbanks), written out here rather than taken from a
// library.
//
// Two things about Debian 12's FFmpeg 5.1 shape the DFT (measured, see ops/audio/README):
// - its real-input transform (AV_TX_FLOAT_RDFT) is wrong against a direct DFT for
//   n = 2 (mod 4) (6, 30, ...) and, depending on which lengths the process set up
//   before, for some multiples of 4 (312, 540, 892): the complex FFT (AV_TX_FLOAT_FFT)
//   is used, on real input;
// - av_tx is fast only for lengths 2^k x {1, 3, 5, 7, 9, 15}; any other (400 = 16 x 25,
//   torchaudio's default n_fft) falls back to a naive DFT that evaluates a sine per
//   term: 4.7 ms per 400-point transform, 0.77 s per 1.5 s of audio. So only powers of
//   two go to av_tx directly; every other length goes through Bluestein's algorithm,
//   the DFT as a convolution with a chirp done by power-of-two FFTs of M >= 2n - 1
//   points (n = 400: two 1024-point transforms, a few microseconds).
#include "headrace/ops/audio/melspectrogram.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "headrace/ops/audio/crop.h"
#include "headrace/ops/schema.h"

extern "C" {
#include <libavutil/mem.h>
#include <libavutil/tx.h>
}

namespace headrace {
namespace {

constexpr std::pair<MelLog, std::string_view> kMelLogs[] = {
    {MelLog::kNone, "none"}, {MelLog::kLog, "log"}, {MelLog::kDb, "db"}};

constexpr int kMaxFft = 1 << 16;
constexpr double kDbFloor = 1e-10;  // torchaudio AmplitudeToDB's amin

std::string OutputOf(const AudioMelSpectrogramSpec& spec) {
  return spec.output.empty() ? spec.field : spec.output;
}

// What the spec's zeros stand for, and the shapes, at a sample rate.
struct MelGeometry {
  int win_length = 0;
  int hop = 0;
  double f_max = 0;
  int64_t samples = 0;  // N
  int64_t frames = 0;
};

MelGeometry GeometryOf(const AudioMelSpectrogramSpec& s, int rate) {
  MelGeometry g;
  g.win_length = s.win_length > 0 ? s.win_length : s.n_fft;
  g.hop = s.hop_length > 0 ? s.hop_length : std::max(1, g.win_length / 2);
  g.f_max = s.f_max > 0 ? s.f_max : rate / 2.0;
  g.samples = AudioWindowHint{s.seconds}.frames(rate);
  const int64_t padded = s.center ? g.samples + 2 * (s.n_fft / 2) : g.samples;
  g.frames = padded >= s.n_fft ? 1 + (padded - s.n_fft) / g.hop : 0;
  return g;
}

double HzToMel(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double MelToHz(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

struct TxFree {
  void operator()(AVTXContext* c) const { av_tx_uninit(&c); }
};
struct AvFree {
  void operator()(void* p) const { av_free(p); }
};
using TxPtr = std::unique_ptr<AVTXContext, TxFree>;
using ComplexPtr = std::unique_ptr<AVComplexFloat[], AvFree>;

AVComplexFloat Mul(AVComplexFloat a, AVComplexFloat b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

bool PowerOfTwo(int n) { return (n & (n - 1)) == 0; }

// An av_tx complex FFT of `n` points (`inverse`: the unnormalized inverse).
Status InitFft(int n, bool inverse, TxPtr& tx, av_tx_fn& fn) {
  AVTXContext* ctx = nullptr;
  const float scale = 1.0f;
  const int rc = av_tx_init(&ctx, &fn, AV_TX_FLOAT_FFT, inverse ? 1 : 0, n, &scale, 0);
  tx.reset(ctx);
  if (rc < 0 || ctx == nullptr) {
    return Status::Internal("audio.melspectrogram: av_tx_init of " + std::to_string(n) +
                            " points failed (" + std::to_string(rc) + ")");
  }
  return Status::Ok();
}

ComplexPtr AllocComplex(int n) {
  return ComplexPtr(static_cast<AVComplexFloat*>(av_malloc(sizeof(AVComplexFloat) * n)));
}

// Per thread (av_tx contexts keep working memory and are not to be shared between
// threads): the FFTs of one size and their aligned buffers, reused sample after sample.
struct FftScratch {
  int length = 0;
  TxPtr forward, inverse;  // inverse: Bluestein's only
  av_tx_fn forward_fn = nullptr, inverse_fn = nullptr;
  ComplexPtr a, b;
  std::vector<float> padded;  // the window of audio, reflect-padded
  std::vector<float> power;   // |X|^power of one frame, n_fft / 2 + 1 bins

  // Ready for FFTs of n points, and their inverse too when `bluestein` (a direct
  // power-of-two DFT of one op and Bluestein's of another may share the size).
  Status Prepare(int n, bool bluestein) {
    if (length != n) {
      length = 0;
      inverse.reset();
      HR_RETURN_IF_ERROR(InitFft(n, false, forward, forward_fn));
      a = AllocComplex(n);
      b = AllocComplex(n);
      if (a == nullptr || b == nullptr) {
        return Status::ResourceExhausted("audio.melspectrogram: FFT buffers");
      }
      length = n;
    }
    if (bluestein && inverse == nullptr) HR_RETURN_IF_ERROR(InitFft(n, true, inverse, inverse_fn));
    return Status::Ok();
  }
};

// One scratch per FFT length a thread has used (a pipeline may hold two of these ops).
FftScratch& ScratchFor(int n) {
  thread_local std::vector<std::unique_ptr<FftScratch>> scratch;
  for (auto& s : scratch) {
    if (s->length == n) return *s;
  }
  scratch.push_back(std::make_unique<FftScratch>());
  return *scratch.back();
}

}  // namespace

struct AudioMelSpectrogramOp::DftPlan {
  int n = 0;
  int m = 0;  // Bluestein's FFT size; 0: n is a power of two, transformed directly
  std::vector<AVComplexFloat> chirp;   // n: exp(-i pi k^2 / n)
  std::vector<AVComplexFloat> kernel;  // m: the FFT of the wrapped conj(chirp), / m
  Status status;                       // of setting it up

  explicit DftPlan(int size) : n(size) {
    if (PowerOfTwo(n)) return;
    m = 1;
    while (m < 2 * n - 1) m *= 2;
    chirp.resize(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      const double phase = M_PI * static_cast<double>(k * k % (2 * int64_t{n})) / n;
      chirp[k] = {static_cast<float>(std::cos(phase)), static_cast<float>(-std::sin(phase))};
    }
    FftScratch s;
    status = s.Prepare(m, /*bluestein=*/false);
    if (!status.ok()) return;
    std::fill(s.a.get(), s.a.get() + m, AVComplexFloat{0, 0});
    for (int k = 0; k < n; ++k) {
      const AVComplexFloat conj{chirp[k].re, -chirp[k].im};
      s.a[k] = conj;
      if (k > 0) s.a[m - k] = conj;
    }
    s.forward_fn(s.forward.get(), s.b.get(), s.a.get(), sizeof(AVComplexFloat));
    kernel.resize(static_cast<size_t>(m));
    for (int j = 0; j < m; ++j) kernel[j] = {s.b[j].re / m, s.b[j].im / m};
  }
};

EnumTable<MelLog> TableOf(MelLog) { return kMelLogs; }

Status AudioMelSpectrogramOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(ValidateWindowSeconds(p + ".seconds", s.seconds));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".start", s.start));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".n_fft", s.n_fft, 2, kMaxFft));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".win_length", s.win_length, 0, kMaxFft));
  if (s.win_length > s.n_fft) {
    return schema::Invalid(p + ".win_length", "must be <= n_fft " + std::to_string(s.n_fft) +
                                                  " (0: n_fft)" + schema::Got(s.win_length));
  }
  HR_RETURN_IF_ERROR(schema::InRange(p + ".hop_length", s.hop_length, 0, kMaxFft));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".n_mels", s.n_mels, 1, 4096));
  if (!(s.f_min >= 0) || !std::isfinite(s.f_min)) {
    return schema::Invalid(p + ".f_min", "must be >= 0" + schema::Got(s.f_min));
  }
  if (!(s.f_max >= 0) || !std::isfinite(s.f_max) || (s.f_max > 0 && s.f_max <= s.f_min)) {
    return schema::Invalid(p + ".f_max", "must be > f_min " + schema::FormatDouble(s.f_min) +
                                             " (0: sample_rate / 2)" + schema::Got(s.f_max));
  }
  if (!(s.power > 0) || !(s.power <= 8)) {
    return schema::Invalid(p + ".power", "must be in (0, 8] (2: power, 1: magnitude)" +
                                             schema::Got(s.power));
  }
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".log", s.log));
  if (!(s.log_eps > 0) || !std::isfinite(s.log_eps)) {
    return schema::Invalid(p + ".log_eps", "must be > 0" + schema::Got(s.log_eps));
  }
  if (!(s.top_db >= 0) || !std::isfinite(s.top_db)) {
    return schema::Invalid(p + ".top_db", "must be >= 0 (0: no floor)" + schema::Got(s.top_db));
  }
  return schema::NonEmpty(p + ".field", s.field, "the audio value to transform");
}

Status AudioMelSpectrogramOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(const ValueDesc audio, ReadFixedRateAudio(ctx, spec.field));
  if (audio.shape.empty() || audio.shape[0] != 1) {
    return ctx.Error("reads mono audio, but '" + spec.field + "' has " +
                     (audio.shape.empty() || audio.shape[0] < 0
                          ? std::string("each file's own channel count")
                          : std::to_string(audio.shape[0]) + " channels") +
                     ": set audio.decode.channels to 1");
  }
  const std::string at = " at " + std::to_string(audio.rate) + " Hz";
  const double nyquist = audio.rate / 2.0;
  if (spec.f_max > nyquist) {
    return schema::Invalid(ctx.key() + ".f_max", "must be <= sample_rate / 2 = " +
                                                     schema::FormatDouble(nyquist) + at +
                                                     schema::Got(spec.f_max));
  }
  if (spec.f_min >= nyquist) {
    return schema::Invalid(ctx.key() + ".f_min", "must be < sample_rate / 2 = " +
                                                     schema::FormatDouble(nyquist) + at +
                                                     schema::Got(spec.f_min));
  }
  const MelGeometry g = GeometryOf(spec, audio.rate);
  // Reflect padding takes n_fft / 2 samples from inside the window (torch.stft's rule).
  if (spec.center ? g.samples <= spec.n_fft / 2 : g.samples < spec.n_fft) {
    return schema::Invalid(ctx.key() + ".seconds",
                           "gives " + std::to_string(g.samples) + " samples" + at +
                               (spec.center ? ", not more than n_fft / 2 = " +
                                                  std::to_string(spec.n_fft / 2)
                                            : ", fewer than n_fft = " +
                                                  std::to_string(spec.n_fft)) +
                               schema::Got(spec.seconds));
  }
  const std::string source = ctx.key() + ".seconds " + schema::FormatDouble(spec.seconds) + at +
                             ", hop_length " + std::to_string(g.hop);
  ctx.AddField(FieldSpec{OutputOf(spec), DType::kF32, {spec.n_mels, g.frames}}, source);
  ctx.AddField(FieldSpec{OutputOf(spec) + "_length", DType::kI64, {}}, source);
  return Status::Ok();
}

Result<std::unique_ptr<Op>> AudioMelSpectrogramOp::Make(const Spec& spec, PlanContext& ctx) {
  const ValueDesc* audio = ctx.input(spec.field);
  if (audio == nullptr) return ctx.Error("made without its declaration");
  return std::unique_ptr<Op>(std::make_unique<AudioMelSpectrogramOp>(
      spec, ctx.position(), ctx.slot(spec.field), ctx.row(OutputOf(spec)),
      ctx.row(OutputOf(spec) + "_length"), audio->rate));
}

std::vector<float> AudioMelSpectrogramOp::MelFilterbank(int n_fft, int n_mels, double f_min,
                                                        double f_max, int sample_rate) {
  const int n_freqs = n_fft / 2 + 1;
  // torchaudio: the bins' frequencies are linspace(0, sample_rate // 2, n_freqs), the
  // filters' corners n_mels + 2 points evenly spaced in mel between f_min and f_max.
  const double top = static_cast<double>(sample_rate / 2);
  std::vector<double> corners(static_cast<size_t>(n_mels) + 2);
  const double m_min = HzToMel(f_min), m_max = HzToMel(f_max);
  for (int i = 0; i < n_mels + 2; ++i) {
    corners[i] = MelToHz(m_min + (m_max - m_min) * i / (n_mels + 1));
  }
  std::vector<float> weights(static_cast<size_t>(n_freqs) * n_mels);
  for (int f = 0; f < n_freqs; ++f) {
    const double hz = n_freqs > 1 ? top * f / (n_freqs - 1) : 0.0;
    for (int m = 0; m < n_mels; ++m) {
      const double down = (hz - corners[m]) / (corners[m + 1] - corners[m]);
      const double up = (corners[m + 2] - hz) / (corners[m + 2] - corners[m + 1]);
      weights[static_cast<size_t>(f) * n_mels + m] =
          static_cast<float>(std::max(0.0, std::min(down, up)));
    }
  }
  return weights;
}

AudioMelSpectrogramOp::AudioMelSpectrogramOp(const Spec& spec, int op_position, int slot,
                                             int row, int length_row, int sample_rate)
    : spec_(spec), op_position_(op_position), slot_(slot), row_(row), length_row_(length_row) {
  const MelGeometry g = GeometryOf(spec, sample_rate);
  samples_ = g.samples;
  hop_ = g.hop;
  frames_ = g.frames;
  // torch.hann_window(win_length) (periodic), zero-padded to n_fft in the middle.
  window_.assign(static_cast<size_t>(spec.n_fft), 0.0f);
  const int left = (spec.n_fft - g.win_length) / 2;
  for (int i = 0; i < g.win_length; ++i) {
    window_[left + i] = static_cast<float>(0.5 - 0.5 * std::cos(2 * M_PI * i / g.win_length));
  }
  dft_ = std::make_shared<const DftPlan>(spec.n_fft);
  const int n_freqs = spec.n_fft / 2 + 1;
  const std::vector<float> fb =
      MelFilterbank(spec.n_fft, spec.n_mels, spec.f_min, g.f_max, sample_rate);
  filters_.resize(static_cast<size_t>(spec.n_mels));
  for (int m = 0; m < spec.n_mels; ++m) {
    int first = n_freqs, last = -1;
    for (int f = 0; f < n_freqs; ++f) {
      if (fb[static_cast<size_t>(f) * spec.n_mels + m] > 0) {
        first = std::min(first, f);
        last = f;
      }
    }
    Filter& filter = filters_[m];
    filter.first = last < 0 ? 0 : first;
    for (int f = filter.first; f <= last; ++f) {
      filter.weights.push_back(fb[static_cast<size_t>(f) * spec.n_mels + m]);
    }
  }
}

void AudioMelSpectrogramOp::Hint(const Spec& spec, ValueHints& hints, int position) {
  hints.ReadWindow(spec.field, AudioWindowHint{spec.seconds, spec.start, position});
}

Status AudioMelSpectrogramOp::Run(SampleContext& ctx) const {
  const AudioView* audio = ctx.Get<AudioView>(slot_);
  if (audio == nullptr) {
    return Status::MissingField("audio.melspectrogram: no audio '" + spec_.field + "'");
  }
  if (audio->channels != 1) {
    return Status::Internal("audio.melspectrogram: " + std::to_string(audio->channels) +
                            " channels where the plan has mono");
  }
  const int n_fft = spec_.n_fft;
  HR_RETURN_IF_ERROR(dft_->status);
  const bool bluestein = dft_->m > 0;
  const int size = bluestein ? dft_->m : n_fft;
  FftScratch& s = ScratchFor(size);
  HR_RETURN_IF_ERROR(s.Prepare(size, bluestein));

  // The window of audio (zero-padded past the real samples), reflect-padded when centred.
  HR_ASSIGN_OR_RETURN(const AudioWindow window,
                      WindowOf(*audio, spec_.start, samples_, ctx.OpRng(op_position_), kName));
  const int64_t real = window.real;
  const int64_t pad = spec_.center ? n_fft / 2 : 0;
  s.padded.assign(static_cast<size_t>(samples_ + 2 * pad), 0.0f);
  float* body = s.padded.data() + pad;
  if (real > 0) {
    std::memcpy(body, window.channel(*audio, 0), static_cast<size_t>(real) * sizeof(float));
  }
  for (int64_t j = 0; j < pad; ++j) {  // samples_ > pad (Declare): x[-1-j] = x[1+j]
    body[-1 - j] = body[1 + j];
    body[samples_ + j] = body[samples_ - 2 - j];
  }

  const int n_freqs = n_fft / 2 + 1;
  s.power.resize(static_cast<size_t>(n_freqs));
  auto* out = reinterpret_cast<float*>(ctx.rows[row_]);
  for (int64_t t = 0; t < frames_; ++t) {
    const float* frame = s.padded.data() + t * hop_;
    const AVComplexFloat* spectrum = s.b.get();  // X[0 .. n_freqs)
    if (!bluestein) {
      for (int k = 0; k < n_fft; ++k) s.a[k] = AVComplexFloat{frame[k] * window_[k], 0.0f};
      s.forward_fn(s.forward.get(), s.b.get(), s.a.get(), sizeof(AVComplexFloat));
    } else {
      // X[k] = chirp[k] (a * b)[k], a[j] = x[j] chirp[j]: a convolution, by FFT.
      const AVComplexFloat* chirp = dft_->chirp.data();
      for (int k = 0; k < n_fft; ++k) {
        const float v = frame[k] * window_[k];
        s.a[k] = AVComplexFloat{v * chirp[k].re, v * chirp[k].im};
      }
      std::fill(s.a.get() + n_fft, s.a.get() + size, AVComplexFloat{0, 0});
      s.forward_fn(s.forward.get(), s.b.get(), s.a.get(), sizeof(AVComplexFloat));
      for (int j = 0; j < size; ++j) s.b[j] = Mul(s.b[j], dft_->kernel[j]);
      s.inverse_fn(s.inverse.get(), s.a.get(), s.b.get(), sizeof(AVComplexFloat));
      for (int f = 0; f < n_freqs; ++f) s.a[f] = Mul(s.a[f], chirp[f]);
      spectrum = s.a.get();
    }
    for (int f = 0; f < n_freqs; ++f) {
      const float p = spectrum[f].re * spectrum[f].re + spectrum[f].im * spectrum[f].im;
      s.power[f] = spec_.power == 2.0 ? p : std::pow(p, static_cast<float>(spec_.power / 2));
    }
    for (int m = 0; m < spec_.n_mels; ++m) {
      const Filter& filter = filters_[m];
      float sum = 0.0f;
      for (size_t i = 0; i < filter.weights.size(); ++i) {
        sum += filter.weights[i] * s.power[filter.first + i];
      }
      out[m * frames_ + t] = sum;
    }
  }

  const int64_t values = spec_.n_mels * frames_;
  switch (spec_.log) {
    case MelLog::kNone: break;
    case MelLog::kLog: {
      const auto eps = static_cast<float>(spec_.log_eps);
      for (int64_t i = 0; i < values; ++i) out[i] = std::log(out[i] + eps);
      break;
    }
    case MelLog::kDb: {
      const auto multiplier = static_cast<float>(20.0 / spec_.power);
      float peak = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < values; ++i) {
        out[i] = multiplier * std::log10(std::max(out[i], static_cast<float>(kDbFloor)));
        peak = std::max(peak, out[i]);
      }
      if (spec_.top_db > 0) {
        const float floor = peak - static_cast<float>(spec_.top_db);
        for (int64_t i = 0; i < values; ++i) out[i] = std::max(out[i], floor);
      }
      break;
    }
  }
  // The frames whose centre lies in real audio (the rest see only padding).
  const int64_t centre = spec_.center ? 0 : n_fft / 2;
  const int64_t length =
      real > centre ? std::min(frames_, (real - centre + hop_ - 1) / hop_) : 0;
  std::memcpy(ctx.rows[length_row_], &length, sizeof length);
  return Status::Ok();
}

}  // namespace headrace
