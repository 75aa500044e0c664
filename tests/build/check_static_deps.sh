#!/usr/bin/env bash
# check_static_deps.sh BINARY ON|OFF
# ON (DTRAIN_STATIC_DEPS, cmake/DtrainStaticDeps.cmake): the binary needs none of gRPC's, Protobuf's, Abseil's,
# OpenSSL's, c-ares', RE2's, upb's or yaml-cpp's shared objects (their code is linked in), and still runs; OFF: it
# needs them (the shared objects are linked as before).
set -euo pipefail
binary=$1 mode=$2
command -v readelf >/dev/null || { echo "FAIL: readelf not found (binutils)"; exit 1; }
needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
static_kind='^lib(grpc|gpr|upb|address_sorting|protobuf|absl_|ssl|crypto|cares|re2|yaml-cpp)'
shared=$(grep -E "$static_kind" <<<"$needed" || true)
echo "$binary needs $(wc -l <<<"$needed") shared objects; of the static kind: ${shared:-none}" | tr '\n' ' '
echo
"$binary" --version >/dev/null || { echo "FAIL: $binary --version did not run"; exit 1; }
case $mode in
  ON) [[ -z $shared ]] || { echo "FAIL: DTRAIN_STATIC_DEPS=ON, yet these are shared objects"; exit 1; } ;;
  OFF) [[ -n $shared ]] || { echo "FAIL: DTRAIN_STATIC_DEPS=OFF, yet gRPC and the rest are linked in"; exit 1; } ;;
  *) echo "FAIL: unknown mode '$mode'"; exit 1 ;;
esac
echo ok
