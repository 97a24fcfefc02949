"""A gang's rendezvous store that only the gang's seats can use: rank 0 serves it, and every
connection proves it holds the attempt's secret (an HMAC challenge each way) before it may read
or write a key. PyTorch's TCPStore answers anyone who reaches its port; this store answers
nobody until the handshake passes, so a stranger can neither read the rendezvous nor write it,
nor learn the collectives' addresses from it (the process group meets only through it).

The listener binds the advertised address only (not every interface). Its port is the one the
rank-0 worker bound and published with its seat and still holds (SO_REUSEPORT, same user: see
worker.supervisor.gang_port), so nobody else can take it between the seat and this bind.

The wire: a frame is a 4-byte big-endian length and that many bytes; a request is frames of an
op and its fields, an answer a status frame and its fields. Values are bytes, as TCPStore's.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import torch.distributed as dist

log = logging.getLogger(__name__)
MAGIC = b"epochal-gang-store/1"
NONCE_BYTES = 32
HANDSHAKE_SECONDS = 10.0  # a stranger's connection is dropped after this, handshake or not
MAX_FRAME = 16 * 1024 * 1024  # rendezvous values are addresses and ids, never tensors
MAX_FIELDS = 1024  # keys a wait or check names at once
MAX_PENDING = 32  # connections still in their handshake; more are refused at once
OK, MISSING = b"ok", b"missing"
_LENGTH = struct.Struct(">I")


class HandshakeFailed(ConnectionError):
    """The other end does not hold the gang's secret (or speaks another protocol)."""


