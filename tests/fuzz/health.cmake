# An operator's Xid classification table (--fault-table) through XidTable::Parse and a Classifier.
tessera_add_fuzzer(xid_table ${CMAKE_CURRENT_LIST_DIR}/health_xid_table.cc tessera_health)
