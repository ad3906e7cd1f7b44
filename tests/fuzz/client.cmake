# The client's side of a hostile server: raw answer bytes, cut at a point the input picks, through
# the response reader, then the body through the views the client verbs print.
tessera_add_fuzzer(client_response ${CMAKE_CURRENT_LIST_DIR}/client_response.cc tessera_client)
# The client config (tessera login's contexts): parsed, written back and parsed again.
tessera_add_fuzzer(client_config ${CMAKE_CURRENT_LIST_DIR}/client_config.cc tessera_client)
