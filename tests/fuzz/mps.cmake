tessera_add_fuzzer(mps_log ${CMAKE_CURRENT_LIST_DIR}/mps_log.cc tessera_mps)
tessera_add_fuzzer(mps_daemon_files ${CMAKE_CURRENT_LIST_DIR}/mps_daemon_files.cc tessera_mps
  tessera_process)
