# Ahead-of-time SYCL kernels compiled by icpx (oneAPI DPC++). buildtools/oneapi.py plans them
# (toolchain checks, targets, floating-point flags, generated sources) and writes the exact icpx
# commands to a CMake fragment; this file runs those commands unchanged (VERBATIM) and links the
# resulting libxkernels_sycl_aot.so into _C. See docs/oneapi.md.
#
#   XKERNELS_SYCL_AOT_PLAN    the fragment (empty: no AOT library; kernels compile at run time)
#   XKERNELS_SYCL_AOT_REASON  why there is none, for the configuration summary
set(XKERNELS_SYCL_AOT_PLAN "" CACHE FILEPATH "CMake fragment written by buildtools/oneapi.py (empty: no AOT kernels)")
set(XKERNELS_SYCL_AOT_REASON "" CACHE STRING "Why no AOT kernel library is built (for the summary)")

set(XK_WITH_SYCL_AOT OFF)
set(XK_SYCL_AOT_TARGET_SPEC "")
set(XK_SYCL_AOT_CONFIG "off")  # for the build configuration string (xkernels.info())
if(XKERNELS_SYCL_AOT_PLAN)
  if(NOT XK_WITH_SYCL)
    message(FATAL_ERROR "XKERNELS_SYCL_AOT_PLAN is set but the SYCL backend is OFF; the ahead-of-time kernels "
                        "need it. Enable the SYCL backend or build with XKERNELS_SYCL_AOT=off.")
  endif()
  if(NOT EXISTS "${XKERNELS_SYCL_AOT_PLAN}")
    message(FATAL_ERROR "XKERNELS_SYCL_AOT_PLAN=${XKERNELS_SYCL_AOT_PLAN} does not exist; re-run setup.py or "
                        "scripts/dev_build.sh, which write it")
  endif()
  include("${XKERNELS_SYCL_AOT_PLAN}")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${XKERNELS_SYCL_AOT_PLAN}")
  math(EXPR _xk_last "${XK_SYCL_AOT_STEP_COUNT} - 1")
  foreach(i RANGE ${_xk_last})
    get_filename_component(_xk_dir "${XK_SYCL_AOT_STEP_${i}_OUTPUT}" DIRECTORY)
    file(MAKE_DIRECTORY "${_xk_dir}")
    add_custom_command(
      OUTPUT "${XK_SYCL_AOT_STEP_${i}_OUTPUT}"
      COMMAND ${XK_SYCL_AOT_STEP_${i}_COMMAND}
      DEPENDS ${XK_SYCL_AOT_STEP_${i}_DEPENDS}
      COMMENT "${XK_SYCL_AOT_STEP_${i}_COMMENT}"
      VERBATIM)
  endforeach()
  add_custom_target(xkernels_sycl_aot DEPENDS "${XK_SYCL_AOT_LIBRARY}")
  set(XK_WITH_SYCL_AOT ON)
  set(XK_SYCL_AOT_CONFIG "icpx ${XK_SYCL_AOT_COMPILER_VERSION}: ${XK_SYCL_AOT_TARGET_SPEC}")
  list(APPEND XK_SUMMARY "SYCL AOT        : ON — icpx ${XK_SYCL_AOT_COMPILER_VERSION}, images: ${XK_SYCL_AOT_TARGET_SPEC}")
  list(APPEND XK_SUMMARY "                  ${XK_SYCL_AOT_LIBRARY}")
else()
  if(XKERNELS_SYCL_AOT_REASON)
    list(APPEND XK_SUMMARY "SYCL AOT        : OFF — ${XKERNELS_SYCL_AOT_REASON}")
  else()
    list(APPEND XK_SUMMARY "SYCL AOT        : OFF — not planned (build through setup.py or scripts/dev_build.sh)")
  endif()
endif()

# Links the AOT library into `tgt` and tells the kernel provider it is there.
function(xk_configure_sycl_aot_target tgt)
  if(NOT XK_WITH_SYCL_AOT)
    return()
  endif()
  add_dependencies(${tgt} xkernels_sycl_aot)
  target_link_libraries(${tgt} PRIVATE "${XK_SYCL_AOT_LIBRARY}")
  target_compile_definitions(${tgt} PRIVATE XKERNELS_SYCL_AOT=1
                             "XKERNELS_SYCL_AOT_TARGETS=\"${XK_SYCL_AOT_TARGET_SPEC}\"")
  # The library sits next to _C (same output directory, installed together).
  get_target_property(_rp ${tgt} INSTALL_RPATH)
  if(NOT _rp)
    set(_rp "")
  endif()
  list(PREPEND _rp "$ORIGIN")
  set_target_properties(${tgt} PROPERTIES INSTALL_RPATH "${_rp}" BUILD_WITH_INSTALL_RPATH ON)
endfunction()
