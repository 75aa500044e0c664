#!/usr/bin/env bash
# Installs what is missing (the product's packages only), builds the product (dtrain, dtrain-trainer, the Python
# helpers; no tests) and runs configs/quickstart.yaml: a PyTorch DDP job on 2 local nodes x 2 workers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" --product
cd "$root"
exec "${DTRAIN_BUILD_DIR:-$root/build}/bin/dtrain" launch configs/quickstart.yaml "$@"
