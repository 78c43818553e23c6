// CPU checks of the CUDA kernels (scripts/check_cuda_compile.sh builds this with the host
// C++ compiler and runs it; no GPU needed). Against direct convolution / linear / layer_norm
// formulas written independently here, for NCHW and channels_last, groups, stride, padding,
// dilation, odd sizes and several tiles:
//   1. the implicit-GEMM index mappings: loaders/epilogues driven by a plain sequential GEMM;
//   2. the SIMT kernels themselves (GEMM core with split-K and the grid-y loop, column sums,
//      layer_norm forward/backward in warp- and block-per-row modes) executed by the CPU
//      simulator of cpu_sim.h, with the launch geometry of launch.cuh mirrored below;
//   3. the WMMA GEMM kernel against the simulator's functional model of nvcuda::wmma
//      (addressing and tiling; the tensor cores' own arithmetic needs a GPU).
// Small-integer data keeps every sum exact, so results must match bit for bit (layer_norm:
// tight tolerances).
#include "compile_check/cpu_sim.h"  // before the kernel headers

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/conv2d.cuh"
#include "kernels/fused_linear_relu.cuh"
#include "kernels/gemm.cuh"
#include "kernels/layer_norm.cuh"
#include "kernels/reduce.cuh"

namespace k = xkernels::cuda::kernels;

namespace {

int g_failures = 0;
int g_checks = 0;

struct Rng {  // deterministic LCG
  unsigned long long s;
  int next(int lo, int hi) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + static_cast<int>((s >> 33) % static_cast<unsigned long long>(hi - lo + 1));
  }
};

template <typename T>
double d(T v) {
  return static_cast<double>(k::Num<T>::to_acc(v));
}
template <typename T>
T t_of(double v) {
  return k::Num<T>::from_acc(static_cast<k::acc_t<T>>(v));
}

template <typename T>
std::vector<T> ints(Rng& rng, size_t n, int lo = -3, int hi = 3) {
  std::vector<T> v(n);
  for (auto& e : v) e = t_of<T>(rng.next(lo, hi));
  return v;
}
template <typename T>
std::vector<double> as_double(const std::vector<T>& v) {
  std::vector<double> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = d(v[i]);
  return o;
}

void expect_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                  double rtol = 0.0) {
  ++g_checks;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= rtol * std::max(1.0, std::fabs(want[i])))) {
      std::printf("FAIL %s: element %zu is %.17g, expected %.17g\n", what.c_str(), i, got[i], want[i]);
      ++g_failures;
      return;
    }
  }
}

// ---------------------------------------------------------------- two ways to run a GEMM
// Sequential reference driver of the loaders/epilogue (index mappings only).
struct Sequential {
  const char* name() const { return "sequential"; }
  template <typename T, class A, class B, class E>
  void gemm(int64_t G, int64_t M, int64_t N, int64_t K, const A& a, const B& b, const E& e) const {
    for (int64_t g = 0; g < G; ++g)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          k::acc_t<T> acc = 0;
          for (int64_t kk = 0; kk < K; ++kk) acc += a(g, m, kk) * b(g, kk, n);
          e(g, m, n, acc);
        }
  }
  template <typename Acc, bool kRowsContiguous, class L, class E>
  void column_sum(int64_t R, int64_t C, const L& l, const E& e) const {
    for (int64_t c = 0; c < C; ++c) {
      Acc acc = 0;
      for (int64_t r = 0; r < R; ++r) acc += l(r, c);
      e(c, acc);
    }
  }
};

