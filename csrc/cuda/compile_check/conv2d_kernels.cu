// Compile check (no torch): every conv2d kernel instantiation of csrc/cuda/conv2d.cu.
#include "compile_check/instantiate.cuh"
#include "kernels/conv2d.cuh"

namespace xkernels::cuda::compile_check {
namespace {
template <typename T, bool CL>
void conv_kernels(std::vector<const void*>& out) {
  add_gemm<T, k::ConvWeightA<T, CL>, k::ConvInputPatchB<T, CL>, k::ConvOutputEpilogue<T, true>>(out);
  add_gemm<T, k::ConvWeightA<T, CL>, k::ConvInputPatchB<T, CL>, k::ConvOutputEpilogue<T, false>>(out);
  add_gemm<T, k::ConvWeightA<T, CL>, k::ConvInputPatchB<T, CL>, k::ConvOutputEpilogue<T, true, true>>(out);
  add_gemm<T, k::ConvWeightA<T, CL>, k::ConvInputPatchB<T, CL>, k::ConvOutputEpilogue<T, false, true>>(out);
  add_gemm<T, k::ConvWeightTA<T, CL>, k::ConvGradOutputScatterB<T, CL>, k::ConvGradInputEpilogue<T>>(out);
  add_gemm<T, k::ConvGradOutputA<T, CL>, k::ConvInputPatchTB<T, CL>, k::ConvGradWeightEpilogue<T, CL>>(out);
  add_column_sum<k::acc_t<T>, !CL, k::ConvGradOutputColumns<T>, k::StoreVector<T>>(out);
}
template <typename T>
struct ConvKernels {
  void operator()(std::vector<const void*>& out) const {
    conv_kernels<T, false>(out);
    conv_kernels<T, true>(out);
  }
};
}  // namespace
std::vector<const void*> conv2d_kernels() {
  std::vector<const void*> out;
  for_each_type<ConvKernels>(out);
  return out;
}
}  // namespace xkernels::cuda::compile_check
