# Floating-point semantics, pinned identically on every backend. The policy is
# written down once, in README.md ("Floating-point semantics"):
#   * no fast-math: IEEE division and sqrt, NaN/Inf honoured, no reassociation;
#   * no automatic FMA contraction by the compiler (a*b+c stays two roundings) —
#     kernels that want a fused multiply-add say so explicitly (fma()), which
#     makes the choice visible in the source and identical across compilers.
# Host (reference) kernels: gcc/clang flags below.
# SYCL device code:       the same flags are passed to the run-time compiler
#                         (csrc/sycl/runtime.cpp, kDeviceFPOptions) and to icpx.
# CUDA device code:       --fmad=false -prec-div=true -prec-sqrt=true -ftz=false (CUDABackend.cmake).
set(XK_HOST_FP_FLAGS -fno-fast-math -ffp-contract=off -fno-associative-math -fno-reciprocal-math)
string(REPLACE ";" " " XK_HOST_FP_FLAGS_STR "${XK_HOST_FP_FLAGS}")
