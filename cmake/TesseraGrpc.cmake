# gRPC without TLS (kubelet talks over unix sockets) and protobuf-lite, as two link targets:
#   tessera_protobuf_lite  the message runtime
#   tessera_grpc           gRPC C++ (unsecure) and the message runtime
# Both link Debian's shared libraries, except into an executable that sets the target property
# TESSERA_GRPC_STATIC: it gets the static archives of the same -dev packages. The node daemons
# (device plugin, DRA plugin, lease sync) do so: loading gRPC shared means ~55 libraries (35 of
# them abseil), each with its own symbol tables and relocations resident, and all of libgrpc's
# code mapped where linking keeps only the objects reached (DRA plugin peak RSS 15.4 -> 12.8 MB).
# OpenSSL stays shared in every binary: it faces the network and takes Debian's security updates.
pkg_check_modules(TESSERA_PROTOBUF_LITE REQUIRED IMPORTED_TARGET protobuf-lite)
pkg_check_modules(TESSERA_GRPC_UNSECURE REQUIRED IMPORTED_TARGET grpc++_unsecure protobuf-lite)

# The archives named by `pkg-config --static`, plus those Debian's grpc_unsecure.pc leaves out
# (upb, c-ares, address_sorting, zlib). A name without an archive (atomic) links as it is.
function(tessera_static_archives out)
  set(archives)
  foreach(name IN LISTS ARGN)
    string(MAKE_C_IDENTIFIER "TESSERA_ARCHIVE_${name}" var)
    find_library(${var} NAMES lib${name}.a)
    if(${var})
      list(APPEND archives ${${var}})
    else()
      list(APPEND archives ${name})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES archives)
  set(${out} ${archives} PARENT_SCOPE)
endfunction()

tessera_static_archives(tessera_protobuf_lite_archives ${TESSERA_PROTOBUF_LITE_STATIC_LIBRARIES})
tessera_static_archives(tessera_grpc_archives ${TESSERA_GRPC_UNSECURE_STATIC_LIBRARIES}
  upb cares address_sorting z)
foreach(required upb cares address_sorting z)
  string(MAKE_C_IDENTIFIER "TESSERA_ARCHIVE_${required}" var)
  if(NOT ${var})
    message(FATAL_ERROR "lib${required}.a not found (needed to link gRPC statically)")
  endif()
endforeach()

set(tessera_grpc_static "$<BOOL:$<TARGET_PROPERTY:TESSERA_GRPC_STATIC>>")

add_library(tessera_protobuf_lite INTERFACE)
target_include_directories(tessera_protobuf_lite SYSTEM INTERFACE
  ${TESSERA_PROTOBUF_LITE_INCLUDE_DIRS})
target_link_libraries(tessera_protobuf_lite INTERFACE
  "$<IF:${tessera_grpc_static},${tessera_protobuf_lite_archives},PkgConfig::TESSERA_PROTOBUF_LITE>")

add_library(tessera_grpc INTERFACE)
target_include_directories(tessera_grpc SYSTEM INTERFACE ${TESSERA_GRPC_UNSECURE_INCLUDE_DIRS})
# The archives reference each other in both directions: one group, searched until resolved.
target_link_libraries(tessera_grpc INTERFACE
  "$<IF:${tessera_grpc_static},-Wl$<COMMA>--start-group;${tessera_grpc_archives};-Wl$<COMMA>--end-group,PkgConfig::TESSERA_GRPC_UNSECURE>")
