"""Python client of a dtrain job's key-value store (PyTorch c10d Store semantics).

Workers started by `dtrain launch` / `dtrain run` find the store in two environment variables:
DTRAIN_STORE_ADDR (host:port of node 0's agent) and DTRAIN_JOB_TOKEN (this restart round's token).

    from dtrain_store import StoreClient
    store = StoreClient()                      # address and token from the environment
    store.set("nccl/default", unique_id)       # bytes or str
    uid = store.get("nccl/default", timeout=60)  # bytes; blocks until some rank sets it

Timeouts are seconds (int/float) or datetime.timedelta; None (or 0) means the client's default_timeout, 300 s
unless given, like c10d's default store timeout. The store caps every timeout at 1 hour. Limits: key 4 KiB,
value 16 MiB (an agent's store; no store takes over 64 MiB), 64 keys per check/wait, and per job (each restart
round) 256 MiB of keys plus values and 131072 keys: past those, set/add/compare_set raise StoreError of kind "full".
Every failure raises StoreError, whose message names the operation, the key, the store's address and what to check;
`kind` says which failure it was.

Needs the generated stubs dtrain.v1.store_pb2 / store_pb2_grpc, which the build writes to <build>/python (target
dtrain_proto_python): put that folder on PYTHONPATH or set DTRAIN_BUILD_DIR.
"""

import datetime
import math
import os
import sys
import time

import grpc

try:
    from dtrain.v1 import store_pb2, store_pb2_grpc
except ImportError:
    _build = os.environ.get("DTRAIN_BUILD_DIR")
    if not _build or not os.path.isdir(os.path.join(_build, "python", "dtrain")):
        raise ImportError(
            "dtrain_store needs the generated stubs dtrain.v1.store_pb2: build the target dtrain_proto_python "
            "and put <build>/python on PYTHONPATH (or set DTRAIN_BUILD_DIR to the build folder)") from None
    sys.path.insert(0, os.path.join(_build, "python"))
    from dtrain.v1 import store_pb2, store_pb2_grpc

__all__ = ["StoreClient", "StoreError", "MAX_KEY_BYTES", "MAX_VALUE_BYTES", "MAX_KEYS_PER_CALL", "MAX_TIMEOUT_S",
           "MAX_TOKEN_BYTES"]

MAX_KEY_BYTES = 4 * 1024
MAX_VALUE_BYTES = 64 * 1024 * 1024  # the most any store takes in one value; an agent's store takes 16 MiB
MAX_KEYS_PER_CALL = 64
MAX_TIMEOUT_S = 3600.0
# The token travels as gRPC metadata, which gRPC caps at 8 KiB per call by default (refusing with a message about
# sizes that reads like a full store); the launcher's tokens are 64 characters. kMaxTokenBytes in worker/store/client.h.
MAX_TOKEN_BYTES = 4 * 1024
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0

_TOKEN_METADATA = "dtrain-token"  # the same name as kTokenMetadata in common/grpc/metadata.h
_MAX_MESSAGE_BYTES = 65 << 20  # a 64 MiB value plus its key and framing


