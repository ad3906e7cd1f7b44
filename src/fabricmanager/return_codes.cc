// Fabric-manager return codes: their names (nv_fm_types.h) and what they mean to an operator.
#include "fabricmanager/nvfm_abi.h"

namespace tessera::fabricmanager::nvfm {
namespace {

constexpr const char* kNames[] = {
    "FM_ST_SUCCESS",                             // 0
    "FM_ST_BADPARAM",                            // -1
    "FM_ST_GENERIC_ERROR",                       // -2
    "FM_ST_NOT_SUPPORTED",                       // -3
    "FM_ST_UNINITIALIZED",                       // -4
    "FM_ST_TIMEOUT",                             // -5
    "FM_ST_VERSION_MISMATCH",                    // -6
    "FM_ST_IN_USE",                              // -7
    "FM_ST_NOT_CONFIGURED",                      // -8
    "FM_ST_CONNECTION_NOT_VALID",                // -9
    "FM_ST_NVLINK_ERROR",                        // -10
    "FM_ST_RESOURCE_BAD",                        // -11
    "FM_ST_RESOURCE_IN_USE",                     // -12
    "FM_ST_RESOURCE_NOT_IN_USE",                 // -13
    "FM_ST_RESOURCE_EXHAUSTED",                  // -14
    "FM_ST_RESOURCE_NOT_READY",                  // -15
    "FM_ST_PARTITION_EXISTS",                    // -16
    "FM_ST_PARTITION_ID_IN_USE",                 // -17
    "FM_ST_PARTITION_ID_NOT_IN_USE",             // -18
    "FM_ST_PARTITION_NAME_IN_USE",               // -19
    "FM_ST_PARTITION_NAME_NOT_IN_USE",           // -20
    "FM_ST_PARTITION_ID_NAME_MISMATCH",          // -21
    "FM_ST_NOT_READY",                           // -22
    "FM_ST_RESOURCE_USED_IN_THIS_PARTITION",     // -23
    "FM_ST_RESOURCE_USED_IN_ANOTHER_PARTITION",  // -24
    "FM_ST_PARTITION_MISWIRED_TRUNKS",           // -25
    "FM_ST_PARTITION_INSUFFICIENT_TRUNKS",       // -26
    "FM_ST_PARTITION_MISSING_SWITCHES",          // -27
    "FM_ST_PARTITION_NETWORK_CONFIG_ERROR",      // -28
    "FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR",   // -29
};
static_assert(sizeof kNames / sizeof kNames[0] == 1 - kLowestKnownReturn);

}  // namespace

const char* ReturnName(Return code) {
  if (code > 0 || code < kLowestKnownReturn) return "FM_ST_<unknown>";
  return kNames[-code];
}

const char* ReturnMeaning(Return code) {
  switch (code) {
    case kBadParam:
      return "the fabric manager does not know that partition";
    case kNotSupported:
      return "the fabric manager is not in shared NVSwitch mode (FABRIC_MODE=1 in "
             "fabricmanager.cfg)";
    case kUninitialized:
      return "the partition is not active (or the client library is not initialised)";
    case kTimeout:
      return "the fabric manager did not answer in time";
    case kVersionMismatch:
      return "the client library and the fabric manager are different versions";
    case kInUse:
      return "an overlapping partition is active";
    case kNotConfigured:
      return "the fabric manager is still initialising, or restarted and waits for the active "
             "partition list (tessera fabric set-active)";
    case kConnectionNotValid:
      return "the connection to the fabric manager is gone (it stopped or restarted)";
    case kNvlinkError:
      return "NVLink training failed for the partition's GPUs";
    case -22:  // FM_ST_NOT_READY
      return "the fabric manager is not ready to serve requests yet";
    default:
      return "";
  }
}

}  // namespace tessera::fabricmanager::nvfm
