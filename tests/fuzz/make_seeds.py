#!/usr/bin/python3
"""Writes the binary seed inputs of tests/fuzz/corpus/ (the text seeds are written by hand). They mirror what the
unit tests feed the same code: a small llm.c shard, a tiny model checkpoint and its state file, store requests of
every kind, and a launcher's session (Configure, PrepareRound, StartGroup, StopGroup, Probe, Shutdown).

    /usr/bin/python3 tests/fuzz/make_seeds.py [BUILD_DIR]

BUILD_DIR (default: build) holds the generated Python stubs (<build>/python) for the protocol seeds."""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def shard(tokens):
    header = [20240520, 1, len(tokens)] + [0] * 253
    return struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens)


def model_file(maxT, V, Vp, L, NH, C):
    header = [20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248
    per_layer = 12 * C * C + 13 * C
    n = Vp * C + maxT * C + L * per_layer + 2 * C
    return struct.pack("<256i", *header) + struct.pack("<%df" % n, *[0.01 * (i % 7) for i in range(n)]), n


def fnv1a_words(data):
    h = 0xcbf29ce484222325
    words = len(data) // 8
    for i in range(words):
        (w,) = struct.unpack_from("<Q", data, 8 * i)
        h = ((h ^ w) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    for b in data[words * 8:]:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def state_file(n, model_crc=None):
    ints = [0x54534454, 1, 4, 8, 8, 1, 1, 2, 1, 4, 1, 1, 1 if model_crc is not None else 0, 0, 0, 0]
    words = [3, 3, 1337, n, model_crc or 0] + [0] * 19
    body = struct.pack("<16i24Q", *ints, *words)
    body += struct.pack("<%df" % n, *[0.5] * n) + struct.pack("<%df" % n, *[0.25] * n)
    return body + struct.pack("<Q", fnv1a_words(body))


def file_seeds():
    # data_shard: 4 option bytes (batch, seq, world/rank, micro-steps/vocab), then the shard file.
    put("data_shard", "tiny", bytes([1, 3, 0, 0x80]) + shard([i % 256 for i in range(64)]))
    put("data_shard", "two_ranks", bytes([0, 7, 1, 1]) + shard([i % 300 for i in range(200)]))
    put("data_shard", "bad_magic", bytes([0, 0, 0, 0]) + struct.pack("<256i", 7, 1, 2, *[0] * 253) + b"\0\0\0\0")
    # checkpoint: first byte 0 = model file, 1 = state file.
    model, n = model_file(maxT=2, V=3, Vp=4, L=1, NH=1, C=2)
    put("checkpoint", "model_tiny", b"\0" + model)
    put("checkpoint", "model_bf16", b"\0" + struct.pack("<256i", 20240326, 5, *[1] * 6, *[0] * 248))
    put("checkpoint", "state_tiny", b"\1" + state_file(6, model_crc=0x1234))
    put("checkpoint", "state_old", b"\1" + state_file(3))


def record(kind, payload):
    """One record of the protocol targets' input: a kind byte, a little-endian u16 length, the message bytes."""
    return bytes([kind]) + struct.pack("<H", len(payload)) + payload


def protocol_seeds(build):
    sys.path.insert(0, os.path.join(build, "python"))
    from dtrain.v1 import session_pb2, store_pb2

    # store_service: kind = method (0 Set .. 7 Wait) + 8 * token choice (0 the round's, 1 another, 2 none).
    set_ = store_pb2.SetRequest(key="nccl/default", value=b"\x01" * 128).SerializeToString()
    get = store_pb2.GetRequest(key="nccl/default", timeout_ms=5).SerializeToString()
    add = store_pb2.AddRequest(key="barrier", delta=1).SerializeToString()
    cas = store_pb2.CompareSetRequest(key="leader", expected=b"", desired=b"rank0").SerializeToString()
    check = store_pb2.CheckRequest(keys=["nccl/default", "barrier"]).SerializeToString()
    delete = store_pb2.DeleteRequest(key="barrier").SerializeToString()
    num = store_pb2.NumKeysRequest().SerializeToString()
    wait = store_pb2.WaitRequest(keys=["leader"], timeout_ms=5).SerializeToString()
    put("store_service", "rendezvous", record(0, set_) + record(1, get) + record(2, add) + record(2, add) +
        record(3, cas) + record(4, check) + record(7, wait) + record(5, delete) + record(6, num))
    put("store_service", "waits", record(7, wait) + record(1, get) + record(0, set_) + record(1, get))
    put("store_service", "tokens", record(8, set_) + record(16, get) + record(2, add) + record(10, add) +
        record(2, store_pb2.AddRequest(key="barrier", delta=-(2 ** 63)).SerializeToString()))

    # agent_session: kind is ignored (0); each record is one LauncherMessage. Text fields go in as the stubs
    # declare them (string or bytes).
    def text(message_type, field, value):
        bytes_type = message_type.DESCRIPTOR.fields_by_name[field].type == 12  # FieldDescriptor.TYPE_BYTES
        if isinstance(value, list):
            return [v.encode() if bytes_type else v for v in value]
        if isinstance(value, dict):
            entry = message_type.DESCRIPTOR.fields_by_name[field].message_type.fields_by_name["value"]
            return {k: v.encode() if entry.type == 12 else v for k, v in value.items()}
        return value.encode() if bytes_type else value

    W = session_pb2.WorkerSpec

    def worker(**fields):
        return W(**{k: text(W, k, v) if isinstance(v, (str, list, dict)) and k != "cpus" else v
                    for k, v in fields.items()})

    def msg(**fields):
        return record(0, session_pb2.LauncherMessage(**fields).SerializeToString())

    configure = msg(configure=session_pb2.Configure(job_id="tiny-gpt-20260101-000000", node_rank=0, lease_ms=10000,
                                                    heartbeat_interval_ms=1000, stop_grace_ms=100,
                                                    protocol_version="1"))
    prepare = msg(prepare_round=session_pb2.PrepareRound(round=0, store_token="0123456789abcdef"))
    workers = []
    for rank in range(2):
        workers.append(worker(
            rank=rank, argv=["/usr/bin/python3", "train.py"], env={"RANK": str(rank), "WORLD_SIZE": "2"},
            working_dir="/tmp", cpus=[rank], log_path="attempt_0/rank_%d.log" % rank,
            error_file="attempt_0/rank_%d_error.json" % rank, stream_stdout=rank == 0, stream_stderr=rank == 0))
    start = msg(start_group=session_pb2.StartGroup(round=0, round_token="0123456789abcdef", workers=workers))
    stop = msg(stop_group=session_pb2.StopGroup(round=0, grace_ms=10))
    probe = msg(probe=session_pb2.Probe(id=1, open_port=True, reach=["127.0.0.1:1"], reach_timeout_ms=10,
                                        checkpoint_dir=text(session_pb2.Probe, "checkpoint_dir", "/tmp")))
    shutdown = msg(shutdown=session_pb2.Shutdown())
    heartbeat = msg(heartbeat=session_pb2.Heartbeat())
    put("agent_session", "round", configure + prepare + start + stop + heartbeat + shutdown)
    put("agent_session", "probe", configure + probe + shutdown)
    put("agent_session", "escape", configure + msg(start_group=session_pb2.StartGroup(round=1, workers=[
        worker(rank=0, argv=["x"], log_path="../../etc/x", error_file="/etc/shadow")])))


if __name__ == "__main__":
    file_seeds()
    protocol_seeds(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "build"))
