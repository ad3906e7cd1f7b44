# The client's side of a hostile server: raw answer bytes, cut at a point the input picks, through
# the response reader, then the body through the views the client verbs print.
tessera_add_fuzzer(client_response ${CMAKE_CURRENT_LIST_DIR}/client_response.cc tessera_client)
