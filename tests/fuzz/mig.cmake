tessera_add_fuzzer(mig_files ${CMAKE_CURRENT_LIST_DIR}/mig_files.cc tessera_mig)
