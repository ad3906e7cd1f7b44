tessera_add_fuzzer(sharing_share ${CMAKE_CURRENT_LIST_DIR}/sharing_share.cc tessera_sharing)