// The real SIMT kernels on the CPU simulator, geometry as in launch.cuh's run_gemm /
// run_column_sum but with the split count / chunk count / grid-y cap forced per run.
struct Simulated {
  int64_t splits;       // requested K slices
  unsigned grid_y_cap;  // < G*splits exercises the kernel's z loop
  int64_t chunks;       // column-sum row chunks
  const char* name() const { return "simulated"; }
  template <typename T, class A, class B, class E>
  void gemm(int64_t G, int64_t M, int64_t N, int64_t K, const A& a, const B& b, const E& e) const {
    using Tile = k::SimtGemmTile;
    using Acc = k::acc_t<T>;
    k::GemmShape s{G, M, N, K, k::ceil_div(N, Tile::BN), 1, k::ceil_div(K, Tile::BK) * Tile::BK};
    if (splits > 1) {
      s.k_per_split = k::ceil_div(k::ceil_div(K, splits), Tile::BK) * Tile::BK;
      s.splits = k::ceil_div(K, s.k_per_split);
    }
    std::vector<Acc> ws(s.splits > 1 ? s.splits * G * M * N : 0, Acc(-12345));
    Acc* wp = s.splits > 1 ? ws.data() : nullptr;
    const int64_t tiles = k::ceil_div(M, Tile::BM) * s.tiles_n;
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min<int64_t>(G * s.splits, grid_y_cap)));
    xk_sim::launch(grid, dim3(Tile::kThreads), k::gemm_simt_kernel<Acc, A, B, E>, a, b, e, s, wp);
    if (s.splits > 1)
      xk_sim::launch(dim3(3), dim3(64), k::gemm_splitk_reduce_kernel<Acc, E>, static_cast<const Acc*>(wp), s.splits, G,
                     M, N, e);
  }
  template <typename Acc, bool kRowsContiguous, class L, class E>
  void column_sum(int64_t R, int64_t C, const L& l, const E& e) const {
    using Tile = k::ColumnSumTile;
    const int64_t rows_per_chunk = k::ceil_div(R, chunks);
    const int64_t n_chunks = k::ceil_div(R, rows_per_chunk);
    std::vector<Acc> partial(n_chunks > 1 ? n_chunks * C : 0);
    Acc* pp = n_chunks > 1 ? partial.data() : nullptr;
    const dim3 grid(static_cast<unsigned>(kRowsContiguous ? C : k::ceil_div(C, Tile::kColLanes)),
                    static_cast<unsigned>(n_chunks));
    const dim3 block = kRowsContiguous ? dim3(Tile::kRowThreads) : dim3(Tile::kColLanes, Tile::kRowLanes);
    xk_sim::launch(grid, block, k::column_sum_partial_kernel<Acc, kRowsContiguous, L, E>, l, e, R, C, rows_per_chunk,
                   pp);
    if (n_chunks > 1)
      xk_sim::launch(dim3(2), dim3(32), k::column_sum_final_kernel<Acc, E>, static_cast<const Acc*>(pp), n_chunks, C,
                     e);
  }
};

// The WMMA kernel (half / bfloat16) on the simulator's functional wmma model, geometry as in
// run_gemm's tensor-core path.
struct SimulatedWmma : Simulated {
  const char* name() const { return "simulated-wmma"; }
  template <typename T, class A, class B, class E>
  void gemm(int64_t G, int64_t M, int64_t N, int64_t K, const A& a, const B& b, const E& e) const {
    using Tile = k::WmmaGemmTile;
    k::GemmShape s{G, M, N, K, k::ceil_div(N, Tile::BN), 1, k::ceil_div(K, Tile::BK) * Tile::BK};
    if (splits > 1) {
      s.k_per_split = k::ceil_div(k::ceil_div(K, splits), Tile::BK) * Tile::BK;
      s.splits = k::ceil_div(K, s.k_per_split);
    }
    std::vector<float> ws(s.splits > 1 ? s.splits * G * M * N : 0, -12345.0f);
    float* wp = s.splits > 1 ? ws.data() : nullptr;
    const int64_t tiles = k::ceil_div(M, Tile::BM) * s.tiles_n;
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min<int64_t>(G * s.splits, grid_y_cap)));
    xk_sim::launch(grid, dim3(Tile::kThreads), k::gemm_wmma_kernel<T, A, B, E>, a, b, e, s, wp);
    if (s.splits > 1)
      xk_sim::launch(dim3(3), dim3(64), k::gemm_splitk_reduce_kernel<float, E>, static_cast<const float*>(wp), s.splits,
                     G, M, N, e);
  }
};

// ---------------------------------------------------------------- conv2d
k::Strides4 dense_strides(int64_t D1, int64_t D2, int64_t D3, bool cl) {
  if (cl) return {D1 * D2 * D3, 1, D3 * D1, D1};
  return {D1 * D2 * D3, D2 * D3, D3, 1};
}
int64_t at4(const k::Strides4& s, int64_t a, int64_t b, int64_t c, int64_t e) {
  return a * s.n + b * s.c + c * s.h + e * s.w;
}

