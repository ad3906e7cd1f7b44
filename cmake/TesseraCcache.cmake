# ccache for every compile when it is installed (scripts/setup.sh installs it), unless a launcher
# was given (-DCMAKE_CXX_COMPILER_LAUNCHER=...) or -DTESSERA_CCACHE=OFF. Its settings travel with
# the launcher, so `cmake --build` alone uses them too:
#  - base_dir: paths under the source tree are hashed relative to it, so checkouts in other
#    directories (git worktrees) share objects;
#  - hash_dir off: the build directory is not hashed either (it would be with -g); debug info
#    then names the directory of the checkout that compiled the object first.
option(TESSERA_CCACHE "Compile through ccache when it is installed" ON)
find_program(TESSERA_CCACHE_PROGRAM ccache)
if(TESSERA_CCACHE AND TESSERA_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER
   AND NOT CMAKE_C_COMPILER_LAUNCHER)
  set(tessera_ccache_launcher env
    CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
    CCACHE_NOHASHDIR=1
    ${TESSERA_CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${tessera_ccache_launcher})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${tessera_ccache_launcher})
endif()
