# Finds oneDNN's CPU library (libdnnl) and its headers directly: Debian's
# package configuration (dnnlConfig.cmake) also demands the OpenCL headers of
# its GPU runtime, which a CPU build does not use.
#
# Defines DNNL_FOUND, DNNL_INCLUDE_DIR, DNNL_LIBRARY and the imported target
# DNNL::dnnl (unless a DNNL::dnnl target exists already: one from oneDNN's own
# package configuration serves as well). Used by the build and installed
# beside wholestepConfig.cmake, so a project using the installed library finds
# oneDNN on its own machine the same way.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY dnnl)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DNNL REQUIRED_VARS DNNL_LIBRARY DNNL_INCLUDE_DIR
                                  REASON_FAILURE_MESSAGE
                                  "install oneDNN (Debian: libdnnl-dev) or set DNNL_LIBRARY and DNNL_INCLUDE_DIR")
mark_as_advanced(DNNL_INCLUDE_DIR DNNL_LIBRARY)

if(DNNL_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION "${DNNL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
endif()
