tessera_add_fuzzer(trace_csv ${CMAKE_CURRENT_LIST_DIR}/placement_trace_csv.cc tessera_placement)
tessera_add_fuzzer(mig_trace ${CMAKE_CURRENT_LIST_DIR}/placement_mig_trace.cc tessera_placement_mig)
