#!/usr/bin/env bash
# -DDTRAIN_WITH_CUDA (cmake/DtrainCuda.cmake) on a one-line project: ON with a missing nvcc fails the configure
# naming nvcc and the fix, AUTO with it missing configures with the backend off, OFF configures with it off, a value
# outside AUTO|ON|OFF is refused, and AUTO with the toolkit (when this machine has /usr/local/cuda/bin/nvcc) turns
# the backend on. Usage: cuda_switch_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(probe LANGUAGES CXX)
include($src/cmake/DtrainCuda.cmake)
message(STATUS "DTRAIN_CUDA_ENABLED=\${DTRAIN_CUDA_ENABLED}")
CMAKE
failed=0
configure() {  # configure NAME ARGS...: the output in $work/NAME.log, the exit status returned
  local name=$1
  shift
  cmake -S "$work" -B "$work/build-$name" "$@" >"$work/$name.log" 2>&1
}
expect() {  # expect NAME WANT_RC PATTERN
  local rc=$2
  if [ "$rc" != "$3" ] || ! grep -q -- "$4" "$work/$1.log"; then
    echo "FAIL $1: exit $rc (want $3), output lacks '$4':"
    sed 's/^/  /' "$work/$1.log"
    failed=1
  else
    echo "ok   $1"
  fi
}
configure on-missing -DDTRAIN_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER=/nonexistent/nvcc
expect on-missing $? 1 "DTRAIN_WITH_CUDA=ON but the CUDA backend cannot be built: missing nvcc"
configure auto-missing -DDTRAIN_WITH_CUDA=AUTO -DCMAKE_CUDA_COMPILER=/nonexistent/nvcc
expect auto-missing $? 0 "DTRAIN_CUDA_ENABLED=OFF"
configure off -DDTRAIN_WITH_CUDA=OFF
expect off $? 0 "CUDA backend off (DTRAIN_WITH_CUDA=OFF)"
configure bad -DDTRAIN_WITH_CUDA=maybe
expect bad $? 1 "DTRAIN_WITH_CUDA is 'maybe': use AUTO, ON or OFF"
if [ -x /usr/local/cuda/bin/nvcc ]; then
  configure auto
  expect auto $? 0 "DTRAIN_CUDA_ENABLED=ON"
fi
exit $failed