template <typename T, bool CL, class Runner>
void check_conv(Rng& rng, int trial, const Runner& run, int max_hw) {
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
  p.H = rng.next(p.dil_h * (p.KH - 1) + 1, max_hw);
  p.W = rng.next(p.dil_w * (p.KW - 1) + 1, max_hw);
  p.OH = (p.H + 2 * p.pad_h - p.dil_h * (p.KH - 1) - 1) / p.stride_h + 1;
  p.OW = (p.W + 2 * p.pad_w - p.dil_w * (p.KW - 1) - 1) / p.stride_w + 1;

  const k::Strides4 sx = dense_strides(p.C, p.H, p.W, CL), sw = dense_strides(p.Cg, p.KH, p.KW, CL),
                    sy = dense_strides(p.O, p.OH, p.OW, CL);
  const auto x = ints<T>(rng, p.N * p.C * p.H * p.W), w = ints<T>(rng, p.O * p.Cg * p.KH * p.KW),
             bias = ints<T>(rng, p.O), dy = ints<T>(rng, p.N * p.O * p.OH * p.OW);
  const auto xd = as_double(x), wd = as_double(w), bd = as_double(bias), dyd = as_double(dy);

  std::vector<double> y_ref(dy.size()), dx_ref(x.size(), 0.0), dw_ref(w.size(), 0.0), db_ref(p.O, 0.0);
  for (int64_t b = 0; b < p.N; ++b)
    for (int64_t o = 0; o < p.O; ++o)
      for (int64_t oh = 0; oh < p.OH; ++oh)
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          const int64_t g = o / p.Og;
          double acc = bd[o];
          const double gy = dyd[at4(sy, b, o, oh, ow)];
          db_ref[o] += gy;
          for (int64_t c = 0; c < p.Cg; ++c)
            for (int64_t kh = 0; kh < p.KH; ++kh)
              for (int64_t kw = 0; kw < p.KW; ++kw) {
                const int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dil_h;
                const int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dil_w;
                if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) continue;
                const int64_t xi = at4(sx, b, g * p.Cg + c, ih, iw), wi = at4(sw, o, c, kh, kw);
                acc += xd[xi] * wd[wi];
                dx_ref[xi] += gy * wd[wi];
                dw_ref[wi] += gy * xd[xi];
              }
          y_ref[at4(sy, b, o, oh, ow)] = acc;
        }

  const T nan = t_of<T>(NAN);
  std::vector<T> y(y_ref.size(), nan), dx(x.size(), nan), dw(w.size(), nan), db(p.O, nan);
  run.template gemm<T>(groups, p.Og, p.N * p.OH * p.OW, p.Cg * p.KH * p.KW, k::ConvWeightA<T, CL>{w.data(), sw, p},
                       k::ConvInputPatchB<T, CL>{x.data(), sx, p},
                       k::ConvOutputEpilogue<T, true>{y.data(), sy, bias.data(), p});
  run.template gemm<T>(groups, p.Cg, p.N * p.H * p.W, p.Og * p.KH * p.KW, k::ConvWeightTA<T, CL>{w.data(), sw, p},
                       k::ConvGradOutputScatterB<T, CL>{dy.data(), sy, p},
                       k::ConvGradInputEpilogue<T>{dx.data(), sx, p});
  run.template gemm<T>(groups, p.Og, p.Cg * p.KH * p.KW, p.N * p.OH * p.OW, k::ConvGradOutputA<T, CL>{dy.data(), sy, p},
                       k::ConvInputPatchTB<T, CL>{x.data(), sx, p}, k::ConvGradWeightEpilogue<T, CL>{dw.data(), sw, p});
  run.template column_sum<k::acc_t<T>, !CL>(
      p.N * p.OH * p.OW, p.O, k::ConvGradOutputColumns<T>{dy.data(), sy, p.OH, p.OW}, k::StoreVector<T>{db.data()});
  char what[200];
  std::snprintf(what, sizeof what,
                "%s conv2d %s %s trial %d (N=%lld C=%lld H=%lld W=%lld O=%lld groups=%lld K=%lldx%lld)", run.name(),
                sizeof(T) == 8   ? "double"
                : sizeof(T) == 4 ? "float"
                                 : "half",
                CL ? "channels_last" : "NCHW", trial, (long long)p.N, (long long)p.C, (long long)p.H, (long long)p.W,
                (long long)p.O, (long long)groups, (long long)p.KH, (long long)p.KW);
  // conv2d_relu's epilogue: relu(conv + bias + residual), the residual laid out as y.
  const auto res = ints<T>(rng, y_ref.size());
  std::vector<T> yr(y_ref.size(), nan);
  run.template gemm<T>(groups, p.Og, p.N * p.OH * p.OW, p.Cg * p.KH * p.KW, k::ConvWeightA<T, CL>{w.data(), sw, p},
                       k::ConvInputPatchB<T, CL>{x.data(), sx, p},
                       k::ConvOutputEpilogue<T, true, true>{yr.data(), sy, bias.data(), p, res.data()});
  const auto resd = as_double(res);
  std::vector<double> yr_ref(y_ref.size());
  for (size_t i = 0; i < y_ref.size(); ++i) yr_ref[i] = std::max(0.0, y_ref[i] + resd[i]);
  expect_close(std::string(what) + " forward", as_double(y), y_ref);
  expect_close(std::string(what) + " forward relu(+residual)", as_double(yr), yr_ref);
  expect_close(std::string(what) + " grad_input", as_double(dx), dx_ref);
  expect_close(std::string(what) + " grad_weight", as_double(dw), dw_ref);
  expect_close(std::string(what) + " grad_bias", as_double(db), db_ref);
}

