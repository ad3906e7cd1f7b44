tessera_add_fuzzer(trace_csv ${CMAKE_CURRENT_LIST_DIR}/placement_trace_csv.cc tessera_placement)
