# What `cmake --install BUILD [--prefix PREFIX]` puts in place (issue #31):
#   bin/foundry                    the command
#   lib/libfoundry.so, .a          one library, shared and static
#   include/foundry/*.h            its public headers
#   lib/pkgconfig/foundry.pc       for `pkg-config --cflags --libs foundry`
# (lib is CMAKE_INSTALL_LIBDIR, e.g. lib/x86_64-linux-gnu under /usr).
# libfoundry is made of the objects of every module library under the
# umbrella target `foundry` (CMakeLists.txt), so a module or a source file
# added there is in it too; the module libraries stay what the tests and
# the command link. Their objects are compiled position independent for
# the shared library, without semantic interposition: the compiler still
# inlines and calls directly within the library (which exports only fdy_*,
# cmake/libfoundry.map), so position independence costs the code little.
include(GNUInstallDirs)

get_target_property(_foundry_modules foundry INTERFACE_LINK_LIBRARIES)
set(_foundry_objects "")
foreach(lib IN LISTS _foundry_modules)
  set_target_properties(${lib} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${lib} PRIVATE
    "$<$<COMPILE_LANGUAGE:C>:-fno-semantic-interposition>")
  list(APPEND _foundry_objects "$<TARGET_OBJECTS:${lib}>")
endforeach()

# The modules' own dependencies (what they link besides each other), for
# the shared library's link and for foundry.pc: pkg-config modules go into
# Requires.private, the rest into Libs.private (what a static link adds).
# The CUDA kernels' host code is C++ and needs libstdc++.
set(_foundry_seen "")
set(_foundry_private_libs "")
set(FOUNDRY_PC_REQUIRES_PRIVATE "")
set(FOUNDRY_PC_LIBS_PRIVATE "")
foreach(lib IN LISTS _foundry_modules)
  get_target_property(_deps ${lib} LINK_LIBRARIES)
  foreach(dep IN LISTS _deps)
    if(dep IN_LIST _foundry_modules OR dep IN_LIST _foundry_seen)
      continue()
    endif()
    list(APPEND _foundry_seen ${dep})
    if(dep MATCHES "^PkgConfig::(.+)$")
      # by its flags: the imported target may be local to the module's
      # directory
      list(APPEND _foundry_private_libs ${${CMAKE_MATCH_1}_LDFLAGS})
      list(APPEND FOUNDRY_PC_REQUIRES_PRIVATE ${${CMAKE_MATCH_1}_MODULE_NAME})
    elseif(dep STREQUAL "Threads::Threads")
      list(APPEND _foundry_private_libs ${dep})
      list(APPEND FOUNDRY_PC_LIBS_PRIVATE -pthread)
    elseif(dep STREQUAL "CUDA::cudart")
      list(APPEND _foundry_private_libs ${dep})
      list(APPEND FOUNDRY_PC_LIBS_PRIVATE -L${CUDAToolkit_LIBRARY_DIR} -lcudart)
    elseif(TARGET ${dep} OR dep MATCHES "[$<>:/ ]")
      message(FATAL_ERROR "cmake/install.cmake: say how foundry.pc links "
                          "${dep}, which ${lib} links")
    else() # a system library by name (m)
      list(APPEND _foundry_private_libs ${dep})
      list(APPEND FOUNDRY_PC_LIBS_PRIVATE -l${dep})
    endif()
  endforeach()
endforeach()
if(FOUNDRY_HAVE_CUDA)
  list(APPEND _foundry_private_libs stdc++)
  list(APPEND FOUNDRY_PC_LIBS_PRIVATE -lstdc++)
endif()
list(JOIN FOUNDRY_PC_REQUIRES_PRIVATE " " FOUNDRY_PC_REQUIRES_PRIVATE)
list(JOIN FOUNDRY_PC_LIBS_PRIVATE " " FOUNDRY_PC_LIBS_PRIVATE)

add_library(foundry_shared SHARED ${_foundry_objects})
add_library(foundry_static STATIC ${_foundry_objects})
set_target_properties(foundry_shared foundry_static PROPERTIES
  OUTPUT_NAME foundry
  LINKER_LANGUAGE C
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib
  ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
set_target_properties(foundry_shared PROPERTIES
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  INSTALL_RPATH_USE_LINK_PATH ON) # finds a CUDA runtime outside ld.so's paths
target_link_libraries(foundry_shared PRIVATE ${_foundry_private_libs})
target_link_options(foundry_shared PRIVATE
  -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/libfoundry.map)
set_property(TARGET foundry_shared APPEND PROPERTY LINK_DEPENDS
  ${PROJECT_SOURCE_DIR}/cmake/libfoundry.map)
if(NOT FOUNDRY_SANITIZE AND NOT FOUNDRY_TSAN)
  # Every symbol resolved at link time: the list above is complete.
  target_link_options(foundry_shared PRIVATE -Wl,--no-undefined)
endif()

# foundry.pc finds the prefix from its own place (relocatable, so that
# `cmake --install --prefix` anywhere works): one ".." per component of
# LIBDIR/pkgconfig.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(FOUNDRY_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(FOUNDRY_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(FOUNDRY_PC_PREFIX "\${pcfiledir}")
  string(REPLACE "/" ";" _foundry_parts "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  foreach(part IN LISTS _foundry_parts)
    string(APPEND FOUNDRY_PC_PREFIX "/..")
  endforeach()
  set(FOUNDRY_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(FOUNDRY_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(FOUNDRY_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/foundry.pc.in
               ${PROJECT_BINARY_DIR}/foundry.pc @ONLY)

install(TARGETS foundry_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS foundry_shared foundry_static
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/foundry
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/foundry.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
