# Installing wholestep as a CMake package: the public headers, the static
# library, the command-line program, and wholestepConfig.cmake with its
# version file and exported targets, so that a project uses it with
#   find_package(wholestep CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE wholestep::wholestep)
# The library's dependencies are found again by the config on the user's
# machine (no path of this build is recorded); header-only ones used by the
# sources alone are not part of its interface.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(WS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/wholestep)

install(TARGETS wholestep EXPORT wholestepTargets FILE_SET HEADERS)
install(TARGETS wholestep-cli)
install(EXPORT wholestepTargets NAMESPACE wholestep:: DESTINATION ${WS_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/wholestepConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/wholestepConfig.cmake
                              INSTALL_DESTINATION ${WS_INSTALL_CMAKEDIR})
# The same major version: 0.1 satisfies find_package(wholestep 0.1), not
# find_package(wholestep 1.0).
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/wholestepConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/wholestepConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/wholestepConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/FindDNNL.cmake
        DESTINATION ${WS_INSTALL_CMAKEDIR})
