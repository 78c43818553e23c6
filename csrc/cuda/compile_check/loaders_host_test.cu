// Host-side check of the implicit-GEMM index mappings (scripts/check_cuda_compile.sh runs it;
// no GPU needed). The loaders/epilogues of kernels/*.cuh are __host__ __device__, so this
// program drives them with a plain sequential GEMM on the CPU and compares against direct
// convolution / linear / layer_norm formulas written independently here, for NCHW and
// channels_last, groups, stride, padding, dilation and odd sizes. What it does NOT cover:
// the tiling, shared memory, WMMA and split-K logic of the device cores (that needs a GPU).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/conv2d.cuh"
#include "kernels/fused_linear_relu.cuh"
#include "kernels/layer_norm.cuh"
#include "kernels/reduce.cuh"

namespace k = xkernels::cuda::kernels;

namespace {

int g_failures = 0;

struct Rng {  // deterministic LCG: small integers keep every sum exact in double
  unsigned long long s;
  int next(int lo, int hi) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + static_cast<int>((s >> 33) % static_cast<unsigned long long>(hi - lo + 1));
  }
};

void expect_equal(const char* what, const std::vector<double>& got, const std::vector<double>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      std::printf("FAIL %s: element %zu is %.17g, expected %.17g\n", what, i, got[i], want[i]);
      ++g_failures;
      return;
    }
  }
}

// Sequential GEMM through the loaders and epilogue: what the device cores compute.
template <class A, class B, class E>
void emulate_gemm(int64_t G, int64_t M, int64_t N, int64_t K, const A& a, const B& b, const E& e) {
  for (int64_t g = 0; g < G; ++g)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t kk = 0; kk < K; ++kk) acc += a(g, m, kk) * b(g, kk, n);
        e(g, m, n, acc);
      }
}
template <class L, class E> void emulate_column_sum(int64_t R, int64_t C, const L& l, const E& e) {
  for (int64_t c = 0; c < C; ++c) {
    double acc = 0;
    for (int64_t r = 0; r < R; ++r) acc += l(r, c);
    e(c, acc);
  }
}

// Dense 4-D strides (n, c, h, w) of a [D0, D1, D2, D3] tensor, NCHW or NHWC.
k::Strides4 dense_strides(int64_t D1, int64_t D2, int64_t D3, bool cl) {
  if (cl) return {D1 * D2 * D3, 1, D3 * D1, D1};
  return {D1 * D2 * D3, D2 * D3, D3, 1};
}
int64_t at4(const k::Strides4& s, int64_t a, int64_t b, int64_t c, int64_t d) { return a * s.n + b * s.c + c * s.h + d * s.w; }