// ---------------------------------------------------------------- fused_linear_relu
template <typename T, class Runner>
void check_linear(Rng& rng, int trial, const Runner& run, int max_dim) {
  const int64_t M = rng.next(1, max_dim), N = rng.next(1, max_dim), K = rng.next(1, max_dim);
  const auto x = ints<T>(rng, M * K, -2, 2), w = ints<T>(rng, N * K, -2, 2), b = ints<T>(rng, N, -2, 2),
             dy = ints<T>(rng, M * N, -2, 2);
  const auto xd = as_double(x), wd = as_double(w), bd = as_double(b), dyd = as_double(dy);
  std::vector<double> out_ref(M * N), dx_ref(M * K, 0.0), dw_ref(N * K, 0.0), db_ref(N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bd[n];
      for (int64_t kk = 0; kk < K; ++kk) acc += xd[m * K + kk] * wd[n * K + kk];
      out_ref[m * N + n] = acc > 0 ? acc : 0;
    }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const double g = out_ref[m * N + n] > 0 ? dyd[m * N + n] : 0;
      db_ref[n] += g;
      for (int64_t kk = 0; kk < K; ++kk) {
        dx_ref[m * K + kk] += g * wd[n * K + kk];
        dw_ref[n * K + kk] += g * xd[m * K + kk];
      }
    }
  const T nan = t_of<T>(NAN);
  std::vector<T> out(M * N, nan), dx(M * K, nan), dw(N * K, nan), db(N, nan);
  run.template gemm<T>(1, M, N, K, k::RowMajorA<T>{x.data(), K}, k::TransposedB<T>{w.data(), K},
                       k::LinearReluEpilogue<T, true>{out.data(), b.data(), N});
  const k::MaskedGrad<T> g{dy.data(), out.data(), N};
  run.template gemm<T>(1, M, K, N, k::MaskedGradA<T>{g}, k::RowMajorB<T>{w.data(), K}, k::StoreMatrix<T>{dx.data(), K});
  run.template gemm<T>(1, N, K, M, k::MaskedGradTA<T>{g}, k::RowMajorB<T>{x.data(), K},
                       k::StoreMatrix<T>{dw.data(), K});
  run.template column_sum<k::acc_t<T>, false>(M, N, k::MaskedGradColumns<T>{g}, k::StoreVector<T>{db.data()});
  char what[128];
  std::snprintf(what, sizeof what, "%s fused_linear_relu %s trial %d (M=%lld N=%lld K=%lld)", run.name(),
                sizeof(T) == 8   ? "double"
                : sizeof(T) == 4 ? "float"
                                 : "half",
                trial, (long long)M, (long long)N, (long long)K);
  expect_close(std::string(what) + " forward", as_double(out), out_ref);
  expect_close(std::string(what) + " grad_input", as_double(dx), dx_ref);
  expect_close(std::string(what) + " grad_weight", as_double(dw), dw_ref);
  expect_close(std::string(what) + " grad_bias", as_double(db), db_ref);
}

