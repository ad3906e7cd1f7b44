// Where the client finds its API server and credentials: a kubeconfig file, or the Pod's
// service account (in-cluster).
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

// Parses kubeconfig YAML: current-context (or `context` when given) → cluster server, CA
// (data or file, relative to `base_dir`), insecure-skip-tls-verify, tls-server-name; user token,
// tokenFile, client-certificate(-data), client-key(-data). Names the missing entry on error.
Result<ClientConfig> ParseKubeconfig(std::string_view yaml, const std::string& base_dir,
                                     const std::string& context = "");
// Reads the file then ParseKubeconfig with its directory as base.
Result<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");
// In-cluster: KUBERNETES_SERVICE_HOST/PORT and the service account's token and ca.crt.
Result<ClientConfig> InClusterConfig(
    const std::string& service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

}  // namespace tessera::k8s
