tessera_add_fuzzer(cdi_spec ${CMAKE_CURRENT_LIST_DIR}/cdi_spec.cc tessera_cdi)
