# The DRA plugin's readers of untrusted bytes: ResourceClaims from the API server and the
# checkpoint file it reads back on start.
tessera_add_fuzzer(dra_claim ${CMAKE_CURRENT_LIST_DIR}/dra_claim.cc tessera_dra)
tessera_add_fuzzer(dra_checkpoint ${CMAKE_CURRENT_LIST_DIR}/dra_checkpoint.cc tessera_dra)
# The fault state file it reads back on start (each faulted GPU's recovery record and taint).
tessera_add_fuzzer(dra_fault_state ${CMAKE_CURRENT_LIST_DIR}/dra_fault_state.cc
  tessera_dra_fault_state)