class StoreError(RuntimeError):
    """A store call failed. `kind` is one of: timeout, unauthenticated, invalid_argument, not_an_integer, closed,
    unreachable, full (the job's store holds as many bytes or keys as it may), other."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def _quoted(key):
    return "'" + (key if len(key) <= 80 else key[:80] + "...") + "'"


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _bytes(value, what):
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"store {what} must be bytes or str, not {type(value).__name__}")


def _keys(keys):
    if isinstance(keys, (str, bytes, bytearray)):
        raise TypeError("store check/wait take a list of keys, not a single key")
    return [_key(k) for k in keys]


def _key(key):
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).decode("utf-8")
    if not isinstance(key, str):
        raise TypeError(f"store keys must be str, not {type(key).__name__}")
    return key


_TLS_TARGET_NAME = "dtrain.cluster"


def _worker_tls_credentials():
    """TLS credentials from the files the agent gives workers in a TLS cluster (DTRAIN_TLS_CA/CERT/KEY), or None."""
    ca = os.environ.get("DTRAIN_TLS_CA")
    if not ca:
        return None
    files = {}
    for name in ("DTRAIN_TLS_CA", "DTRAIN_TLS_CERT", "DTRAIN_TLS_KEY"):
        try:
            with open(os.environ.get(name, ""), "rb") as f:
                files[name] = f.read()
        except OSError as e:
            raise StoreError("other", f"store client: cannot read {name} ({e}); the agent writes the worker's TLS "
                             "files when the cluster uses TLS") from None
    return grpc.ssl_channel_credentials(root_certificates=files["DTRAIN_TLS_CA"],
                                        private_key=files["DTRAIN_TLS_KEY"],
                                        certificate_chain=files["DTRAIN_TLS_CERT"])


class StoreClient:
    """A connection to the job's store. Thread-safe; every call has a deadline."""

    def __init__(self, address=None, token=None, connect_timeout=DEFAULT_CONNECT_TIMEOUT_S,
                 default_timeout=DEFAULT_TIMEOUT_S):
        """Connects to the store (address "host:port", token: the round's token); both default to the environment
        (DTRAIN_STORE_ADDR, DTRAIN_JOB_TOKEN). connect_timeout bounds the connection and every call that does not
        block (set, add, ...); default_timeout is the timeout of get/wait calls that give none."""
        if address is None:
            address = os.environ.get("DTRAIN_STORE_ADDR")
        if token is None:
            token = os.environ.get("DTRAIN_JOB_TOKEN")
        for name, value in (("DTRAIN_STORE_ADDR", address), ("DTRAIN_JOB_TOKEN", token)):
            if not value:
                raise StoreError(
                    "other", f"store client: {name} is not set; run this program under `dtrain launch` or "
                    "`dtrain run`, which set DTRAIN_STORE_ADDR (host:port of the job's store) and DTRAIN_JOB_TOKEN "
                    "for every worker, or pass address= and token=")
        if len(token) > MAX_TOKEN_BYTES:
            raise StoreError("unauthenticated", f"store client: the token is {len(token)} bytes, more than the "
                             f"{MAX_TOKEN_BYTES} a token may have (it travels as gRPC metadata; the launcher's tokens "
                             "are 64 characters); check that DTRAIN_JOB_TOKEN holds the token the launcher set for "
                             "this worker")
        if any(not (0x20 <= ord(c) <= 0x7e) for c in token):
            raise StoreError("unauthenticated", "store client: the token holds a character that gRPC metadata "
                             "cannot carry (printable ASCII only); check DTRAIN_JOB_TOKEN")
        self.address = address
        self._metadata = ((_TOKEN_METADATA, token),)
        self._connect_timeout = _seconds(connect_timeout)
        self._default_timeout = _seconds(default_timeout)
        options = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            # A get may block for up to an hour; pings notice a dead store well before that.
            ("grpc.keepalive_time_ms", 30000),
            ("grpc.keepalive_timeout_ms", 10000),
        ]
        credentials = _worker_tls_credentials()
        if credentials is None:
            self._channel = grpc.insecure_channel(address, options=options)
        else:
            # A cluster that uses TLS: mutual TLS with the worker certificate the agent issued for this job. Workers
            # hold no cluster token; the certificate opens the job's store and health reports, nothing else.
            options.append(("grpc.ssl_target_name_override", _TLS_TARGET_NAME))
            self._channel = grpc.secure_channel(address, credentials, options=options)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self._connect_timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise StoreError("unreachable", f"store client: cannot reach the store at {address} within "
                             f"{round(self._connect_timeout * 1000)} ms; {self._reach_hint()}") from None
        self._stub = store_pb2_grpc.StoreStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def set(self, key, value):
        key = _key(key)
        value = _bytes(value, "values")
        self._check_value("set", key, value)
        self._call("set", _quoted(key), self._stub.Set, store_pb2.SetRequest(key=key, value=value))

    def get(self, key, timeout=None):
        """Blocks until the key exists and returns its value (bytes)."""
        key = _key(key)
        ms = self._timeout_ms("get", timeout)
        return self._call("get", _quoted(key), self._stub.Get, store_pb2.GetRequest(key=key, timeout_ms=ms), ms).value

    def add(self, key, delta):
        """Adds delta to the integer under key (a missing key counts as 0); returns the new value."""
        key = _key(key)
        return self._call("add", _quoted(key), self._stub.Add, store_pb2.AddRequest(key=key, delta=int(delta))).value

    def compare_set(self, key, expected, desired):
        """c10d compareSet: stores desired if the key holds expected (or is missing and expected is empty).
        Returns the value now stored: desired on success, else the current value (expected if the key is missing)."""
        key = _key(key)
        expected = _bytes(expected, "values")
        desired = _bytes(desired, "values")
        self._check_value("compare_set", key, expected)
        self._check_value("compare_set", key, desired)
        request = store_pb2.CompareSetRequest(key=key, expected=expected, desired=desired)
        return self._call("compare_set", _quoted(key), self._stub.CompareSet, request).value

    def check(self, keys):
        """Whether every key exists now."""
        keys = _keys(keys)
        subject = _quoted(keys[0]) if len(keys) == 1 else f"of {len(keys)} keys"
        return self._call("check", subject, self._stub.Check, store_pb2.CheckRequest(keys=keys)).all_present

    def delete_key(self, key):
        """Whether the key existed."""
        key = _key(key)
        return self._call("delete_key", _quoted(key), self._stub.Delete, store_pb2.DeleteRequest(key=key)).deleted

    def num_keys(self):
        return self._call("num_keys", "", self._stub.NumKeys, store_pb2.NumKeysRequest()).count

    def wait(self, keys, timeout=None):
        """Blocks until every key exists."""
        keys = _keys(keys)
        ms = self._timeout_ms("wait", timeout)
        subject = "for " + (_quoted(keys[0]) if len(keys) == 1 else f"{len(keys)} keys")
        self._call("wait", subject, self._stub.Wait, store_pb2.WaitRequest(keys=keys, timeout_ms=ms), ms)

    def _timeout_ms(self, operation, timeout):
        seconds = self._default_timeout if timeout is None else _seconds(timeout)
        if seconds == 0:
            seconds = self._default_timeout
        if not 0 < seconds <= MAX_TIMEOUT_S:
            raise StoreError("invalid_argument", f"store {operation}: timeout of {seconds} s is outside (0, 3600] s "
                             "(1 hour), the store's limit")
        return max(1, math.ceil(seconds * 1000))

    def _check_value(self, operation, key, value):
        if len(value) > MAX_VALUE_BYTES:
            raise StoreError("invalid_argument", f"store {operation} {_quoted(key)}: the value is {len(value)} bytes; "
                             f"no store takes more than {MAX_VALUE_BYTES} bytes (64 MiB) in one value (an agent's "
                             "store: 16 MiB); keep large data out of the store (a shared file, with its path in the "
                             "store)")

    def _reach_hint(self):
        return (f"check that node 0's agent is running and that {self.address} (DTRAIN_STORE_ADDR) is reachable "
                "from this host")

    def _call(self, operation, subject, method, request, timeout_ms=0):
        # The deadline is the operation's own timeout plus connect_timeout, so that the server's timeout error,
        # which says what is missing, normally arrives first.
        budget = timeout_ms / 1000 + self._connect_timeout
        start = time.monotonic()
        try:
            return method(request, timeout=budget, metadata=self._metadata, wait_for_ready=True)
        except grpc.RpcError as error:
            no_answer = time.monotonic() - start >= budget
            raise self._error(operation, subject, timeout_ms, error.code(), error.details() or "", no_answer) from None

    def _error(self, operation, subject, timeout_ms, code, detail, no_answer):
        name = f"store {operation}" + (f" {subject}" if subject else "")
        at = self.address
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            if no_answer or timeout_ms == 0:
                waited = timeout_ms + round(self._connect_timeout * 1000)
                return StoreError("timeout", f"{name} got no answer from the store at {at} within {waited} ms; "
                                  f"{self._reach_hint()}")
            if operation == "get":
                return StoreError("timeout", f"{name} timed out after {timeout_ms} ms at {at}: no process set it; "
                                  "check that the rank that sets it (often rank 0) is running and uses the same key")
            return StoreError("timeout", f"{name} timed out after {timeout_ms} ms at {at}: {detail}; check that the "
                              "ranks that set them are running and use the same keys")
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return StoreError("unauthenticated", f"{name} was refused by the store at {at}: {detail}; check that "
                              "DTRAIN_JOB_TOKEN is this round's token (the launcher sets it for each worker)")
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return StoreError("invalid_argument", f"{name} was refused by the store at {at}: {detail}")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return StoreError("full", f"{name} was refused by the store at {at}: {detail}")
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            return StoreError("not_an_integer", f"{name} failed at {at}: {detail}")
        if code == grpc.StatusCode.ABORTED:
            return StoreError("closed", f"{name} failed at {at}: {detail}; this worker belongs to a round that is "
                              "over (a restart starts new workers)")
        if code == grpc.StatusCode.UNAVAILABLE:
            return StoreError("unreachable", f"{name} cannot reach the store at {at} ({detail}); {self._reach_hint()}")
        return StoreError("other", f"{name} failed at {at}: gRPC status {code.name}: {detail}")