template <bool CL> void check_conv(Rng& rng, int trial) {
  k::ConvGeometry p{};
  const int64_t groups = rng.next(1, 3);
  p.N = rng.next(1, 2);
  p.Cg = rng.next(1, 3);
  p.Og = rng.next(1, 3);
  p.C = p.Cg * groups;
  p.O = p.Og * groups;
  p.KH = rng.next(1, 3);
  p.KW = rng.next(1, 3);
  p.stride_h = rng.next(1, 3);
  p.stride_w = rng.next(1, 2);
  p.pad_h = rng.next(0, 2);
  p.pad_w = rng.next(0, 1);
  p.dil_h = rng.next(1, 2);
  p.dil_w = rng.next(1, 3);
  p.H = rng.next(p.dil_h * (p.KH - 1) + 1, 9);
  p.W = rng.next(p.dil_w * (p.KW - 1) + 1, 8);
  p.OH = (p.H + 2 * p.pad_h - p.dil_h * (p.KH - 1) - 1) / p.stride_h + 1;
  p.OW = (p.W + 2 * p.pad_w - p.dil_w * (p.KW - 1) - 1) / p.stride_w + 1;

  const k::Strides4 sx = dense_strides(p.C, p.H, p.W, CL), sw = dense_strides(p.Cg, p.KH, p.KW, CL),
                    sy = dense_strides(p.O, p.OH, p.OW, CL);
  std::vector<double> x(p.N * p.C * p.H * p.W), w(p.O * p.Cg * p.KH * p.KW), bias(p.O), dy(p.N * p.O * p.OH * p.OW);
  for (auto& v : x) v = rng.next(-3, 3);
  for (auto& v : w) v = rng.next(-3, 3);
  for (auto& v : bias) v = rng.next(-3, 3);
  for (auto& v : dy) v = rng.next(-3, 3);

  // Direct formulas.
  std::vector<double> y_ref(dy.size()), dx_ref(x.size(), 0.0), dw_ref(w.size(), 0.0), db_ref(p.O, 0.0);
  for (int64_t b = 0; b < p.N; ++b)
    for (int64_t o = 0; o < p.O; ++o)
      for (int64_t oh = 0; oh < p.OH; ++oh)
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          const int64_t g = o / p.Og;
          double acc = bias[o];
          const double d = dy[at4(sy, b, o, oh, ow)];
          db_ref[o] += d;
          for (int64_t c = 0; c < p.Cg; ++c)
            for (int64_t kh = 0; kh < p.KH; ++kh)
              for (int64_t kw = 0; kw < p.KW; ++kw) {
                const int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dil_h;
                const int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dil_w;
                if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) continue;
                const int64_t xi = at4(sx, b, g * p.Cg + c, ih, iw), wi = at4(sw, o, c, kh, kw);
                acc += x[xi] * w[wi];
                dx_ref[xi] += d * w[wi];
                dw_ref[wi] += d * x[xi];
              }
          y_ref[at4(sy, b, o, oh, ow)] = acc;
        }

  const int64_t G = groups;
  std::vector<double> y(y_ref.size(), NAN), dx(x.size(), NAN), dw(w.size(), NAN), db(p.O, NAN);
  emulate_gemm(G, p.Og, p.N * p.OH * p.OW, p.Cg * p.KH * p.KW, k::ConvWeightA<double, CL>{w.data(), sw, p},
               k::ConvInputPatchB<double, CL>{x.data(), sx, p},
               k::ConvOutputEpilogue<double, true>{y.data(), sy, bias.data(), p});
  emulate_gemm(G, p.Cg, p.N * p.H * p.W, p.Og * p.KH * p.KW, k::ConvWeightTA<double, CL>{w.data(), sw, p},
               k::ConvGradOutputScatterB<double, CL>{dy.data(), sy, p},
               k::ConvGradInputEpilogue<double>{dx.data(), sx, p});
  emulate_gemm(G, p.Og, p.Cg * p.KH * p.KW, p.N * p.OH * p.OW, k::ConvGradOutputA<double, CL>{dy.data(), sy, p},
               k::ConvInputPatchTB<double, CL>{x.data(), sx, p},
               k::ConvGradWeightEpilogue<double, CL>{dw.data(), sw, p});
  emulate_column_sum(p.N * p.OH * p.OW, p.O, k::ConvGradOutputColumns<double>{dy.data(), sy, p.OH, p.OW},
                     k::StoreVector<double>{db.data()});
  char what[160];
  std::snprintf(what, sizeof what, "conv2d %s trial %d (N=%lld C=%lld O=%lld groups=%lld K=%lldx%lld)",
                CL ? "channels_last" : "NCHW", trial, (long long)p.N, (long long)p.C, (long long)p.O,
                (long long)groups, (long long)p.KH, (long long)p.KW);
  expect_equal((std::string(what) + " forward").c_str(), y, y_ref);
  expect_equal((std::string(what) + " grad_input").c_str(), dx, dx_ref);
  expect_equal((std::string(what) + " grad_weight").c_str(), dw, dw_ref);
  expect_equal((std::string(what) + " grad_bias").c_str(), db, db_ref);
}

