# The Python package `wholestep` (python/wholestep/) and its extension
# module wholestep._C, made of the frontend layer src/frontend/torch/ over
# the library. The build tree's package is build/python/wholestep (the
# sources are linked there, the module built there): PYTHONPATH=build/python.
# Installed under <prefix>/lib/python3.X/dist-packages, where Debian's
# /usr/bin/python3 finds packages of /usr/local.
#
# The interpreter is Debian's, whose packages (torch, torchvision, numpy,
# pytest) the package and its tests use: another python3 first on PATH has
# another ABI and other packages.
set(WS_PYTHON_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "The Python the package is built for")
set(Python_EXECUTABLE ${WS_PYTHON_EXECUTABLE})
find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
find_package(pybind11 2.10 CONFIG)
if(NOT pybind11_FOUND)
  message(FATAL_ERROR "pybind11 (Debian: pybind11-dev) is needed for the Python package; "
                      "scripts/setup.sh installs it, or configure with -DWS_PYTHON=OFF")
endif()

ws_layer(frontend_torch DIR frontend/torch FRONTEND DEPENDS step LIBS fmt::fmt pybind11::module)
# pybind11's types are hidden in the module, as it asks.
target_compile_options(ws_frontend_torch PRIVATE -fvisibility=hidden)

add_library(wholestep_python MODULE $<TARGET_OBJECTS:ws_frontend_torch>)
target_link_libraries(wholestep_python PRIVATE wholestep pybind11::module)
pybind11_extension(wholestep_python)
set(WS_PYTHON_BUILD_DIR ${CMAKE_BINARY_DIR}/python/wholestep)
set_target_properties(wholestep_python PROPERTIES OUTPUT_NAME _C
                                                  LIBRARY_OUTPUT_DIRECTORY ${WS_PYTHON_BUILD_DIR})
# Only the module's entry point is exported: the library inside it stays
# private to it.
target_link_options(wholestep_python PRIVATE -Wl,--exclude-libs,ALL)

file(GLOB WS_PYTHON_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/wholestep/*.py)
file(MAKE_DIRECTORY ${WS_PYTHON_BUILD_DIR})
foreach(src IN LISTS WS_PYTHON_SOURCES)
  get_filename_component(name ${src} NAME)
  file(CREATE_LINK ${src} ${WS_PYTHON_BUILD_DIR}/${name} SYMBOLIC)
endforeach()

execute_process(
  COMMAND ${Python_EXECUTABLE} -c
          "import sys; print(f'python3.{sys.version_info.minor}')"
  OUTPUT_VARIABLE WS_PYTHON_VERSION_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
set(WS_PYTHON_INSTALL_DIR lib/${WS_PYTHON_VERSION_DIR}/dist-packages
    CACHE PATH "Where `cmake --install` puts the Python package, under the prefix")
install(TARGETS wholestep_python LIBRARY DESTINATION ${WS_PYTHON_INSTALL_DIR}/wholestep)
install(FILES ${WS_PYTHON_SOURCES} DESTINATION ${WS_PYTHON_INSTALL_DIR}/wholestep)
