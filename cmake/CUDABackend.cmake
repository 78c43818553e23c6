# Native CUDA backend (csrc/cuda): host wrappers + kernels compiled by nvcc.
#
# XKERNELS_CUDA=AUTO|ON|OFF is decided from toolchain facts only, never from whether a GPU is
# present: ON needs (1) torch built with CUDA (XKERNELS_TORCH_CUDA_VERSION = torch.version.cuda,
# passed by setup.py / scripts/dev_build.sh), (2) nvcc found (CUDACXX, CMAKE_CUDA_COMPILER, PATH,
# or CUDA_HOME/bin), (3) nvcc's major version equal to torch's CUDA major version (the runtime
# libraries torch loads must understand the code nvcc emits). AUTO builds when all hold;
# ON fails configuration with the reason when one does not.
#
# Architectures: TORCH_CUDA_ARCH_LIST (environment or cache; torch's syntax, e.g. "8.0;9.0",
# "8.6 9.0+PTX", "9.0a") or CMAKE_CUDA_ARCHITECTURES; default SASS for sm_80 and sm_90 plus
# PTX for compute_90 (newer GPUs JIT it).
# Floating point: the "nvcc:" line of cmake/fp_flags.txt (--fmad=false -prec-div=true -prec-sqrt=true -ftz=false).
set(XK_WITH_CUDA OFF)
set(XK_CUDA_ARCHS "")
string(TOUPPER "${XKERNELS_CUDA}" _xk_cuda_opt)
if(NOT _xk_cuda_opt MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "XKERNELS_CUDA must be AUTO, ON or OFF, got '${XKERNELS_CUDA}'")
endif()

# Converts torch's arch list syntax to CMake's CUDA_ARCHITECTURES ("8.0" -> 80-real, "9.0+PTX" -> 90).
function(xk_torch_arch_list_to_cmake in out)
  string(REPLACE " " ";" _list "${in}")
  set(_res "")
  foreach(a IN LISTS _list)
    if(a STREQUAL "")
      continue()
    endif()
    if(NOT a MATCHES "^([0-9]+)\\.([0-9]+)([af]?)(\\+PTX)?$")
      message(FATAL_ERROR "TORCH_CUDA_ARCH_LIST: cannot parse '${a}' (expected e.g. 8.0, 9.0a, 8.6+PTX)")
    endif()
    set(_a "${CMAKE_MATCH_1}${CMAKE_MATCH_2}${CMAKE_MATCH_3}")
    if(CMAKE_MATCH_4)
      list(APPEND _res "${_a}")
    else()
      list(APPEND _res "${_a}-real")
    endif()
  endforeach()
  set(${out} "${_res}" PARENT_SCOPE)
endfunction()

if(_xk_cuda_opt STREQUAL "OFF")
  set(_xk_cuda_reason "disabled (XKERNELS_CUDA=OFF)")
elseif(NOT XKERNELS_TORCH_CUDA_VERSION)
  set(_xk_cuda_reason "torch ${Torch_VERSION} was built without CUDA (torch.version.cuda is None)")
