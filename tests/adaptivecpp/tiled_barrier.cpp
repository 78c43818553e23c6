// Known AdaptiveCpp bug (snapshot 49544a48, LLVM 19): with --acpp-targets=omp (the compiler-accelerated CPU
// backend), this kernel crashes the compiler in hipsycl::compiler::SubCfgFormationPass
// (VectorizationAnalysis::pushMissingOperands, SIGSEGV). It is a 2-D nd_range kernel that stages tiles in local
// memory between two barriers in a loop and keeps a small register tile: the shape of xkernels'
// linear_gemm_tiled, which crashes the same way. With --acpp-targets=omp.library-only (what the acpp backend
// uses) it compiles, and this program checks its result. tests/test_adaptivecpp_known_bugs.py runs both.
#include <sycl/sycl.hpp>

#include <cstdio>
struct Tiles { float a[16][64]; float b[16][64]; };
int main() {
  sycl::queue q;
  const int M = 64, N = 64, K = 64;
  float* A = sycl::malloc_shared<float>(M * K, q);
  float* B = sycl::malloc_shared<float>(K * N, q);
  float* C = sycl::malloc_shared<float>(M * N, q);
  for (int i = 0; i < M * K; ++i) A[i] = float(i % 5 - 2);  // small integers: every sum is exact
  for (int i = 0; i < K * N; ++i) B[i] = float(i % 3 - 1);
  q.submit([&](sycl::handler& h) {
    sycl::local_accessor<Tiles, 1> t(sycl::range<1>(1), h);
    h.parallel_for(sycl::nd_range<2>({16, 16}, {16, 16}), [=](sycl::nd_item<2> it) {
      Tiles& s = t[0];
      const int ty = it.get_local_id(0), tx = it.get_local_id(1), tid = ty * 16 + tx;
      float c[4][4] = {};
      for (int k0 = 0; k0 < K; k0 += 16) {
        for (int r = 0; r < 4; ++r) {
          const int e = tid + r * 256;
          s.a[e % 16][e / 16] = A[(e / 16) * K + k0 + e % 16];
          s.b[e / 64][e % 64] = B[(k0 + e / 64) * N + e % 64];
        }
        sycl::group_barrier(it.get_group());
        for (int kk = 0; kk < 16; ++kk)
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) c[i][j] = sycl::fma(s.a[kk][ty + i * 16], s.b[kk][tx + j * 16], c[i][j]);
        sycl::group_barrier(it.get_group());
      }
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) C[(ty + i * 16) * N + tx + j * 16] = c[i][j];
    });
  }).wait();
  int wrong = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float ref = 0;
      for (int k = 0; k < K; ++k) ref += A[m * K + k] * B[k * N + n];
      wrong += C[m * N + n] != ref;
    }
  std::printf("wrong %d of %d\n", wrong, M * N);
  return wrong != 0;
}