// ---------------------------------------------------------------- layer_norm
template <typename T, class Runner>
void check_layer_norm(Rng& rng, int64_t M, int64_t N, const Runner& run) {
  using Acc = k::acc_t<T>;
  std::vector<T> x(M * N), w(N), b(N), dy(M * N);
  for (auto& v : x) v = t_of<T>(rng.next(-50, 50) / 8.0 + 3.0);
  for (auto& v : w) v = t_of<T>(rng.next(-8, 8) / 4.0);
  for (auto& v : b) v = t_of<T>(rng.next(-8, 8) / 4.0);
  for (auto& v : dy) v = t_of<T>(rng.next(-8, 8) / 4.0);
  const double eps = 1e-5;
  std::vector<double> y_ref(M * N), mean_ref(M), rstd_ref(M), dx_ref(M * N), dw_ref(N, 0.0), db_ref(N, 0.0);
  for (int64_t r = 0; r < M; ++r) {
    double s = 0, sq = 0;
    for (int64_t j = 0; j < N; ++j) s += d(x[r * N + j]);
    const double mu = s / N;
    for (int64_t j = 0; j < N; ++j) sq += (d(x[r * N + j]) - mu) * (d(x[r * N + j]) - mu);
    const double rs = 1 / std::sqrt(sq / N + eps);
    mean_ref[r] = mu;
    rstd_ref[r] = rs;
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < N; ++j) {
      const double xh = (d(x[r * N + j]) - mu) * rs;
      y_ref[r * N + j] = xh * d(w[j]) + d(b[j]);
      sg += d(dy[r * N + j]) * d(w[j]);
      sgx += d(dy[r * N + j]) * d(w[j]) * xh;
      dw_ref[j] += d(dy[r * N + j]) * xh;
      db_ref[j] += d(dy[r * N + j]);
    }
    for (int64_t j = 0; j < N; ++j) {
      const double xh = (d(x[r * N + j]) - mu) * rs;
      dx_ref[r * N + j] = rs * (d(dy[r * N + j]) * d(w[j]) - sg / N - xh * sgx / N);
    }
  }
  const T nan = t_of<T>(NAN);
  std::vector<T> y(M * N, nan), dx(M * N, nan), dw(N, nan), db(N, nan);
  std::vector<Acc> mean(M, Acc(NAN)), rstd(M, Acc(NAN));
  const bool block_row = N > k::LayerNormConfig::kMaxWarpRow;  // layer_norm.cu's row_launch
  const dim3 block =
      block_row ? dim3(k::LayerNormConfig::kBlockThreads) : dim3(32, k::LayerNormConfig::kWarpRowsPerBlock);
  const dim3 grid = block_row ? dim3(static_cast<unsigned>(std::max<int64_t>(1, M / 2)))  // < M: rows loop
                              : dim3(static_cast<unsigned>(k::ceil_div(M, k::LayerNormConfig::kWarpRowsPerBlock)));
  auto fwd = block_row ? k::layer_norm_forward_kernel<T, true> : k::layer_norm_forward_kernel<T, false>;
  xk_sim::launch(grid, block, fwd, static_cast<const T*>(x.data()), static_cast<const T*>(w.data()),
                 static_cast<const T*>(b.data()), y.data(), mean.data(), rstd.data(), M, N, static_cast<Acc>(eps));
  auto bwd = block_row ? k::layer_norm_backward_input_kernel<T, true> : k::layer_norm_backward_input_kernel<T, false>;
  xk_sim::launch(grid, block, bwd, static_cast<const T*>(dy.data()), static_cast<const T*>(x.data()),
                 static_cast<const Acc*>(mean.data()), static_cast<const Acc*>(rstd.data()),
                 static_cast<const T*>(w.data()), dx.data(), M, N);
  run.template column_sum<Acc, false>(M, N,
                                      k::LayerNormGradWeightLoad<T>{dy.data(), x.data(), mean.data(), rstd.data(), N},
                                      k::StoreVector<T>{dw.data()});
  run.template column_sum<Acc, false>(M, N, k::LayerNormGradBiasLoad<T>{dy.data(), N}, k::StoreVector<T>{db.data()});
  const double tol = sizeof(T) == 8 ? 1e-12 : 2e-5;
  char what[96];
  std::snprintf(what, sizeof what, "layer_norm %s M=%lld N=%lld (%s per row)", sizeof(T) == 8 ? "double" : "float",
                (long long)M, (long long)N, block_row ? "block" : "warp");
  std::vector<double> md(mean.begin(), mean.end()), rd(rstd.begin(), rstd.end());
  expect_close(std::string(what) + " output", as_double(y), y_ref, tol);
  expect_close(std::string(what) + " mean", md, mean_ref, tol);
  expect_close(std::string(what) + " rstd", rd, rstd_ref, tol);
  expect_close(std::string(what) + " grad_input", as_double(dx), dx_ref, tol);
  expect_close(std::string(what) + " grad_weight", as_double(dw), dw_ref, tol);
  expect_close(std::string(what) + " grad_bias", as_double(db), db_ref, tol);
}

