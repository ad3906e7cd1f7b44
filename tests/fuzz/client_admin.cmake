# The operator verbs' pure parts: API answers into tables, stored tenancies into PUT bodies,
# duration flags.
tessera_add_fuzzer(client_admin_views ${CMAKE_CURRENT_LIST_DIR}/client_admin_views.cc
  tessera_client nlohmann_json::nlohmann_json)
