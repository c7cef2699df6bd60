"""TCP reassembly and message boundaries, on hand-made conversations with known truth."""

from __future__ import annotations

import random

import dpkt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capture.decode import Decoder
from capture.flows import FlowAssembler, Messages
from capture.protocols import PROTOCOLS
from capture.source import PacketBatch

C, S = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
SYN, ACK, PSH, FIN, RST = 0x02, 0x10, 0x08, 0x01, 0x04


def pkt(
    ts: int, client: bool, seq: int, flags: int, data: bytes = b"", cport: int = 40000, sport: int = 7777
):
    src, dst = (C, S) if client else (S, C)
    t = dpkt.tcp.TCP(
        sport=cport if client else sport, dport=sport if client else cport, seq=seq, flags=flags, data=data
    )
    ip = dpkt.ip.IP(src=src, dst=dst, p=6, data=t)
    ip.len = len(bytes(ip))
    return (ts, bytes(ip))


def conversation(
    turns: list[tuple[bool, list[bytes]]],
    *,
    syn: bool = True,
    t0: int = 0,
    cport: int = 40000,
    isn: int = 1000,
    sport: int = 7777,
):
    """Packets of one connection: handshake, the given (client?, segments) turns, FINs."""
    cs, ss = isn, 5000
    out = []
    t = t0
    if syn:
        out += [
            pkt(t, True, cs - 1, SYN, cport=cport, sport=sport),
            pkt(t + 1, False, ss - 1, SYN | ACK, cport=cport, sport=sport),
        ]
        t += 2
    for client, segs in turns:
        for data in segs:
            t += 10
            if client:
                out.append(pkt(t, True, cs, PSH | ACK, data, cport=cport, sport=sport))
                cs += len(data)
            else:
                out.append(pkt(t, False, ss, PSH | ACK, data, cport=cport, sport=sport))
                ss += len(data)
    out += [
        pkt(t + 10, True, cs, FIN | ACK, cport=cport, sport=sport),
        pkt(t + 11, False, ss, FIN | ACK, cport=cport, sport=sport),
    ]
    return out


def run(packets, *, batch: int | None = None) -> Messages:
    dec, fa = Decoder(), FlowAssembler()
    parts = []
    step = batch or max(1, len(packets))
    for i in range(0, len(packets), step):
        chunk = packets[i : i + step]
        parts.append(
            fa.feed(dec.decode(PacketBatch.from_packets(chunk, 101)), final=i + step >= len(packets))
        )
    if not packets:
        parts.append(fa.feed(dec.decode(PacketBatch.from_packets([], 101)), final=True))
    return Messages.concat(parts)


def ops(m: Messages) -> list[str]:
    return ["call" if o == 0 else "return" if o == 1 else "send" for o in m.op.tolist()]


GENERIC = [
    (True, [b"q1-a", b"q1-b"]),
    (False, [b"r1"]),
    (True, [b"q2"]),
    (False, [b"r2-a", b"r2-b", b"r2-c"]),
]


def test_turn_taking_rule() -> None:
    m = run(conversation(GENERIC))
    assert ops(m) == ["call", "return", "call", "return"]
    assert m.nbytes.tolist() == [8, 2, 2, 12]
    assert m.ts_ns.tolist() == [12, 32, 42, 52]  # the first packet of each turn
    ids = m.id.tolist()
    assert ids[0] == ids[1] != ids[2] == ids[3]
    assert {PROTOCOLS[p] for p in m.proto.tolist()} == {"tcp"}
    assert len(set(m.flow.tolist())) == 1


def test_retransmission_and_out_of_order_give_the_same_messages() -> None:
    base = conversation(GENERIC)
    shuffled = list(base)
    # retransmit the first data segment later, and swap two segments of the last turn
    shuffled.insert(5, (shuffled[2][0] + 1, shuffled[2][1]))
    shuffled[7], shuffled[8] = shuffled[8], shuffled[7]
    fa_m = run(shuffled)
    ref = run(base)
    assert ops(fa_m) == ops(ref)
    assert fa_m.nbytes.tolist() == ref.nbytes.tolist()


def test_retransmission_is_counted() -> None:
    pk = conversation(GENERIC)
    pk.insert(4, pk[3])
    dec, fa = Decoder(), FlowAssembler()
    fa.feed(dec.decode(PacketBatch.from_packets(pk, 101)), final=True)
    assert fa.stats.retransmitted == 1