void check_conversions() {
  ++g_checks;
  // Round trips the WMMA staging relies on: a value loaded as float converts back exactly.
  for (int i = -4096; i <= 4096; ++i) {
    const __half h = k::Num<__half>::from_acc(static_cast<float>(i) * 0.125f);
    const __nv_bfloat16 bf = k::Num<__nv_bfloat16>::from_acc(static_cast<float>(i) * 0.5f);
    if (k::Num<__half>::to_acc(k::Num<__half>::from_acc(k::Num<__half>::to_acc(h))) != k::Num<__half>::to_acc(h) ||
        k::Num<__nv_bfloat16>::to_acc(k::Num<__nv_bfloat16>::from_acc(k::Num<__nv_bfloat16>::to_acc(bf))) !=
            k::Num<__nv_bfloat16>::to_acc(bf)) {
      std::printf("FAIL conversion round trip at %d\n", i);
      ++g_failures;
      return;
    }
  }
  if (!std::isnan(k::relu_keep_nan(NAN)) || k::relu_keep_nan(-1.0) != 0.0 || k::relu_keep_nan(2.0f) != 2.0f) {
    std::printf("FAIL relu_keep_nan\n");
    ++g_failures;
  }
}

}  // namespace

int main() {
  Rng rng{20261202ULL};
  // 1. index mappings, many small random problems.
  const Sequential seq;
  for (int t = 0; t < 150; ++t) {
    check_conv<double, false>(rng, t, seq, 9);
    check_conv<double, true>(rng, t, seq, 9);
    check_linear<double>(rng, t, seq, 9);
  }
  // 2. the SIMT kernels on the simulator: several tiles, split-K, grid-y loop, chunked sums.
  const Simulated plain{1, 65535, 1}, split{3, 65535, 3}, looped{2, 2, 2};
  for (int t = 0; t < 3; ++t) {
    const Simulated& run = t == 0 ? plain : t == 1 ? split : looped;
    check_conv<float, false>(rng, t, run, 14);
    check_conv<float, true>(rng, t, run, 14);
    if (t % 2 == 0)
      check_conv<double, false>(rng, t, run, 12);
    else
      check_conv<double, true>(rng, t, run, 12);
    check_linear<float>(rng, t, run, 90);
    check_linear<double>(rng, t, run, 70);
    check_linear<__half>(rng, t, run, 70);
    check_linear<__nv_bfloat16>(rng, t, run, 40);
  }
  check_conv<__half, true>(rng, 0, split, 10);
  check_conv<__nv_bfloat16, false>(rng, 0, looped, 10);
  // 3. the WMMA kernel (functional fragment model): tiles, K steps of 32, split-K, grid-y loop.
  const SimulatedWmma wplain{{1, 65535, 1}}, wsplit{{3, 65535, 3}}, wlooped{{2, 2, 2}};
  for (int t = 0; t < 3; ++t) {
    const SimulatedWmma& run = t == 0 ? wplain : t == 1 ? wsplit : wlooped;
    check_linear<__half>(rng, t, run, 80);
    check_linear<__nv_bfloat16>(rng, t, run, 40);
    if (t % 2 == 0)
      check_conv<__half, false>(rng, t, run, 12);
    else
      check_conv<__half, true>(rng, t, run, 12);
    check_conv<__nv_bfloat16, true>(rng, t, run, 10);
  }
  check_layer_norm<float>(rng, 7, 50, plain);     // warp per row, ragged last block
  check_layer_norm<double>(rng, 9, 1024, split);  // longest warp row
  check_layer_norm<float>(rng, 5, 1500, split);   // block per row, rows loop
  check_layer_norm<double>(rng, 3, 2049, looped);
  check_conversions();
  if (g_failures != 0) {
    std::printf("kernels_cpu_test: %d of %d checks failed\n", g_failures, g_checks);
    return 1;
  }
  std::printf(
      "kernels_cpu_test: OK (%d checks: index mappings, simulated SIMT and WMMA GEMM/split-K, column sums, "
      "layer_norm)\n",
      g_checks);
  return 0;
}
