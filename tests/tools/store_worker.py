#!/usr/bin/python3
"""store_worker.py: the Python twin of dtrain-store-worker (tests/tools/store_worker.cpp), using dtrain_store.

Run under the launcher (RANK, WORLD_SIZE, DTRAIN_STORE_ADDR, DTRAIN_JOB_TOKEN). Every rank publishes its rank,
counts itself in, waits for the others and reads their keys back; then checks compare_set, delete and a get
timeout on keys of its own; rank 0 checks num_keys once every rank is done and publishes the count, which every
rank verifies. Prints "store-worker rank R ok" and exits 0, or names the mismatch and exits 1.
DTRAIN_STORE_WORKER_TIMEOUT_MS bounds each wait (default 60000).
"""

import os
import sys

try:
    import dtrain_store
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker", "python"))
    import dtrain_store


class Mismatch(Exception):
    pass


def expect(what, expected, got):
    if expected != got:
        raise Mismatch(f"{what}: expected {expected!r}, got {got!r}")


def blob():
    # Over gRPC's default 4 MiB message limit, so that a server without the store's limits fails.
    size = 5 << 20
    period = bytes((i * 131 + 7) % 251 for i in range(251))
    return (period * (size // 251 + 1))[:size]


def wait_all(store, keys, timeout):
    for i in range(0, len(keys), dtrain_store.MAX_KEYS_PER_CALL):
        store.wait(keys[i:i + dtrain_store.MAX_KEYS_PER_CALL], timeout=timeout)


def run(rank, world, timeout):
    store = dtrain_store.StoreClient()
    me = str(rank)

    if rank == 0:
        store.set("blob", blob())
    store.add("arrived", 1)
    store.set(f"rank/{me}", me)
    rank_keys = [f"rank/{i}" for i in range(world)]
    wait_all(store, rank_keys, timeout)
    for i, key in enumerate(rank_keys):
        expect(key, str(i).encode(), store.get(key))
    # Every rank added before setting its rank key, so all adds are in.
    expect("arrived", str(world).encode(), store.get("arrived", timeout=timeout))
    if store.get("blob", timeout=timeout) != blob():
        raise Mismatch("blob: the 5 MiB value came back different")

    cas = f"cas/{me}"
    expect("compare_set on a missing key with expected 'x'", b"x", store.compare_set(cas, "x", "y"))
    if store.check([cas]):
        raise Mismatch(f"{cas} exists after a compare_set that must not store")
    expect("compare_set on a missing key with expected ''", b"v1", store.compare_set(cas, b"", b"v1"))
    expect("compare_set with a wrong expected", b"v1", store.compare_set(cas, "wrong", "v2"))
    expect("compare_set with the right expected", b"v2", store.compare_set(cas, "v1", "v2"))
    expect(cas, b"v2", store.get(cas))
    if not store.delete_key(cas):
        raise Mismatch(f"delete_key {cas} returned False for a present key")
    if store.delete_key(cas):
        raise Mismatch(f"delete_key {cas} returned True for a deleted key")
    if store.check([cas]):
        raise Mismatch(f"{cas} still exists after delete_key")

    try:
        store.get(f"never/{me}", timeout=0.2)
        raise Mismatch("get of a key nobody sets returned instead of timing out")
    except dtrain_store.StoreError as error:
        if error.kind != "timeout":
            raise

    store.set(f"done/{me}", "1")
    expected_keys = str(2 * world + 2)  # rank/*, done/*, arrived, blob
    if rank == 0:
        wait_all(store, [f"done/{i}" for i in range(world)], timeout)
        expect("num_keys once every rank is done", expected_keys, str(store.num_keys()))
        store.set("verified", expected_keys)
    expect("verified (rank 0's num_keys)", expected_keys.encode(), store.get("verified", timeout=timeout))
    store.close()


def main():
    rank = os.environ.get("RANK", "-1")
    try:
        for name in ("RANK", "WORLD_SIZE"):
            if not os.environ.get(name):
                raise Mismatch(f"{name} is not set (run this under dtrain launch or dtrain run)")
        timeout = int(os.environ.get("DTRAIN_STORE_WORKER_TIMEOUT_MS", "60000")) / 1000
        run(int(rank), int(os.environ["WORLD_SIZE"]), timeout)
    except (Mismatch, dtrain_store.StoreError) as error:
        print(f"store-worker rank {rank}: {error}", flush=True)
        return 1
    print(f"store-worker rank {rank} ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
