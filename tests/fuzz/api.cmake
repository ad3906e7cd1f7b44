# Request bodies of the `tessera serve` API.
tessera_add_fuzzer(api_bodies ${CMAKE_CURRENT_LIST_DIR}/api_bodies.cc tessera_api)
