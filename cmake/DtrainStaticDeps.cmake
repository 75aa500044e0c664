# -DDTRAIN_STATIC_DEPS=ON (the default): every binary links gRPC, Protobuf, Abseil, OpenSSL, c-ares, RE2, upb and
# yaml-cpp from their static archives (the .a that Debian's -dev packages ship beside the .so), not as 56 shared
# objects. Why: a process linked against them spends most of its start-up in the dynamic loader: an empty main()
# linked to dtrain's 65 shared objects took 35 ms of CPU here, and `dtrain --version` 28 ms, against 14 ms with them
# static. `dtrain run` pays that twice before a worker starts (the launcher, then its local agent), and every rank of
# dtrain-trainer pays it once (BENCHMARKS.md, "Launch in 0.1 s"). Gloo (no archive is packaged), spdlog, fmt, zlib and
# the C and C++ runtimes stay shared. The cost: larger binaries (dtrain 26 -> 43 MB) and a few seconds more per link.
# OFF links the shared objects as before; the fuzzing build always does (its sanitizers want every library shared).
#
# Include after the find_package() calls of those packages: it points their imported targets at the archives.
option(DTRAIN_STATIC_DEPS "Link gRPC, Protobuf, Abseil, OpenSSL, c-ares, RE2 and yaml-cpp statically" ON)

# The archive beside a shared object's path (libfoo.so.1.2.3 -> libfoo.a), or "" when there is none.
function(dtrain_archive_of shared out)
  string(REGEX REPLACE "\\.so(\\.[0-9.]+)?$" ".a" archive "${shared}")
  if(NOT archive STREQUAL shared AND EXISTS "${archive}")
    set(${out} "${archive}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# Points every imported library target in `targets` whose location is a shared object with an archive beside it at
# that archive, for every configuration it names.
function(dtrain_use_archives)
  set(switched 0)
  foreach(target IN LISTS ARGN)
    get_target_property(type ${target} TYPE)
    if(NOT type MATCHES "^(SHARED|UNKNOWN|STATIC)_LIBRARY$")
      continue()
    endif()
    get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
    set(suffixes "")
    foreach(config IN LISTS configs)
      list(APPEND suffixes "_${config}")
    endforeach()
    list(APPEND suffixes "")
    foreach(suffix IN LISTS suffixes)
      get_target_property(location ${target} IMPORTED_LOCATION${suffix})
      if(NOT location)
        continue()
      endif()
      dtrain_archive_of("${location}" archive)
      if(archive)
        set_target_properties(${target} PROPERTIES IMPORTED_LOCATION${suffix} "${archive}")
        if(type STREQUAL "SHARED_LIBRARY")
          # A shared library target's soname would still be recorded; an archive has none.
          set_target_properties(${target} PROPERTIES IMPORTED_NO_SONAME TRUE)
        endif()
        math(EXPR switched "${switched} + 1")
      endif()
    endforeach()
  endforeach()
  set(DTRAIN_STATIC_ARCHIVES ${switched} PARENT_SCOPE)
endfunction()

if(DTRAIN_STATIC_DEPS AND NOT DTRAIN_FUZZ)
  get_property(imported DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY IMPORTED_TARGETS)
  set(wanted "")
  foreach(target IN LISTS imported)
    if(target MATCHES "^(gRPC|absl|protobuf|OpenSSL|c-ares|re2|yaml-cpp)(::|$)")
      list(APPEND wanted ${target})
    endif()
  endforeach()
  dtrain_use_archives(${wanted})
  # gRPC's re2::re2 (its Findre2.cmake, from pkg-config) is an interface target that says `-lre2`: the archive instead.
  if(TARGET re2::re2)
    get_target_property(re2_type re2::re2 TYPE)
    find_library(DTRAIN_RE2_ARCHIVE NAMES libre2.a)
    if(re2_type STREQUAL "INTERFACE_LIBRARY" AND DTRAIN_RE2_ARCHIVE)
      set_property(TARGET re2::re2 PROPERTY INTERFACE_LINK_LIBRARIES "${DTRAIN_RE2_ARCHIVE};Threads::Threads")
      set_property(TARGET re2::re2 PROPERTY INTERFACE_LINK_DIRECTORIES "")
      math(EXPR DTRAIN_STATIC_ARCHIVES "${DTRAIN_STATIC_ARCHIVES} + 1")
    endif()
  endif()
  # A static OpenSSL needs libdl and threads at the end of the link; the archives' own targets do not say so.
  if(TARGET OpenSSL::Crypto)
    set_property(TARGET OpenSSL::Crypto APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${CMAKE_DL_LIBS} Threads::Threads)
  endif()
  message(STATUS "dtrain: ${DTRAIN_STATIC_ARCHIVES} dependency libraries linked from their static archives "
                 "(DTRAIN_STATIC_DEPS)")
endif()