def _mac(secret: bytes, side: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(secret, MAGIC + side + server_nonce + client_nonce, hashlib.sha256).digest()


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the gang store's connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send_frames(sock: socket.socket, *fields: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(fields)) + b"".join(_LENGTH.pack(len(f)) + f for f in fields))


def read_frames(sock: socket.socket) -> list[bytes]:
    (count,) = _LENGTH.unpack(_read_exact(sock, _LENGTH.size))
    if count > MAX_FIELDS:
        raise ConnectionError(f"a gang store request of {count} fields is over {MAX_FIELDS}")
    fields = []
    for _ in range(count):
        (size,) = _LENGTH.unpack(_read_exact(sock, _LENGTH.size))
        if size > MAX_FRAME:
            raise ConnectionError(f"a gang store frame of {size} bytes is over {MAX_FRAME}")
        fields.append(_read_exact(sock, size))
    return fields


def prove_client(sock: socket.socket, secret: bytes) -> None:
    """The client's half: answer the server's challenge, then check the server's answer."""
    server_nonce = _read_exact(sock, len(MAGIC) + NONCE_BYTES)[len(MAGIC) :]
    client_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(client_nonce + _mac(secret, b"client", server_nonce, client_nonce))
    answer = _read_exact(sock, hashlib.sha256().digest_size)
    if not hmac.compare_digest(answer, _mac(secret, b"server", server_nonce, client_nonce)):
        raise HandshakeFailed("the gang store's host does not hold this attempt's secret")


def _check_client(sock: socket.socket, secret: bytes) -> None:
    """The server's half: a fresh challenge; the client's answer must match before anything."""
    server_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(MAGIC + server_nonce)
    reply = _read_exact(sock, NONCE_BYTES + hashlib.sha256().digest_size)
    client_nonce, proof = reply[:NONCE_BYTES], reply[NONCE_BYTES:]
    if not hmac.compare_digest(proof, _mac(secret, b"client", server_nonce, client_nonce)):
        raise HandshakeFailed("a connection without the gang's secret")
    sock.sendall(_mac(secret, b"server", server_nonce, client_nonce))


class Keys:
    """The store's keys and values, and the waits on them (TCPStore's semantics)."""

    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}
        self.changed = threading.Condition()

    def answer(self, op: bytes, args: list[bytes]) -> list[bytes]:
        handler: Callable[[list[bytes]], list[bytes]] = getattr(self, f"_{op.decode()}")
        with self.changed:
            return handler(args)

    def _set(self, args: list[bytes]) -> list[bytes]:
        self.values[args[0]] = args[1]
        self.changed.notify_all()
        return [OK]

    def _get(self, args: list[bytes]) -> list[bytes]:
        if not self._wait([args[0]], float(args[1])):
            return [MISSING]
        return [OK, self.values[args[0]]]

    def _wait(self, keys: list[bytes], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not all(key in self.values for key in keys):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.changed.wait(left)
        return True

    def _wait_keys(self, args: list[bytes]) -> list[bytes]:
        return [OK] if self._wait(args[1:], float(args[0])) else [MISSING]

    def _add(self, args: list[bytes]) -> list[bytes]:
        value = int(self.values.get(args[0], b"0")) + int(args[1])
        self.values[args[0]] = str(value).encode()
        self.changed.notify_all()
        return [OK, str(value).encode()]

    def _compare_set(self, args: list[bytes]) -> list[bytes]:
        key, expected, desired = args
        current = self.values.get(key)
        if (current is None and expected == b"") or current == expected:
            self.values[key] = desired
            self.changed.notify_all()
            return [OK, desired]
        return [OK, expected if current is None else current]

    def _check(self, args: list[bytes]) -> list[bytes]:
        return [OK, b"1" if all(key in self.values for key in args) else b"0"]

    def _delete(self, args: list[bytes]) -> list[bytes]:
        return [OK, b"1" if self.values.pop(args[0], None) is not None else b"0"]

    def _num_keys(self, _args: list[bytes]) -> list[bytes]:
        return [OK, str(len(self.values)).encode()]


OPS = frozenset(
    {b"set", b"get", b"wait_keys", b"add", b"compare_set", b"check", b"delete", b"num_keys"}
)


class StoreServer:
    """Rank 0's store: a thread accepting connections on `listener`, one thread per
    connection; a connection that fails the handshake is closed having seen only a nonce."""

    def __init__(self, listener: socket.socket, secret: bytes) -> None:
        self.listener, self.secret, self.keys = listener, secret, Keys()
        self.pending = threading.BoundedSemaphore(MAX_PENDING)
        self.refused = 0  # connections that failed the handshake (tests read it)

    def start(self) -> StoreServer:
        threading.Thread(target=self._accept, name="gang-store", daemon=True).start()
        return self

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed: the attempt is over
                return
            if not self.pending.acquire(blocking=False):
                conn.close()  # a flood of handshakes: the gang's own seats retry
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(HANDSHAKE_SECONDS)
                _check_client(conn, self.secret)
            except (OSError, HandshakeFailed):
                self.refused += 1
                return
            finally:
                self.pending.release()
            conn.settimeout(None)
            self._answer_all(conn)

    def _answer_all(self, conn: socket.socket) -> None:
        try:
            while True:
                op, *args = read_frames(conn) or [b""]
                if op not in OPS:
                    return  # a member that speaks this protocol never sends one
                send_frames(conn, *self.keys.answer(op, args))
        except (OSError, ValueError, IndexError):
            return


def listen(address: str, port: int) -> socket.socket:
    """The store's listener on the advertised `address` only, at the port its worker holds;
    on every interface when no interface here holds that address (a NAT's address named by
    EPOCHAL_WORKER_ADDRESS), which the handshake still guards."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            sock.close()
            raise
        log.warning("no interface holds %s: the gang store listens on every one", address)
        sock.bind(("", port))
    sock.listen(64)
    return sock


class GangStore(dist.Store):
    """A member's connection to the gang's store (every rank, rank 0 included), as the
    c10d Store that init_process_group takes: requests one at a time over one connection."""

    def __init__(self, address: str, port: int, secret: bytes, timeout: timedelta) -> None:
        super().__init__()
        self.set_timeout(timeout)  # c10d may set another; a get or wait waits that long
        self._lock = threading.Lock()
        self._sock = _connect(address, port, secret, timeout.total_seconds())

    @property
    def _wait_seconds(self) -> float:
        return float(self.timeout.total_seconds())  # type: ignore[attr-defined]  # c10d's, unstubbed

    def _ask(self, op: bytes, *args: bytes) -> list[bytes]:
        with self._lock:
            send_frames(self._sock, op, *args)
            return read_frames(self._sock)

    def set(self, key: str, value: bytes | str) -> None:
        self._ask(b"set", key.encode(), value.encode() if isinstance(value, str) else value)

    def get(self, key: str) -> bytes:
        answer = self._ask(b"get", key.encode(), str(self._wait_seconds).encode())
        if answer[0] != OK:
            raise dist.DistStoreError(f"the gang store has no key {key!r} after the timeout")
        return answer[1]

    def add(self, key: str, amount: int) -> int:
        return int(self._ask(b"add", key.encode(), str(amount).encode())[1])

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        fields = (v.encode() if isinstance(v, str) else v for v in (expected, desired))
        return self._ask(b"compare_set", key.encode(), *fields)[1]

    def check(self, keys: list[str]) -> bool:
        return self._ask(b"check", *(key.encode() for key in keys))[1] == b"1"

    def delete_key(self, key: str) -> bool:
        return self._ask(b"delete", key.encode())[1] == b"1"

    def num_keys(self) -> int:
        return int(self._ask(b"num_keys")[1])

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        seconds = self._wait_seconds if timeout is None else timeout.total_seconds()
        answer = self._ask(b"wait_keys", str(seconds).encode(), *(k.encode() for k in keys))
        if answer[0] != OK:
            raise dist.DistStoreError(f"the gang store lacks {keys} after the timeout")


def _connect(address: str, port: int, secret: bytes, seconds: float) -> socket.socket:
    """Connect and prove the secret; rank 0 may not listen yet, so retry until `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            sock = socket.create_connection((address, port), timeout=HANDSHAKE_SECONDS)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        try:
            prove_client(sock, secret)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        return sock
