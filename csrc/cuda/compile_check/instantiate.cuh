// Torch-free compile check of the kernel headers (scripts/check_cuda_compile.sh).
// Taking a kernel template's address in host code instantiates it, so nvcc compiles its
// device code for every requested architecture, exactly as the host wrappers would.
#pragma once
#include <type_traits>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/gemm.cuh"
#include "kernels/reduce.cuh"

namespace xkernels::cuda::compile_check {
namespace k = ::xkernels::cuda::kernels;

// Every kernel run_gemm may launch for these loaders/epilogue (launch.cuh).
template <typename T, class LoadA, class LoadB, class Epi>
void add_gemm(std::vector<const void*>& out) {
  using Acc = k::acc_t<T>;
  out.push_back(reinterpret_cast<const void*>(&k::gemm_simt_kernel<Acc, LoadA, LoadB, Epi>));
  out.push_back(reinterpret_cast<const void*>(&k::gemm_splitk_reduce_kernel<Acc, Epi>));
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)
    out.push_back(reinterpret_cast<const void*>(&k::gemm_wmma_kernel<T, LoadA, LoadB, Epi>));
}

// Every kernel run_column_sum may launch.
template <typename Acc, bool kRowsContiguous, class Load, class Epi>
void add_column_sum(std::vector<const void*>& out) {
  out.push_back(reinterpret_cast<const void*>(&k::column_sum_partial_kernel<Acc, kRowsContiguous, Load, Epi>));
  out.push_back(reinterpret_cast<const void*>(&k::column_sum_final_kernel<Acc, Epi>));
}

// Applies F<T>() to the four element types the ops support.
template <template <typename> class F>
void for_each_type(std::vector<const void*>& out) {
  F<double>{}(out);
  F<float>{}(out);
  F<__half>{}(out);
  F<__nv_bfloat16>{}(out);
}

}  // namespace xkernels::cuda::compile_check
