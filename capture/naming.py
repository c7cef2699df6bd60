"""Node names from addresses: ``10.0.0.5``, ``10.0.0.5:5432`` or a name from a names file.

A names file is TOML mapping an address, ``address:port`` or CIDR block to a name
(top-level keys or a ``[names]`` table, as ``tracefmt.load_names`` reads it). The most
specific entry wins: ``address:port``, then the address, then the longest CIDR prefix.
Addresses without an entry keep their text form.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

import numpy as np

from capture import NODE_BY
from tracefmt import ParameterError, load_names
from tracefmt.hashing import mix64

__all__ = ["NODE_BY", "Namer", "format_address", "one_host_note"]

_V4_MAPPED_HI = 0
_V4_MASK = 0xFFFF00000000


def format_address(hi: int, lo: int) -> str:
    """The text form of a 128-bit address held as two 64-bit halves (v4-mapped as IPv4).

    Examples
    --------
    >>> format_address(0, 0xFFFF0A000005)
    '10.0.0.5'
    >>> format_address(0x20010DB800000000, 1)
    '2001:db8::1'
    """
    if hi == 0 and (lo >> 32) == 0xFFFF:
        return str(ipaddress.IPv4Address(lo & 0xFFFFFFFF))
    return str(ipaddress.IPv6Address((hi << 64) | lo))


class Namer:
    """Name endpoints by address or by service, through an optional names map.

    Parameters
    ----------
    names : mapping or path, optional
        ``{"10.0.0.5": "WS1", "10.0.0.6:5432": "DB", "10.1.0.0/16": "clients"}`` or a
        names TOML file.
    node_by : {"address", "service"}
        ``service`` names the server side of a connection ``address:port`` (clients, on
        ephemeral ports, stay named by address).

    Examples
    --------
    >>> n = Namer({"10.0.0.0/8": "lan", "10.0.0.6:5432": "DB"}, node_by="service")
    >>> n.name(0, 0xFFFF0A000006, 5432, server=True), n.name(0, 0xFFFF0A000007, 40000, server=False)
    ('DB', 'lan')
    >>> Namer(node_by="service").name(0, 0xFFFF0A000006, 5432, server=True)
    '10.0.0.6:5432'
    """

    def __init__(
        self, names: Mapping[str, str] | str | os.PathLike[str] | None = None, *, node_by: str = "address"
    ) -> None:
        if node_by not in NODE_BY:
            raise ParameterError(f"unknown node naming {node_by!r} (must be one of {', '.join(NODE_BY)})")
        self.node_by = node_by
        if isinstance(names, str | os.PathLike):
            names = load_names(names)
        self.exact: dict[str, str] = {}
        self.nets: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = []
        for k, v in (names or {}).items():
            if "/" in k:
                try:
                    self.nets.append((ipaddress.ip_network(k, strict=False), v))
                except ValueError:
                    raise ParameterError(
                        f"names entry {k!r} is not a valid CIDR block (e.g. 10.0.0.0/24)"
                    ) from None
            else:
                self.exact[_canonical_key(k)] = v
        self.nets.sort(key=lambda nv: -nv[0].prefixlen)
        self._cache: dict[tuple[int, int, int, bool], str] = {}

    def name(self, hi: int, lo: int, port: int, *, server: bool) -> str:
        """The node name of one endpoint."""
        key = (hi, lo, port if server else -1, server)
        got = self._cache.get(key)
        if got is not None:
            return got
        addr = format_address(hi, lo)
        host = f"[{addr}]" if ":" in addr else addr
        svc = f"{host}:{port}"
        name = self.exact.get(svc) if server else None
        if name is None:
            name = self.exact.get(addr)
        if name is None and self.nets:
            ip = ipaddress.ip_address(addr)
            name = next((v for net, v in self.nets if ip.version == net.version and ip in net), None)
        if name is None:
            name = svc if (server and self.node_by == "service") else addr
        self._cache[key] = name
        return name

    def names_of(
        self, hi: np.ndarray, lo: np.ndarray, port: np.ndarray, server: np.ndarray
    ) -> tuple[np.ndarray, list[str]]:
        """Dictionary indices and the dictionary naming each endpoint (work per distinct endpoint)."""
        n = len(hi)
        if not n:
            return np.zeros(0, np.int32), []
        srv = server.astype(bool)
        pk = np.where(srv, port.astype(np.int64), -1)
        # One 64-bit hash per endpoint: sorting plain integers is far faster than records.
        key = mix64(mix64(hi.astype(np.uint64)) ^ lo.astype(np.uint64)) ^ mix64(pk.astype(np.uint64))
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        labels = [
            self.name(int(hi[i]), int(lo[i]), int(pk[i]), server=bool(pk[i] >= 0)) for i in first.tolist()
        ]
        # Several endpoints may share one name: index the distinct names.
        dictionary = sorted(set(labels))
        pos = {v: i for i, v in enumerate(dictionary)}
        remap = np.array([pos[v] for v in labels], np.int32)
        return remap[inv.ravel()], dictionary


def _canonical_key(k: str) -> str:
    """Normalize ``address`` or ``address:port`` keys (IPv6 as ``[addr]:port``)."""
    k = k.strip()
    try:
        return str(ipaddress.ip_address(k.strip("[]")))
    except ValueError:
        pass
    host, sep, port = k.rpartition(":")
    if sep and port.isdigit():
        try:
            addr = str(ipaddress.ip_address(host.strip("[]")))
        except ValueError:
            return k
        return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
    return k


def one_host_note(trace: str | os.PathLike[str], node_by: str) -> str | None:
    """What to do when a trace named by address has one node only (every service on one
    host, as on a loopback capture), or None.

    Examples
    --------
    >>> import tempfile, pathlib, pyarrow as pa, tracefmt
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.parquet"
    >>> tracefmt.write_trace(pa.table({"timestamp": pa.array([1, 2], pa.timestamp("ns")),
    ...     "sender": ["127.0.0.1"] * 2, "receiver": ["127.0.0.1"] * 2, "op": ["call", "return"],
    ...     "id": pa.array([None, None], pa.uint64())}), path)
    >>> one_host_note(path, "address")[:45]
    'every message is between 127.0.0.1 and itself'
    """
    import pyarrow.compute as pc

    from tracefmt import printable, read_trace

    if node_by != "address":
        return None
    t = read_trace(trace)
    names = set(pc.unique(t["sender"].cast("string")).to_pylist()) | set(
        pc.unique(t["receiver"].cast("string")).to_pylist()
    )
    if len(names) != 1:
        return None
    (only,) = names
    return (
        f"every message is between {printable(str(only))} and itself: services on one host differ by "
        "port, so convert with --node-by service (infer nesting then gives each service's calls "
        "back to it)"
    )
