# The read verbs' rows (ps, queue, usage) from hostile API answers.
tessera_add_fuzzer(client_views ${CMAKE_CURRENT_LIST_DIR}/client_views.cc tessera_client)
