#!/usr/bin/env bash
# Installs the Debian packages dtrain needs. Idempotent: packages already present are skipped, and apt runs only when
# something is missing. Fails loudly (non-zero exit, the packages named) on any error.
#
#   scripts/setup.sh            what building and running dtrain needs (scripts/quickstart.sh)
#   scripts/setup.sh --tests    that, plus what only the tests use (scripts/test.sh): doctest, the fuzzing clang,
#                               Prometheus, Chromium, sshd, Slurm, iptables, ...
set -euo pipefail

tests=0
case ${1:-} in
  "") ;;
  --tests) tests=1 ;;
  *) echo "setup: unknown argument '$1' (expected nothing or --tests)" >&2; exit 2 ;;
esac

packages=(
  # the build
  build-essential cmake ninja-build pkg-config git
  libcli11-dev libspdlog-dev libfmt-dev libyaml-cpp-dev nlohmann-json3-dev
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libssl-dev libgloo-dev libopenblas-dev
  # the PyTorch bootstrap's wrappers in C (worker/python/bootstrap/hooks.c), for Debian's python3
  python3-dev
  # running jobs: PyTorch workers (the quickstart job is one) and the Python store client; /proc readers; gdb for
  # the stacks of a hung worker
  python3 python3-torch python3-grpcio python3-protobuf
  procps iproute2 gdb
)
test_packages=(
  doctest-dev
  # promtool and a Prometheus server for test_metrics_endpoint. On a host with systemd the package also enables its
  # own service on :9090 (`systemctl disable --now prometheus` if that is not wanted).
  prometheus
  # network-namespace clusters, the ssh and Slurm providers' tests
  iptables iputils-ping util-linux hostname
  openssh-server openssh-client slurm-wlm munge
  # scripts/fuzz.sh
  clang-14 libfuzzer-14-dev
  # test_report_page renders the job report page in headless Chromium
  chromium fonts-dejavu-core
  # layout.rules measures functions with Universal Ctags
  universal-ctags
  # test_k8s_manifests checks configs/k8s/ against the Kubernetes object models
  python3-kubernetes python3-yaml
)
[ "$tests" -eq 1 ] && packages+=("${test_packages[@]}")

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
else
  sudo=
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q || { echo "setup: apt-get update failed" >&2; exit 1; }
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" || {
  echo "setup: apt-get install failed for: ${missing[*]}" >&2
  exit 1
}
echo "setup: done"