void check_linear(Rng& rng, int trial) {
  const int64_t M = rng.next(1, 9), N = rng.next(1, 9), K = rng.next(1, 9);
  std::vector<double> x(M * K), w(N * K), b(N), dy(M * N);
  for (auto& v : x) v = rng.next(-3, 3);
  for (auto& v : w) v = rng.next(-3, 3);
  for (auto& v : b) v = rng.next(-3, 3);
  for (auto& v : dy) v = rng.next(-3, 3);
  std::vector<double> out_ref(M * N), dx_ref(M * K, 0.0), dw_ref(N * K, 0.0), db_ref(N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = b[n];
      for (int64_t kk = 0; kk < K; ++kk) acc += x[m * K + kk] * w[n * K + kk];
      out_ref[m * N + n] = acc > 0 ? acc : 0;
    }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const double g = out_ref[m * N + n] > 0 ? dy[m * N + n] : 0;
      db_ref[n] += g;
      for (int64_t kk = 0; kk < K; ++kk) {
        dx_ref[m * K + kk] += g * w[n * K + kk];
        dw_ref[n * K + kk] += g * x[m * K + kk];
      }
    }
  std::vector<double> out(M * N, NAN), dx(M * K, NAN), dw(N * K, NAN), db(N, NAN);
  emulate_gemm(1, M, N, K, k::RowMajorA<double>{x.data(), K}, k::TransposedB<double>{w.data(), K},
               k::LinearReluEpilogue<double, true>{out.data(), b.data(), N});
  const k::MaskedGrad<double> g{dy.data(), out.data(), N};
  emulate_gemm(1, M, K, N, k::MaskedGradA<double>{g}, k::RowMajorB<double>{w.data(), K},
               k::StoreMatrix<double>{dx.data(), K});
  emulate_gemm(1, N, K, M, k::MaskedGradTA<double>{g}, k::RowMajorB<double>{x.data(), K},
               k::StoreMatrix<double>{dw.data(), K});
  emulate_column_sum(M, N, k::MaskedGradColumns<double>{g}, k::StoreVector<double>{db.data()});
  char what[96];
  std::snprintf(what, sizeof what, "fused_linear_relu trial %d (M=%lld N=%lld K=%lld)", trial, (long long)M,
                (long long)N, (long long)K);
  expect_equal((std::string(what) + " forward").c_str(), out, out_ref);
  expect_equal((std::string(what) + " grad_input").c_str(), dx, dx_ref);
  expect_equal((std::string(what) + " grad_weight").c_str(), dw, dw_ref);
  expect_equal((std::string(what) + " grad_bias").c_str(), db, db_ref);
}

void check_layer_norm_param_grads(Rng& rng) {
  const int64_t M = 5, N = 7;
  std::vector<double> x(M * N), dy(M * N), mean(M), rstd(M);
  for (auto& v : x) v = rng.next(-3, 3);
  for (auto& v : dy) v = rng.next(-3, 3);
  for (int64_t r = 0; r < M; ++r) {
    mean[r] = rng.next(-2, 2);
    rstd[r] = rng.next(1, 3);
  }
  std::vector<double> dw_ref(N, 0.0), db_ref(N, 0.0), dw(N, NAN), db(N, NAN);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      dw_ref[c] += dy[r * N + c] * (x[r * N + c] - mean[r]) * rstd[r];
      db_ref[c] += dy[r * N + c];
    }
  emulate_column_sum(M, N, k::LayerNormGradWeightLoad<double>{dy.data(), x.data(), mean.data(), rstd.data(), N},
                     k::StoreVector<double>{dw.data()});
  emulate_column_sum(M, N, k::LayerNormGradBiasLoad<double>{dy.data(), N}, k::StoreVector<double>{db.data()});
  expect_equal("layer_norm grad_weight", dw, dw_ref);
  expect_equal("layer_norm grad_bias", db, db_ref);
}

void check_conversions() {
  // Round trips the WMMA staging relies on: a value loaded as float converts back exactly.
  for (int i = -2048; i <= 2048; ++i) {
    const float f = static_cast<float>(i) * 0.25f;
    const __half h = k::Num<__half>::from_acc(f);
    const __nv_bfloat16 bf = k::Num<__nv_bfloat16>::from_acc(k::Num<__half>::to_acc(h));
    if (k::Num<__half>::to_acc(k::Num<__half>::from_acc(k::Num<__half>::to_acc(h))) != k::Num<__half>::to_acc(h) ||
        k::Num<__nv_bfloat16>::to_acc(k::Num<__nv_bfloat16>::from_acc(k::Num<__nv_bfloat16>::to_acc(bf))) !=
            k::Num<__nv_bfloat16>::to_acc(bf)) {
      std::printf("FAIL conversion round trip at %g\n", f);
      ++g_failures;
      return;
    }
  }
  if (!(k::relu_keep_nan(NAN) != k::relu_keep_nan(NAN)) || k::relu_keep_nan(-1.0) != 0.0 ||
      k::relu_keep_nan(2.0f) != 2.0f) {
    std::printf("FAIL relu_keep_nan\n");
    ++g_failures;
  }
}

}  // namespace

int main() {
  Rng rng{20261202ULL};
  int trials = 0;
  for (int t = 0; t < 200; ++t, trials += 2) {
    check_conv<false>(rng, t);
    check_conv<true>(rng, t);
  }
  for (int t = 0; t < 100; ++t, ++trials) check_linear(rng, t);
  check_layer_norm_param_grads(rng);
  check_conversions();
  if (g_failures != 0) {
    std::printf("loaders_host_test: %d failure(s)\n", g_failures);
    return 1;
  }
  std::printf("loaders_host_test: OK (%d conv/linear problems, layer_norm column sums, conversions)\n", trials);
  return 0;
}