else()
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(_xk_nvcc nvcc HINTS "$ENV{CUDA_HOME}/bin" "$ENV{CUDA_PATH}/bin" /usr/local/cuda/bin)
    if(_xk_nvcc)
      set(CMAKE_CUDA_COMPILER "${_xk_nvcc}" CACHE FILEPATH "CUDA compiler")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(_xk_cuda_reason "nvcc not found (set CUDACXX, CUDA_HOME or put nvcc on PATH)")
  else()
    execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --version OUTPUT_VARIABLE _xk_nvcc_out RESULT_VARIABLE _rc)
    string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" _m "${_xk_nvcc_out}")
    set(_xk_nvcc_major "${CMAKE_MATCH_1}")
    set(_xk_nvcc_ver "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    string(REGEX MATCH "^([0-9]+)" _m "${XKERNELS_TORCH_CUDA_VERSION}")
    set(_xk_torch_cuda_major "${CMAKE_MATCH_1}")
    if(NOT _rc EQUAL 0 OR _xk_nvcc_major STREQUAL "")
      set(_xk_cuda_reason "could not read the version of ${CMAKE_CUDA_COMPILER}")
    elseif(_xk_torch_cuda_major STREQUAL "" OR NOT _xk_nvcc_major EQUAL _xk_torch_cuda_major)
      set(_xk_cuda_reason "nvcc ${_xk_nvcc_ver} (${CMAKE_CUDA_COMPILER}) does not match torch's CUDA ${XKERNELS_TORCH_CUDA_VERSION} (major versions differ)")
    else()
      set(XK_WITH_CUDA ON)
    endif()
  endif()
endif()

if(_xk_cuda_opt STREQUAL "ON" AND NOT XK_WITH_CUDA)
  message(FATAL_ERROR "XKERNELS_CUDA=ON but ${_xk_cuda_reason}")
endif()

if(XK_WITH_CUDA)
  if(DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT "$ENV{TORCH_CUDA_ARCH_LIST}" STREQUAL "")
    xk_torch_arch_list_to_cmake("$ENV{TORCH_CUDA_ARCH_LIST}" XK_CUDA_ARCHS)
    set(_xk_arch_src "TORCH_CUDA_ARCH_LIST=$ENV{TORCH_CUDA_ARCH_LIST}")
  elseif(TORCH_CUDA_ARCH_LIST)
    xk_torch_arch_list_to_cmake("${TORCH_CUDA_ARCH_LIST}" XK_CUDA_ARCHS)
    set(_xk_arch_src "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}")
  elseif(CMAKE_CUDA_ARCHITECTURES)
    set(XK_CUDA_ARCHS "${CMAKE_CUDA_ARCHITECTURES}")
    set(_xk_arch_src "CMAKE_CUDA_ARCHITECTURES")
  else()
    set(XK_CUDA_ARCHS "80-real;90")
    set(_xk_arch_src "default")
  endif()
  # A CUDA build of torch (Caffe2/public/cuda.cmake, run by find_package(Torch)) has already
  # appended -gencode flags to CMAKE_CUDA_FLAGS, from TORCH_CUDA_ARCH_LIST or by detecting the
  # GPUs of this machine, and reset CMAKE_CUDA_ARCHITECTURES. The architectures are this file's
  # decision (never the GPU present at build time): drop torch's flags, use XK_CUDA_ARCHS.
  string(REGEX REPLACE "-gencode[ =]+arch=[^ ]+" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
  set(CMAKE_CUDA_ARCHITECTURES "${XK_CUDA_ARCHS}")
  enable_language(CUDA)
  file(GLOB XK_CUDA_SOURCES CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/csrc/cuda/*.cu"
       "${CMAKE_CURRENT_SOURCE_DIR}/csrc/cuda/*.cpp")
  list(APPEND XK_SOURCES ${XK_CUDA_SOURCES})
  string(REPLACE ";" "," _xk_archs_shown "${XK_CUDA_ARCHS}")
  set(_xk_cuda_reason "nvcc ${_xk_nvcc_ver} for torch CUDA ${XKERNELS_TORCH_CUDA_VERSION}, architectures ${_xk_archs_shown} (${_xk_arch_src})")
endif()
list(APPEND XK_SUMMARY "CUDA backend    : ${XK_WITH_CUDA} — ${_xk_cuda_reason}")

# cuBLASLt (csrc/cuda/blaslt.cu: tensor-core GEMMs with fused bias/ReLU epilogues): the library torch's CUDA
# build loads. Its header and library come from the CUDA toolkit or from the nvidia-* wheels torch depends on
# (site-packages/nvidia/cu13 or nvidia/cublas); linked by its versioned name, the one torch has loaded. Without
# it the native CUDA backend runs its own GEMM kernels (kernels/gemm.cuh) only.
set(XK_WITH_CUBLASLT OFF)
if(XK_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  get_filename_component(_xk_site "${Torch_DIR}/../../../.." ABSOLUTE)
  find_path(XK_CUBLASLT_INCLUDE_DIR cublasLt.h HINTS ${CUDAToolkit_INCLUDE_DIRS} "${_xk_site}/nvidia/cu13/include"
                                                     "${_xk_site}/nvidia/cublas/include")
  find_library(XK_CUBLASLT_LIBRARY NAMES cublasLt libcublasLt.so.13 libcublasLt.so.12
               HINTS "${CUDAToolkit_LIBRARY_DIR}" "${_xk_site}/nvidia/cu13/lib" "${_xk_site}/nvidia/cublas/lib")
  if(XK_CUBLASLT_INCLUDE_DIR AND XK_CUBLASLT_LIBRARY)
    set(XK_WITH_CUBLASLT ON)
    set(_xk_lt_reason "${XK_CUBLASLT_LIBRARY}")
  else()
    set(_xk_lt_reason "cublasLt.h or libcublasLt not found (toolkit or site-packages/nvidia); own GEMM kernels only")
  endif()
  list(APPEND XK_SUMMARY "cuBLASLt        : ${XK_WITH_CUBLASLT} — ${_xk_lt_reason}")
endif()

# nvcc flags (FP policy and torch's extension conventions): one list shared with
# scripts/check_cuda_compile.sh.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/cuda_nvcc_flags.txt" XK_CUDA_FLAGS REGEX "^[^#]")
list(PREPEND XK_CUDA_FLAGS ${XK_NVCC_FP_FLAGS})

function(xk_configure_cuda_target tgt)
  if(NOT XK_WITH_CUDA)
    return()
  endif()
  target_compile_definitions(${tgt} PRIVATE XKERNELS_WITH_CUDA)
  target_include_directories(${tgt} PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/csrc/cuda")
  # The host C++ standard (CMakeLists.txt) in device code too.
  set_target_properties(${tgt} PROPERTIES CUDA_ARCHITECTURES "${XK_CUDA_ARCHS}" CUDA_STANDARD ${CMAKE_CXX_STANDARD}
                                          CUDA_STANDARD_REQUIRED ON)
  # Host side of the .cu files: the same host FP flags and torch's ABI/defines as the C++ sources.
  set(_host "${XK_HOST_FP_FLAGS}")
  list(JOIN _host "," _host_csv)
  target_compile_options(${tgt} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${XK_CUDA_FLAGS};-Xcompiler=${_host_csv}>")
  separate_arguments(_torch_cxx_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  foreach(f IN LISTS _torch_cxx_flags)
    if(f MATCHES "^-D")
      target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${f}>)
    endif()
  endforeach()
  find_package(CUDAToolkit REQUIRED)
  target_link_libraries(${tgt} PRIVATE CUDA::cudart)
  if(XK_CUBLASLT_INCLUDE_DIR AND XK_CUBLASLT_LIBRARY)
    target_compile_definitions(${tgt} PRIVATE XKERNELS_WITH_CUBLASLT)
    target_include_directories(${tgt} PRIVATE "${XK_CUBLASLT_INCLUDE_DIR}")
    target_link_libraries(${tgt} PRIVATE "${XK_CUBLASLT_LIBRARY}")
  endif()
endfunction()
