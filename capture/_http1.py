"""HTTP/1.x turns checked in bulk: is each turn exactly one message, and its label.

A connection whose every turn is one whole request or response (no pipelining, no
chunking) needs no stream parser: :func:`check_turns` decides that for all turns of a
batch at once. The bytes that matter (line feeds, carriage returns, ``?``, bytes above
127) are located with one numpy pass over the stream each, the rare ``chunked`` with
``bytes.find``; every turn then looks up its header end, first line, ``Content-Length``
and ``chunked`` by binary search among them, and compares a few bytes at a time as
8-byte words read at any offset. A turn the bulk check cannot settle exactly the way
:func:`check_turn` would (an odd length value, a non-ASCII path, a request line without
a version) goes through :func:`check_turn` itself, which is the reference: the tests
compare the two on every turn of the shared captures.

:func:`starts_with_method` is the bulk form of the first test of
:func:`capture.protocols.detect_tcp`: a client whose first bytes are a request line.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from capture._spans import join_spans, native

__all__ = ["check_turn", "check_turns", "starts_with_method"]

#: Methods whose turns the bulk check takes (the others go to the stream parser).
TURN_METHODS = (b"GET", b"POST", b"PUT", b"DELETE", b"HEAD", b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE")
_TURN_METHODS = frozenset(TURN_METHODS)
_CL = b"Content-Length:"


def check_turn(stream: bytes, a: int, b: int, is_call: bool) -> tuple[bool, str | None]:
    """Whether ``stream[a:b]`` is exactly one HTTP/1.x request (``is_call``) or response
    with a body of known length, and its label: ``METHOD /path`` (query left out) for a
    request, the status code for a response.

    Examples
    --------
    >>> check_turn(b"GET /a?x=1 HTTP/1.1\\r\\nHost: h\\r\\n\\r\\n", 0, 32, True)
    (True, 'GET /a')
    >>> r = b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nhi"
    >>> check_turn(r, 0, len(r), False), check_turn(r, 0, len(r) - 1, False)[0]
    ((True, '200'), False)
    """
    find = stream.find
    h = find(b"\r\n\r\n", a, b)
    if h < 0:
        return False, None
    end = h + 4
    eol = find(b"\r\n", a, end)
    if is_call:
        sp = find(b" ", a, eol)
        if sp < 0 or stream[a:sp] not in _TURN_METHODS:
            return False, None
        path = stream[sp + 1 : eol].rsplit(b" HTTP/", 1)[0][:200].split(b"?", 1)[0]
        label = f"{stream[a:sp].decode()} {path.decode('utf-8', 'replace')}"
    elif (
        stream[a : a + 7] != b"HTTP/1."
        or stream[a + 9 : a + 10] in (b"1",)
        or stream[a + 9 : a + 12] in (b"204", b"304")
        or not stream[a + 9 : a + 12].isdigit()
        or len(stream[a + 9 : a + 12]) < 3
    ):
        return False, None
    else:
        label = stream[a + 9 : a + 12].decode("ascii", "replace")  # until a call claims it
    if find(b"hunked", eol, end) >= 0 or find(b"HUNKED", eol, end) >= 0:
        return False, label  # chunked (any case): the parser's business
    # The usual spelling first; any other case goes through a lower-cased copy.
    i = find(b"\nContent-Length:", eol, end)
    if i >= 0:
        j = find(b"\r", i, end)
        digits: bytes | None = stream[i + 16 : j]
    else:
        head = stream[eol:end].lower()
        i = head.find(b"\ncontent-length:")
        digits = head[i + 16 : head.find(b"\r", i + 16)] if i >= 0 else None
    if digits is None:
        cl = 0 if is_call else -1  # a response without a length runs to the close
    else:
        try:
            cl = int(digits)
        except ValueError:
            cl = -1
    return end + cl == b, label


def _first_at_or_after(pos: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each of ``at``, the first of the sorted positions ``pos`` at or after it, or
    a position past any stream (``2**62``) when there is none."""
    if not len(pos):
        return np.full(len(at), 1 << 62, np.int64)
    k = np.searchsorted(pos, at)
    return np.where(k < len(pos), pos[np.minimum(k, len(pos) - 1)], 1 << 62)


class _Words:
    """The 8 bytes at any offset of a stream as one little-endian uint64 (zeros past its
    end): comparing a few bytes at many offsets is one gather and one comparison."""

    def __init__(self, s: np.ndarray) -> None:
        self.n = len(s)
        padded = np.concatenate([s, np.zeros(16, np.uint8)])
        self._w = np.ndarray(shape=(self.n + 9,), dtype="<u8", buffer=padded, strides=(1,))

    def at(self, pos: np.ndarray) -> np.ndarray:
        return self._w[np.clip(pos, 0, self.n)]


def _const(word: bytes) -> tuple[np.uint64, np.uint64]:
    """(value, mask) of up to 8 bytes as :class:`_Words` reads them."""
    return np.uint64(int.from_bytes(word, "little")), np.uint64((1 << (8 * len(word))) - 1)


