# Request bodies of the `tessera serve` API.
tessera_add_fuzzer(api_bodies ${CMAKE_CURRENT_LIST_DIR}/api_bodies.cc tessera_api)
# Whole requests: raw HTTP through Beast's parser, Router::Admit and Router::Handle, against a
# service on a real SQLite store with the null backend.
find_package(Boost 1.74 REQUIRED COMPONENTS system)
tessera_add_fuzzer(api_requests ${CMAKE_CURRENT_LIST_DIR}/api_requests.cc
  tessera_api tessera_backend_local Boost::system nlohmann_json::nlohmann_json)
# GET /v1/audit query strings through Router::Admit and Router::Handle, against a service whose
# SQLite store holds audit records.
tessera_add_fuzzer(api_audit_query ${CMAKE_CURRENT_LIST_DIR}/api_audit_query.cc
  tessera_api tessera_backend_local Boost::system nlohmann_json::nlohmann_json)