def test_gap_ends_the_message_and_is_counted() -> None:
    pk = conversation([(True, [b"aaaa", b"bbbb", b"cccc"]), (False, [b"r"])])
    del pk[3]  # the middle client segment is lost
    dec, fa = Decoder(), FlowAssembler()
    m = fa.feed(dec.decode(PacketBatch.from_packets(pk, 101)), final=True)
    assert fa.stats.gaps == 1
    assert ops(m) == ["call", "call", "return"]


def test_connection_seen_midway_uses_the_listening_port() -> None:
    # No SYN: the client is the peer of the well-known (or lower) port, even if the server speaks first.
    pk = conversation([(False, [b"late reply"]), (True, [b"next request"]), (False, [b"answer"])], syn=False)
    m = run(pk)
    assert ops(m) == ["return", "call", "return"]
    assert not m.has_id[0]  # its call was before the capture began


def test_port_reuse_is_two_connections() -> None:
    pk = conversation(GENERIC) + conversation(GENERIC, t0=1000, isn=777777)
    m = run(pk)
    assert len(m) == 8
    assert len(set(m.flow.tolist())) == 2


@pytest.mark.parametrize("batch", [1, 3, 7])
def test_batches_split_anywhere_give_the_same_messages(batch: int) -> None:
    pk = []
    for i in range(5):
        pk += conversation(GENERIC, t0=i * 7, cport=40000 + i)
    pk.sort(key=lambda p: p[0])
    ref = run(pk)
    got = run(pk, batch=batch)
    assert sorted(zip(got.ts_ns.tolist(), got.id.tolist(), strict=True)) == sorted(
        zip(ref.ts_ns.tolist(), ref.id.tolist(), strict=True)
    )


def test_rst_closes_the_connection() -> None:
    pk = conversation(GENERIC)[:-2]
    pk.append(pkt(999, False, 0, RST))
    dec, fa = Decoder(), FlowAssembler()
    m = fa.feed(dec.decode(PacketBatch.from_packets(pk, 101)), final=False)
    assert len(m) == 4  # processed at once, without waiting for the end of input