def _is(words: np.ndarray, word: bytes) -> np.ndarray:
    value, mask = _const(word)
    return (words & mask) == value


_FOLD = np.uint64(0x2020202020202020)


def _occurrences(stream: bytes, words: tuple[bytes, ...]) -> np.ndarray:
    """Where any of ``words`` starts in ``stream``, sorted (for words that are rare)."""
    found = []
    for word in words:
        at = stream.find(word)
        while at >= 0:
            found.append(at)
            at = stream.find(word, at + 1)
    return np.unique(np.array(found, np.int64))


def _labels(s: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``s[lo:hi].decode()`` of each span (ASCII), as an object array of str."""
    ln = hi - lo
    if not len(ln):
        return np.zeros(0, object)
    offsets = np.zeros(len(ln) + 1, np.int64)
    np.cumsum(ln, out=offsets[1:])
    data = join_spans(s, lo, ln)
    arr = pa.LargeStringArray.from_buffers(len(ln), pa.py_buffer(offsets), pa.py_buffer(data))
    enc = arr.dictionary_encode()
    return enc.dictionary.to_numpy(zero_copy_only=False)[enc.indices.to_numpy()]


def _content_length_lines(s: np.ndarray, w: _Words, lf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Line feeds followed by ``Content-Length:`` as spelled, and in any case."""
    lf = lf[(s[np.minimum(lf + 1, len(s) - 1)] | 0x20) == ord("c")]
    head, tail = w.at(lf + 1), w.at(lf + 9)
    exact = lf[_is(head, b"Content-") & _is(tail, b"Length:")]
    # Folding with 0x20 lowers letters but also turns a few other bytes into "-" or ":";
    # the few lines it finds are checked byte by byte as bytes.lower() would have them.
    v1, _ = _const(b"content-")
    v2, m2 = _const(b"length:")
    cand = lf[((head | _FOLD) == v1) & (((tail | _FOLD) & m2) == v2)]
    if len(cand):
        got = s[np.minimum(cand[:, None] + 1 + np.arange(15), len(s) - 1)]
        got = np.where((got >= 65) & (got <= 90), got | 0x20, got)
        cand = cand[(got == np.frombuffer(_CL.lower(), np.uint8)).all(axis=1)]
    return exact, cand


def check_turns(
    stream: bytes, lo: np.ndarray, hi: np.ndarray, is_call: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_turn` of every turn ``stream[lo[t]:hi[t]]``: (whole message, label).

    The labels of turns that are not whole messages are ``None`` or the label
    :func:`check_turn` gives them (callers use only those of whole messages). Compiled
    (``capture.native``) where it is built, else in numpy; the same answers.
    """
    if native is not None and len(lo) and stream:
        return _compiled_turns(stream, lo, hi, is_call)
    return _numpy_turns(stream, lo, hi, is_call)


def _compiled_turns(
    stream: bytes, lo: np.ndarray, hi: np.ndarray, is_call: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_turns` by ``capture.native.http_turns``: one pass per turn in C; the
    turns it leaves undecided (non-ASCII labels, unusual length values) go through
    :func:`check_turn`."""
    nt = len(lo)
    lo = np.require(lo, np.int64, "CA")  # contiguous and aligned, as native needs
    hi = np.require(hi, np.int64, "CA")
    verdict = np.empty(nt, np.uint8)
    label_lo, label_hi = np.empty(nt, np.int64), np.empty(nt, np.int64)
    calls = np.ascontiguousarray(is_call, bool).view(np.uint8)
    native.http_turns(stream, lo, hi, calls, verdict, label_lo, label_hi)
    ok = verdict == 1
    labels = np.full(nt, None, object)
    whole = np.flatnonzero(ok)
    labels[whole] = _labels(np.frombuffer(stream, np.uint8), label_lo[whole], label_hi[whole])
    for t in np.flatnonzero(verdict == 2).tolist():
        ok[t], labels[t] = check_turn(stream, int(lo[t]), int(hi[t]), bool(is_call[t]))
    return ok, labels


def _numpy_turns(
    stream: bytes, lo: np.ndarray, hi: np.ndarray, is_call: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_turns` in numpy passes over the whole stream."""
    # Longer than most: every check below reads the same byte positions (line feeds,
    # header ends, first lines) found in one pass; split, a dozen arrays would travel.
    nt = len(lo)
    ok = np.zeros(nt, bool)
    labels = np.full(nt, None, object)
    if not nt or not stream:
        return ok, labels
    s = np.frombuffer(stream, np.uint8)
    n = len(s)
    w = _Words(s)
    lf = np.flatnonzero(s == 10)
    cr = np.flatnonzero(s == 13)
    # Where each "\r\n" starts; "\r\n\r\n" ends a header.
    crlf = lf[lf >= 1] - 1
    crlf = crlf[s[crlf] == 13]
    blank = crlf[_is(w.at(crlf), b"\r\n\r\n")]
    h = _first_at_or_after(blank, lo)
    end = h + 4
    sure = end <= hi
    eol = _first_at_or_after(crlf, lo)  # the first line's end (at or before the blank line)
    unsure = np.zeros(nt, bool)
    first = w.at(lo)
    # Requests: "METHOD " at the start, the path up to the last " HTTP/" on the line
    # (looked for where a version ends the line), cut at 200 bytes and at the first "?".
    sp = np.full(nt, -1, np.int64)
    for m in TURN_METHODS:
        sp = np.where((sp < 0) & _is(first, m + b" "), lo + len(m), sp)
    req_ok = sure & is_call & (sp >= 0) & (sp < eol)
    version = w.at(eol - 9)
    # A " HTTP/" ending closer to the line's end would be the one rsplit takes.
    later = _is(version >> np.uint64(8), b" HTTP/") | _is(version >> np.uint64(16), b" HTTP/")
    later |= _is(w.at(eol - 6), b" HTTP/")
    path_end = eol - 9
    unsure |= req_ok & (~_is(version, b" HTTP/") | later | (path_end < sp + 1))
    path_end = np.minimum(path_end, sp + 1 + 200)
    q = _first_at_or_after(np.flatnonzero(s == 63), sp + 1)
    path_end = np.where(q < path_end, q, path_end)
    high = _first_at_or_after(np.flatnonzero(s >= 128), lo)
    unsure |= req_ok & (high < path_end)
    # Responses: "HTTP/1.", not 1xx, 204 or 304; the label is the status code.
    code = w.at(lo + 9)
    resp_ok = (
        sure & ~is_call & _is(first, b"HTTP/1.") & ~_is(code, b"1") & ~_is(code, b"204") & ~_is(code, b"304")
    )
    # A status code is three digits (0x30-0x39 each: high nibble 3, low nibble 9 at most).
    digits = ((code & np.uint64(0xF0F0F0)) == 0x303030) & (
        ((code + np.uint64(0x060606)) & np.uint64(0xF0F0F0)) == 0x303030
    )
    unsure |= resp_ok & ((lo + 12 > n) | ~digits)
    good = (req_ok | resp_ok) & ~unsure
    # "hunked" or "HUNKED" in the header: chunked, left to the parser.
    chunked = _first_at_or_after(_occurrences(stream, (b"hunked", b"HUNKED")), eol) + 6 <= end
    # Content-Length: the first line spelled so, else the first in any case.
    exact, anycase = _content_length_lines(s, w, lf)
    i_ex = _first_at_or_after(exact, eol)
    i_any = _first_at_or_after(anycase, eol)
    i = np.where(i_ex + 16 <= end, i_ex, np.where(i_any + 16 <= end, i_any, -1))
    has_cl = good & ~chunked & (i >= 0)
    c = np.flatnonzero(has_cl)
    ci = i[c] + 16
    width = _first_at_or_after(cr, ci) - ci
    # The usual form: blanks, 1 to 15 digits, blanks, at most 16 bytes in all.
    dw = np.stack([w.at(ci), w.at(ci + 8)], axis=1).view(np.uint8).reshape(-1, 16).astype(np.int64)
    inside = np.arange(16) < width[:, None]
    digit = (dw >= 48) & (dw <= 57) & inside
    blank_c = ((dw == 32) | (dw == 9)) & inside
    starts = digit & ~np.c_[np.zeros(len(c), bool), digit[:, :-1]]
    simple = (width <= 16) & (starts.sum(axis=1) == 1) & (digit | blank_c | ~inside).all(axis=1)
    value = np.zeros(len(c), np.int64)
    for col in range(16):
        value = np.where(digit[:, col], value * 10 + dw[:, col] - 48, value)
    unsure[c] |= ~simple
    cl = np.where(is_call, 0, -1)
    cl[c] = value
    ok = good & ~unsure & ~chunked & (end + cl == hi)
    # Labels: a request's is its bytes from the method to the path's end, a response's
    # its status code.
    lab_req = np.flatnonzero(good & ~unsure & is_call)
    labels[lab_req] = _labels(s, lo[lab_req], path_end[lab_req])
    lab_resp = np.flatnonzero(good & ~unsure & ~is_call)
    labels[lab_resp] = _labels(s, lo[lab_resp] + 9, lo[lab_resp] + 12)
    for t in np.flatnonzero(unsure).tolist():
        ok[t], labels[t] = check_turn(stream, int(lo[t]), int(hi[t]), bool(is_call[t]))
    return ok, labels


def starts_with_method(
    stream: bytes, at: np.ndarray, end: np.ndarray, methods: tuple[bytes, ...]
) -> np.ndarray:
    """Whether ``stream[at:end]`` starts with one of ``methods`` (at most 15 bytes) and a
    space: the first space, at most 16 bytes in (``detect_tcp``'s request test)."""
    hit = np.zeros(len(at), bool)
    if not len(at) or not stream:
        return hit
    w = _Words(np.frombuffer(stream, np.uint8))
    w0, w8 = w.at(at), w.at(at + 8)
    for m in methods:
        word = m + b" "
        this = _is(w0, word[:8]) & (at + len(word) <= end)
        if len(word) > 8:
            this &= _is(w8, word[8:])
        hit |= this
    return hit
