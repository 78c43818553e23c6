// cuBLASLt GEMMs with fused bias / ReLU epilogues (see blaslt.h). Host code: the descriptors, the
// heuristic's choice of algorithm, and the launch on torch's cuBLASLt handle, workspace and stream.
#include "blaslt.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <string>

#ifdef XKERNELS_WITH_CUBLASLT
#include <ATen/cuda/CUDAContextLight.h>
#include <cublasLt.h>
#endif

namespace xkernels::cuda::blaslt {

bool enabled() {
#ifdef XKERNELS_WITH_CUBLASLT
  static const bool on = [] {
    const char* env = std::getenv("XKERNELS_CUDA_GEMM");
    const std::string v = env ? env : "auto";
    TORCH_CHECK_VALUE(v == "auto" || v == "cublaslt" || v == "native",
                      "xkernels: environment variable XKERNELS_CUDA_GEMM must be 'auto', 'cublaslt' or 'native', got '",
                      v, "'");
    return v != "native";
  }();
  return on;
#else
  return false;
#endif
}

#ifdef XKERNELS_WITH_CUBLASLT
namespace {

#define XK_LT_CHECK(op, expr)                                                                      \
  do {                                                                                             \
    const cublasStatus_t _st = (expr);                                                             \
    TORCH_CHECK(_st == CUBLAS_STATUS_SUCCESS, "xkernels.", op, ": cuBLASLt call ", #expr,          \
                " failed: ", cublasLtGetStatusName(_st), " (", cublasLtGetStatusString(_st), ")"); \
  } while (0)

struct TypeFacts {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

TypeFacts type_facts(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case at::kFloat: return {CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case at::kHalf: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case at::kBFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    default: TORCH_CHECK(false, "xkernels: cuBLASLt GEMM for dtype ", t, " is not supported");
  }
}

// Largest power of two (<= 256) dividing the address: what the heuristic may assume about a pointer.
uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a /= 2;
  return a;
}

// Owners of the cuBLASLt descriptors of one call (destroyed on every path out).
struct MatmulDesc {
  cublasLtMatmulDesc_t h = nullptr;
  ~MatmulDesc() {
    if (h) cublasLtMatmulDescDestroy(h);
  }
};
struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  ~Layout() {
    if (h) cublasLtMatrixLayoutDestroy(h);
  }
};
struct Preference {
  cublasLtMatmulPreference_t h = nullptr;
  ~Preference() {
    if (h) cublasLtMatmulPreferenceDestroy(h);
  }
};

template <typename V>
void set_desc(const char* op, cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  XK_LT_CHECK(op, cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}
template <typename V>
void set_pref(const char* op, cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const V& v) {
  XK_LT_CHECK(op, cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)));
}

}  // namespace

bool gemm(const char* op, at::ScalarType dtype, const Gemm& g, cudaStream_t stream) {
  const TypeFacts t = type_facts(dtype);
  cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();

  MatmulDesc desc;
  XK_LT_CHECK(op, cublasLtMatmulDescCreate(&desc.h, t.compute, t.scale));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(op, desc.h, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  set_desc(op, desc.h, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (g.bias != nullptr) {
    epi = g.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    set_desc(op, desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    set_desc(op, desc.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, t.data);
  } else if (g.relu) {
    epi = CUBLASLT_EPILOGUE_RELU;
  }
  set_desc(op, desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);

  // Column-major layouts of the stored matrices.
  Layout la, lb, ld;
  XK_LT_CHECK(op, cublasLtMatrixLayoutCreate(&la.h, t.data, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda));
  XK_LT_CHECK(op, cublasLtMatrixLayoutCreate(&lb.h, t.data, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb));
  XK_LT_CHECK(op, cublasLtMatrixLayoutCreate(&ld.h, t.data, g.m, g.n, g.ldd));

  Preference pref;
  XK_LT_CHECK(op, cublasLtMatmulPreferenceCreate(&pref.h));
  const uint64_t ws_size = at::cuda::getCUDABlasLtWorkspaceSize();
  void* ws = ws_size > 0 ? at::cuda::getCUDABlasLtWorkspace() : nullptr;
  set_pref(op, pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws_size);
  set_pref(op, pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(g.a));
  set_pref(op, pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(g.b));
  set_pref(op, pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(g.d));
  set_pref(op, pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(g.d));

  cublasLtMatmulHeuristicResult_t choice{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, desc.h, la.h, lb.h, ld.h, ld.h, pref.h, 1, &choice, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return false;
  XK_LT_CHECK(op, st);

  const double alpha64 = 1.0, beta64 = 0.0;
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const bool f64 = t.scale == CUDA_R_64F;
  XK_LT_CHECK(op, cublasLtMatmul(handle, desc.h, f64 ? static_cast<const void*>(&alpha64) : &alpha32, g.a, la.h, g.b,
                                 lb.h, f64 ? static_cast<const void*>(&beta64) : &beta32, g.d, ld.h, g.d, ld.h,
                                 &choice.algo, ws, ws_size, stream));
  return true;
}
#else
bool gemm(const char*, at::ScalarType, const Gemm&, cudaStream_t) { return false; }
#endif

}  // namespace xkernels::cuda::blaslt
