# SYCL backend: host code compiled by the ordinary C++ compiler against the SYCL
# runtime's headers (pip intel-sycl-rt), linked to libsycl. Kernel sources in
# csrc/sycl/kernels/*.hpp are embedded as text and compiled at first use by the
# runtime's kernel compiler (sycl_ext_oneapi_kernel_compiler).
set(XK_WITH_SYCL OFF)
string(TOUPPER "${XKERNELS_SYCL}" _xk_sycl_opt)
set(_xk_sycl_reason "")
if(_xk_sycl_opt STREQUAL "OFF")
  set(_xk_sycl_reason "disabled (XKERNELS_SYCL=OFF)")
elseif(XKERNELS_SYCL_ROOT AND EXISTS "${XKERNELS_SYCL_ROOT}/include/sycl/sycl.hpp" AND EXISTS "${XKERNELS_SYCL_ROOT}/lib/libsycl.so")
  set(XK_WITH_SYCL ON)
  file(STRINGS "${XKERNELS_SYCL_ROOT}/include/sycl/version.hpp" _xk_sycl_ver REGEX "define __SYCL_COMPILER_VERSION")
  string(REGEX MATCH "[0-9]+" _xk_sycl_ver "${_xk_sycl_ver}")
  set(_xk_sycl_reason "runtime ${_xk_sycl_ver} at ${XKERNELS_SYCL_ROOT}, kernels compiled at run time")
else()
  set(_xk_sycl_reason "SYCL runtime headers not found (pip install intel-sycl-rt; XKERNELS_SYCL_ROOT='${XKERNELS_SYCL_ROOT}')")
  if(_xk_sycl_opt STREQUAL "ON")
    message(FATAL_ERROR "XKERNELS_SYCL=ON but ${_xk_sycl_reason}")
  endif()
endif()
list(APPEND XK_SUMMARY "SYCL backend    : ${XK_WITH_SYCL} — ${_xk_sycl_reason}")

if(XK_WITH_SYCL)
  file(GLOB XK_SYCL_HOST_SOURCES CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/csrc/sycl/*.cpp")
  file(GLOB XK_SYCL_KERNEL_FILES CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/csrc/sycl/kernels/*.hpp")
  string(REPLACE ";" "|" _xk_kernel_files_arg "${XK_SYCL_KERNEL_FILES}")
  set(_xk_embed_out "${CMAKE_CURRENT_BINARY_DIR}/generated/sycl_kernel_sources.cpp")
  add_custom_command(
    OUTPUT "${_xk_embed_out}"
    COMMAND ${CMAKE_COMMAND} -DOUT=${_xk_embed_out} "-DFILES=${_xk_kernel_files_arg}"
            -P "${CMAKE_CURRENT_SOURCE_DIR}/cmake/EmbedKernels.cmake"
    DEPENDS ${XK_SYCL_KERNEL_FILES} "${CMAKE_CURRENT_SOURCE_DIR}/cmake/EmbedKernels.cmake"
    COMMENT "Embedding SYCL kernel sources" VERBATIM)
  list(APPEND XK_SOURCES ${XK_SYCL_HOST_SOURCES} "${_xk_embed_out}")
endif()

function(xk_configure_sycl_target tgt)
  if(NOT XK_WITH_SYCL)
    return()
  endif()
  target_compile_definitions(${tgt} PRIVATE XKERNELS_WITH_SYCL=1 SYCL_DISABLE_FSYCL_SYCLHPP_WARNING=1
                                            "XKERNELS_SYCL_FP_OPTIONS=\"${XK_SYCL_FP_FLAGS_STR}\"")
  if(XKERNELS_TORCH_XPU)
    target_compile_definitions(${tgt} PRIVATE XKERNELS_WITH_XPU=1)
  endif()
  # -isystem: the runtime's headers are not ours to warn about.
  target_include_directories(${tgt} SYSTEM PRIVATE "${XKERNELS_SYCL_ROOT}/include")
  target_link_libraries(${tgt} PRIVATE "${XKERNELS_SYCL_ROOT}/lib/libsycl.so")
  # Installed into <prefix>/lib/pythonX.Y/site-packages/xkernels/: $ORIGIN/../../.. is <prefix>/lib,
  # where the intel-sycl-rt wheel puts libsycl. The absolute path covers in-place builds.
  set_target_properties(${tgt} PROPERTIES
    BUILD_RPATH "${XKERNELS_SYCL_ROOT}/lib"
    INSTALL_RPATH "$ORIGIN/../../..;${XKERNELS_SYCL_ROOT}/lib"
    BUILD_WITH_INSTALL_RPATH ON)
endfunction()