HTTP = [
    (True, [b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"]),  # pipelined
    (False, [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", b"loHTTP/1.1 404 Not Found\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"]),
    (True, [b"HEAD /c HTTP/1.1\r\n\r\n"]),
    (False, [b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n"]),  # HEAD: no body follows
    (True, [b"POST /d HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"]),
    (False, [b"HTTP/1.1 100 Continue\r\n\r\n"]),
    (True, [b"body"]),
    (False, [b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"]),
]  # fmt: skip


def test_http_on_an_unusual_port_by_content() -> None:
    m = run(conversation(HTTP))
    assert {PROTOCOLS[p] for p in m.proto.tolist()} == {"http"}
    calls = [i for i, o in enumerate(m.op.tolist()) if o == 0]
    rets = [i for i, o in enumerate(m.op.tolist()) if o == 1]
    assert [m.label[i] for i in calls] == ["GET /a", "GET /b", "HEAD /c", "POST /d"]
    assert len(rets) == 4  # the 100 Continue is not a return of its own
    assert [int(m.id[i]) for i in calls] == [int(m.id[i]) for i in rets]
    assert [m.label[i] for i in rets] == ["GET /a", "GET /b", "HEAD /c", "POST /d"]


def test_redis_pipelining() -> None:
    m = run(conversation([(True, [b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"]),
                          (False, [b"+PONG\r\n$3\r\nval\r\n"])]))  # fmt: skip
    assert ops(m) == ["call", "call", "return", "return"]
    assert list(m.label) == ["PING", "GET", "PING", "GET"]


@pytest.mark.parametrize("port", [80, 6379, 5432, 3306, 11211, 53, 50051])
def test_garbage_on_a_known_port_falls_back_to_turns(port: int) -> None:
    garbage = [(True, [bytes(range(7, 47))]), (False, [bytes(range(140, 190))])]
    m = run(conversation(garbage, sport=port))
    assert ops(m) == ["call", "return"]
    assert {PROTOCOLS[p] for p in m.proto.tolist()} == {"tcp"}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 2**32 - 1), st.integers(0, 255), st.binary(max_size=40)),
        max_size=30,
    ),
    st.integers(1, 7),
)
def test_fuzz_assembler_never_escapes(segs: list[tuple[bool, int, int, bytes]], batch: int) -> None:
    pk = [pkt(i, c, seq, flags, data) for i, (c, seq, flags, data) in enumerate(segs)]
    m = run(pk, batch=batch)
    assert np.all(m.nbytes >= 0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.randoms(use_true_random=False))
def test_shuffled_segments_and_any_isn_give_the_same_boundaries(isn: int, rnd: random.Random) -> None:
    pk = conversation(GENERIC)
    ref = run(pk)
    # shift the sequence space (wraps around 2^32) and reorder within each turn
    moved = []
    for ts, raw in pk:
        ip = dpkt.ip.IP(raw)
        ip.data.seq = (ip.data.seq + isn) % 2**32
        ip.data.sum = 0
        moved.append((ts, bytes(ip)))
    last_turn = moved[-5:-2]
    rnd.shuffle(last_turn)
    moved[-5:-2] = last_turn
    got = run(moved)
    assert ops(got) == ops(ref)
    assert got.nbytes.tolist() == ref.nbytes.tolist()


def test_idle_split_records_of_one_connection_do_not_share_ids() -> None:
    # A connection seen mid-way goes quiet for longer than the idle timeout, then talks again:
    # two records of one port pair; their calls must keep distinct ids.
    first = conversation(GENERIC, syn=False)[:-2]
    later = [(t + 10**12, raw) for t, raw in conversation(GENERIC[2:], syn=False)[:-2]]
    moved = []
    for ts, raw in later:
        ip = dpkt.ip.IP(raw)
        ip.data.seq = (ip.data.seq + 100) % 2**32
        moved.append((ts, bytes(ip)))
    other = [(t + 5 * 10**11, raw) for t, raw in conversation(GENERIC, cport=41000)]  # time moves on
    dec, fa = Decoder(), FlowAssembler(idle_timeout_ns=10**9)
    m1 = fa.feed(dec.decode(PacketBatch.from_packets(first, 101)))
    m2 = fa.feed(dec.decode(PacketBatch.from_packets(other, 101)))
    assert len(m1) + len(m2) == 4 + 4  # the quiet connection was processed as idle
    m3 = fa.feed(dec.decode(PacketBatch.from_packets(moved, 101)), final=True)
    m = Messages.concat([m1, m2, m3])
    mine = m.sport[m.op == 0] == 40000
    calls = m.id[m.op == 0][mine].tolist()
    assert len(calls) == 3
    assert len(set(calls)) == 3


@pytest.mark.parametrize("late", ["server data", "client data", "client FIN"])
def test_a_retransmission_after_both_fins_in_a_later_batch_is_not_a_new_connection(late: str) -> None:
    pk = conversation(GENERIC)
    t_end = pk[-1][0]
    # A copy of a segment sent before the close arrives after it, in the next batch.
    copy = {"server data": pk[-3], "client data": pk[2], "client FIN": pk[-2]}[late]
    ref = run(pk)
    dec, fa = Decoder(), FlowAssembler()
    first = fa.feed(dec.decode(PacketBatch.from_packets(pk, 101)), final=False)
    second = fa.feed(dec.decode(PacketBatch.from_packets([(t_end + 50, copy[1])], 101)), final=True)
    m = Messages.concat([first, second])
    assert ops(m) == ops(ref)
    assert m.nbytes.tolist() == ref.nbytes.tolist()
    assert fa.stats.connections == 1
    assert fa.stats.after_close == 1
    assert fa.stats.retransmitted == 0


def test_a_new_connection_without_syn_on_closed_ports_is_still_one() -> None:
    # Same ports, no SYN seen, sequence numbers far from the closed connection's.
    pk = conversation(GENERIC)
    later = conversation([(True, [b"again"]), (False, [b"ok"])], syn=False, t0=pk[-1][0] + 100, isn=9_000_000)
    dec, fa = Decoder(), FlowAssembler()
    first = fa.feed(dec.decode(PacketBatch.from_packets(pk, 101)), final=False)
    second = fa.feed(dec.decode(PacketBatch.from_packets(later, 101)), final=True)
    assert ops(Messages.concat([first, second])) == ["call", "return", "call", "return", "call", "return"]
    assert fa.stats.connections == 2


# ---- finished turns of connections still open --------------------------------------------------
def _pg_query(i: int) -> tuple[bytes, bytes]:
    sql = b"SELECT name, price FROM items WHERE id = %05d\x00" % i
    tag = b"SELECT 1\x00"
    done = b"C" + (4 + len(tag)).to_bytes(4, "big") + tag + b"Z" + (5).to_bytes(4, "big") + b"I"
    return b"Q" + (4 + len(sql)).to_bytes(4, "big") + sql, done


KEEP_ALIVE = {  # protocol: (server port, the i-th request and its answer)
    "tcp": (7777, lambda i: (b"query %05d " % i + bytes(range(30)), b"answer %05d " % i + bytes(range(50)))),
    "http": (8080, lambda i: (b"GET /item/%d HTTP/1.1\r\nHost: shop\r\n\r\n" % i,
                              b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nitem")),
    "redis": (6379, lambda i: (b"*2\r\n$3\r\nGET\r\n$12\r\nitem:%07d\r\n" % i,
                               b"$24\r\n" + b"v" * 24 + b"\r\n")),
    "postgresql": (5432, _pg_query),
}  # fmt: skip


def keep_alive(proto: str, turns: int, **kw) -> list:
    """Packets of a connection that makes ``turns`` calls and stays open."""
    port, message = KEEP_ALIVE[proto]
    pairs = [message(i) for i in range(turns)]
    return conversation([t for q, r in pairs for t in ((True, [q]), (False, [r]))], sport=port, **kw)[:-2]


def fed(packets: list, *, batch: int = 1) -> tuple[Messages, Messages, FlowAssembler]:
    """The messages an assembler gives before the end of input and all it gives, fed
    ``batch`` packets at a time."""
    dec, fa = Decoder(), FlowAssembler()
    early = [
        fa.feed(dec.decode(PacketBatch.from_packets(packets[i : i + batch], 101)))
        for i in range(0, len(packets), batch)
    ]
    rest = fa.feed(dec.decode(PacketBatch.from_packets([], 101)), final=True)
    return Messages.concat(early), Messages.concat([*early, rest]), fa


def same(a: Messages, b: Messages) -> bool:
    cols = ("ts_ns", "op", "id", "has_id", "nbytes", "flow", "proto", "label", "src_lo", "sport")
    return len(a) == len(b) and all(np.array_equal(getattr(a, c), getattr(b, c)) for c in cols)


@pytest.mark.parametrize("proto", list(KEEP_ALIVE))
@pytest.mark.parametrize("batch", [1, 5])
def test_finished_turns_of_an_open_connection_come_out_at_once(proto: str, batch: int) -> None:
    pk = keep_alive(proto, 40)
    ref = run(pk)
    assert {PROTOCOLS[p] for p in ref.proto.tolist()} == {proto}
    assert len(ref) == 80
    early, m, fa = fed(pk, batch=batch)
    assert same(m, ref)
    # Held at the end of input: at most the last two calls and their returns (a parsed
    # reply is final once the next one begins).
    assert len(early) >= len(ref) - 4
    assert same(early, ref.take(np.arange(len(early))))
    assert fa.stats.connections == 1
    assert fa.stats.flows_by_proto == {proto: 1}
    assert fa.stats.messages_by_proto == {proto: 80}


def test_an_open_connection_without_syn_is_released_by_its_ports() -> None:
    pk = keep_alive("http", 30, syn=False)
    early, m, _ = fed(pk)
    assert same(m, run(pk))
    assert len(early) >= len(m) - 4


def test_a_hole_holds_the_turns_after_it() -> None:
    pk = keep_alive("tcp", 30)
    del pk[10]  # a client segment lost: a late copy could still fill the hole
    ref = run(pk)
    early, m, fa = fed(pk)
    assert same(m, ref)
    assert fa.stats.gaps == 1
    hole_at = pk[10][0]
    assert (early.ts_ns < hole_at).all()  # nothing after the hole before the end


@pytest.mark.parametrize("which", ["client", "server", "syn"])
def test_a_late_copy_of_released_bytes_changes_nothing(which: str) -> None:
    pk = keep_alive("redis", 40)
    copy = {"client": pk[4], "server": pk[5], "syn": pk[0]}[which]  # the second call, its return, the SYN
    late = [*pk[:70], (pk[69][0] + 1, copy[1]), *pk[70:]]
    ref = run(late)
    before, _, _ = fed(late[:70])
    assert copy[0] in before.ts_ns.tolist() or which == "syn"  # released before the copy came
    _, m, fa = fed(late)
    assert same(m, ref)
    assert fa.stats.connections == 1
    assert fa.stats.retransmitted == (0 if which == "syn" else 1)


def test_late_copies_of_several_released_segments_are_retransmissions() -> None:
    pk = keep_alive("tcp", 30)
    t = pk[49][0]
    late = [*pk[:50], (t, pk[4][1]), (t, pk[8][1]), *pk[50:]]  # two copies, long after their turns
    _, m, fa = fed(late)
    assert same(m, run(late))
    assert fa.stats.retransmitted == 2


def test_a_connection_the_parser_read_stays_with_it() -> None:
    # A chunked response sends the whole connection to the parser, which orders the
    # messages of one timestamp otherwise than the bulk check of turns: a later request
    # sent in the same microsecond as the response before it keeps the parser's order.
    pk = keep_alive("http", 30)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nitem\r\n0\r\n\r\n"
    port, message = KEEP_ALIVE["http"]
    pairs = [message(i) for i in range(30)]
    pairs[3] = (pairs[3][0], chunked)
    pk = conversation([t for q, r in pairs for t in ((True, [q]), (False, [r]))], sport=port)[:-2]
    pk[52] = (pk[51][0], pk[52][1])  # request 25 at the time of response 24
    ref = run(pk)
    early, m, _ = fed(pk)
    assert same(m, ref)
    assert len(early) >= len(ref) - 4


def test_pairing_in_time_order_once_a_gap_comes() -> None:
    # A return seen before its call (a second capture interface's skew) pairs with it in
    # order, but in time order once a gap (a lost segment, later) makes the connection's
    # pairing go by time: the turns released before the gap must pair as the whole would.
    pk = keep_alive("redis", 30)
    pk[12], pk[13] = (pk[12][0], pk[13][1]), (pk[13][0], pk[12][1])  # response 5 before request 5
    del pk[50]  # request 24 lost
    ref = run(pk)
    _, m, fa = fed(pk)
    assert same(m, ref)
    assert fa.stats.gaps == 1


def test_pairing_in_time_order_goes_on_after_a_release() -> None:
    # A push the server sends unasked (a send, not a return) makes the connection pair in
    # time order; turns released after it leave that to the later ones, where a return
    # seen before its call answers nothing, as in the whole connection.
    port, message = KEEP_ALIVE["redis"]
    turns = [t for q, r in (message(i) for i in range(30)) for t in ((True, [q]), (False, [r]))]
    turns[7] = (False, [turns[7][1][0], b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"])
    pk = conversation(turns, sport=port)[:-2]
    pk[43], pk[44] = (pk[43][0], pk[44][1]), (pk[44][0], pk[43][1])  # response 20 before request 20
    ref = run(pk)
    assert (ref.op == 2).sum() == 1
    early, m, _ = fed(pk)
    assert len(early) > 20  # turns were released before the swapped ones
    assert same(m, ref)


# ---- the store of closed connections ------------------------------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"), st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10**6)), max_size=12)
        ),
        st.tuples(st.just("forget"), st.integers(0, 10**6)),
        st.tuples(st.just("drop"), st.lists(st.integers(0, 40), max_size=5)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_closed_store_behaves_as_a_dict(ops: list) -> None:
    """The store of closed connections (sorted levels) against a plain dict: a key closed
    again keeps its newest entry, forgetting by time and dropping hide entries at once,
    and levels merged into larger ones (here from 2 entries up) change nothing."""
    import capture.flows as flows

    saved = flows._FIRST_LEVEL
    flows._FIRST_LEVEL = 2
    try:
        store, model, cutoff = flows._Closed(), {}, -(1 << 62)
        for step, (op, arg) in enumerate(ops):
            if op == "add" and arg:
                keys = np.array([k for k, _ in arg], np.uint64)
                ats = np.array([t for _, t in arg], np.int64)
                ends = np.stack([ats + step, ats - step], axis=1)
                store.add(keys, ends, ats)
                for k, t in arg:  # the last of a key in a batch is its newest
                    model[k] = ((t + step, t - step), t)
            elif op == "forget":
                cutoff = max(cutoff, arg)
                store.forget(arg)
            elif op == "drop":
                rows = store.find(np.array(arg, np.uint64))
                store.drop(rows)
                for k in arg:
                    model.pop(k, None)
            model = {k: v for k, v in model.items() if v[1] >= cutoff}
            probe = np.arange(41, dtype=np.uint64)
            rows = store.find(probe)
            assert {int(k) for k, r in zip(probe, rows, strict=True) if r >= 0} == set(model)
            for k, r in zip(probe.tolist(), rows.tolist(), strict=True):
                if r >= 0:
                    assert store.entry(r) == model[k]
    finally:
        flows._FIRST_LEVEL = saved
