# The server's certificate, key and client-CA PEM bytes through the tls module's loading path.
tessera_add_fuzzer(tls_pem ${CMAKE_CURRENT_LIST_DIR}/tls_pem.cc tessera_tls)
