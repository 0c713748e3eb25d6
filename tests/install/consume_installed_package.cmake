# Installs a built wholestep into a fresh temporary prefix, then configures,
# builds and runs examples/consumer (copied out of the source tree) against
# that prefix alone, as a user's own project would. Any failing step fails
# the test with that step's output; the temporary directory is removed
# either way. Run by CTest (tests/CMakeLists.txt) as
#   cmake -DSOURCE_DIR=... -DBUILD_DIR=... -DVERSION=... -DDNNL_LIBRARY=...
#         -DGENERATOR=... -DCXX_COMPILER=... -DBUILD_TYPE=... -DCXX_FLAGS=...
#         -DEXE_LINKER_FLAGS=... -P consume_installed_package.cmake
# The compiler and flags are the build's own, so a consumer of a library
# built with sanitizers links their runtimes too.
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR BUILD_DIR VERSION DNNL_LIBRARY GENERATOR CXX_COMPILER BUILD_TYPE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "consume_installed_package.cmake: -D${var}=... is required")
  endif()
endforeach()

execute_process(COMMAND mktemp -d -t wholestep-install.XXXXXX OUTPUT_VARIABLE root
                RESULT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT status EQUAL 0 OR NOT IS_DIRECTORY "${root}")
  message(FATAL_ERROR "could not make a temporary directory (mktemp: ${status})")
endif()
set(prefix "${root}/prefix")

# Removes the temporary directory and stops with `what`, after OUTPUT if
# given (printed as it is: an error message would be reflowed).
function(fail what)
  file(REMOVE_RECURSE "${root}")
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT" "")
  if(DEFINED arg_OUTPUT)
    message(NOTICE "${arg_OUTPUT}")
  endif()
  message(FATAL_ERROR "${what}")
endfunction()

# Runs one step; on a non-zero exit status fails with its command and output.
function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    list(JOIN ARGN " " command)
    fail("${name} failed (exit status ${status})" OUTPUT "${command}\n${out}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

# The headers installed are include/wholestep/ of the source tree, all of
# it and nothing more: the library's own headers (src/) stay private.
file(GLOB_RECURSE installed RELATIVE "${prefix}/include" "${prefix}/include/*")
file(GLOB_RECURSE public RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/*")
list(SORT installed)
list(SORT public)
if(NOT installed STREQUAL public)
  list(JOIN installed " " have)
  list(JOIN public " " want)
  fail("install: the headers under ${prefix}/include are [${have}], not include/'s [${want}]")
endif()

# The package records no path of the machine that built it (its trees, the
# oneDNN it linked): dependencies are found again where it is used.
file(GLOB_RECURSE package_files "${prefix}/*.cmake")
if(NOT package_files)
  fail("install: no CMake package files under ${prefix}")
endif()
foreach(f ${package_files})
  file(READ "${f}" text)
  foreach(path "${SOURCE_DIR}" "${BUILD_DIR}" "${DNNL_LIBRARY}")
    string(FIND "${text}" "${path}" at)
    if(NOT at EQUAL -1)
      fail("install: ${f} names the build machine's ${path}")
    endif()
  endforeach()
endforeach()

# Same-major compatibility: the installed version satisfies a request for
# itself and not one for the next major version.
file(GLOB version_file "${prefix}/*/cmake/wholestep/wholestepConfigVersion.cmake"
     "${prefix}/*/*/cmake/wholestep/wholestepConfigVersion.cmake")
if(NOT version_file)
  fail("install: no wholestepConfigVersion.cmake under ${prefix}")
endif()
function(compatible requested result)
  set(PACKAGE_FIND_VERSION ${requested})
  string(REGEX MATCH "^[0-9]+" PACKAGE_FIND_VERSION_MAJOR ${requested})
  include("${version_file}")
  if(NOT PACKAGE_VERSION STREQUAL VERSION)
    fail("install: wholestepConfigVersion.cmake says ${PACKAGE_VERSION}, project() says ${VERSION}")
  endif()
  set(${result} ${PACKAGE_VERSION_COMPATIBLE} PARENT_SCOPE)
endfunction()
string(REGEX MATCH "^[0-9]+" major "${VERSION}")
math(EXPR next_major "${major} + 1")
compatible(${VERSION} same)
compatible(${next_major}.0 next)
if(NOT same OR next)
  fail("install: version ${VERSION} should satisfy a request for ${VERSION} (got '${same}') \
and not one for ${next_major}.0 (got '${next}')")
endif()

run_step("the installed command line" "${prefix}/bin/wholestep" --version)
string(FIND "${out}" "wholestep ${VERSION}\n" at)
if(NOT at EQUAL 0)
  fail("the installed command line: --version did not print 'wholestep ${VERSION}'" OUTPUT "${out}")
endif()

# The consumer, out of the source tree, sees the prefix and nothing else of
# wholestep.
file(COPY "${SOURCE_DIR}/examples/consumer/" DESTINATION "${root}/consumer")
run_step("configuring the consumer"
  ${CMAKE_COMMAND} -S "${root}/consumer" -B "${root}/build" -G "${GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}")
file(STRINGS "${root}/build/CMakeCache.txt" found REGEX "^wholestep_DIR:")
string(FIND "${found}" "=${prefix}/" at)
if(at EQUAL -1)
  fail("configuring the consumer: wholestep was found outside ${prefix}: ${found}")
endif()
run_step("building the consumer" ${CMAKE_COMMAND} --build "${root}/build")
run_step("running the consumer" "${root}/build/consumer")
if(NOT out MATCHES "^consumer: loss [0-9.]+ -> [0-9.]+ in [0-9]+ steps\n$")
  fail("running the consumer: its output is not the one line expected" OUTPUT "${out}")
endif()
message(STATUS "${out}")

file(REMOVE_RECURSE "${root}")
