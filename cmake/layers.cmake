# The library's layers: each folder under src/ is its own target, and it can
# include only its own headers, those of the layers below it, and the public
# headers those layers implement. A wrong-way include (exec including
# capture/, ir including wholestep/step.hpp) is a compile error:
#   fatal error: capture/tensor_impl.hpp: No such file or directory
#
# How: a layer's sources are compiled with one include directory,
# build/layers/<layer>/, which holds a symbolic link to src/<l> for each layer
# l it may see and to include/wholestep/<h> for each public header h they
# implement. Sources keep their paths ("ir/graph.hpp"), and a file compiled
# from src/ records its own path in source locations, as before.
#
# Each layer is an OBJECT library; the objects of all of them make the one
# installed archive, wholestep (CMakeLists.txt). docs/design.md draws the
# graph.

set(WS_LAYERS "")
set(WS_ARCHIVE_LAYERS "")

# ws_layer(NAME [DIR dir] [FRONTEND] [DEPENDS layer...] [PUBLIC_HEADERS header...]
#          [LIBS target...])
#   DIR: its folder under src/ (default NAME), also the path its headers
#     are included by ("frontend/torch/x.hpp").
#   FRONTEND: not part of the library's archive: a frontend built into its
#     own module (the Python extension), above every layer it names.
#   DEPENDS: the layers directly below it (their own dependencies follow).
#   PUBLIC_HEADERS: the headers of include/wholestep/ this layer implements.
#   LIBS: the external libraries its sources use.
function(ws_layer name)
  cmake_parse_arguments(L "FRONTEND" "DIR" "DEPENDS;PUBLIC_HEADERS;LIBS" ${ARGN})
  if(NOT L_DIR)
    set(L_DIR ${name})
  endif()
  set(WS_LAYER_${name}_DIR ${L_DIR} PARENT_SCOPE)
  set(WS_LAYER_${name}_DIR ${L_DIR})
  set(closure ${name})
  foreach(dep IN LISTS L_DEPENDS)
    if(NOT dep IN_LIST WS_LAYERS)
      message(FATAL_ERROR "layer ${name} depends on ${dep}, which is not defined before it")
    endif()
    list(APPEND closure ${WS_LAYER_${dep}_CLOSURE})
  endforeach()
  list(REMOVE_DUPLICATES closure)
  set(WS_LAYER_${name}_CLOSURE ${closure} PARENT_SCOPE)
  set(WS_LAYER_${name}_HEADERS ${L_PUBLIC_HEADERS} PARENT_SCOPE)
  set(WS_LAYER_${name}_HEADERS ${L_PUBLIC_HEADERS})
  set(WS_LAYERS ${WS_LAYERS} ${name} PARENT_SCOPE)
  if(NOT L_FRONTEND)
    set(WS_ARCHIVE_LAYERS ${WS_ARCHIVE_LAYERS} ${name} PARENT_SCOPE)
  endif()

  set(root ${CMAKE_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/wholestep)
  foreach(layer IN LISTS closure)
    get_filename_component(parent ${root}/${WS_LAYER_${layer}_DIR} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/${WS_LAYER_${layer}_DIR} ${root}/${WS_LAYER_${layer}_DIR}
         SYMBOLIC)
    foreach(header IN LISTS WS_LAYER_${layer}_HEADERS)
      file(CREATE_LINK ${CMAKE_SOURCE_DIR}/include/wholestep/${header}
           ${root}/wholestep/${header} SYMBOLIC)
    endforeach()
  endforeach()

  list(TRANSFORM L_DEPENDS PREPEND ws_ OUTPUT_VARIABLE dep_targets)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${L_DIR}/*.cpp)
  if(NOT sources)  # header-only
    add_library(ws_${name} INTERFACE)
    target_link_libraries(ws_${name} INTERFACE ${dep_targets})
    return()
  endif()
  add_library(ws_${name} OBJECT ${sources})
  target_include_directories(ws_${name} PRIVATE ${root})
  target_link_libraries(ws_${name} PUBLIC ${dep_targets} PRIVATE ${L_LIBS})
  target_compile_features(ws_${name} PUBLIC cxx_std_20)
  # -ffp-contract=off: a*b+c rounds twice wherever it is written, so a kernel
  # and the reference computing the same expression give the same bits.
  # -fmacro-prefix-map: source locations the library records (nodes of the
  # reference models, errors) name src/... relative to the source tree, not
  # the machine's checkout or the layer's include directory.
  target_compile_options(ws_${name} PRIVATE -Wall -Wextra -Werror=switch -Werror=return-type
                                            -ffp-contract=off
                                            -fmacro-prefix-map=${CMAKE_SOURCE_DIR}/=
                                            -fmacro-prefix-map=${root}/=src/)
  if(WS_NATIVE)
    target_compile_options(ws_${name} PRIVATE -march=native)
  endif()
endfunction()
