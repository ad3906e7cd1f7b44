# The client config (tessera login's contexts): parsed, written back and parsed again.
tessera_add_fuzzer(client_config ${CMAKE_CURRENT_LIST_DIR}/client_config.cc tessera_client)
