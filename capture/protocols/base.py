"""What every protocol module shares: the message tuple, the no-reply key, the shapes of
a parser and of a detection test."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FOUND_HEADERS", "NO_REPLY", "WANT_HEADERS", "Detector", "Message", "Parser", "ReturnLabel"]

#: (offset, length, label, key) of one message in a run of stream bytes. A return's label
#: is its status where its protocol gives one (``Protocol.statuses``): the label itself
#: (``200``, ``ERROR 42P01``), or a :class:`ReturnLabel`'s ``status``; the caller keeps
#: that apart and labels the return like its call.
Message = tuple[int, int, str | None, int | None]


class ReturnLabel(str):
    """A return's label that is not its status, with its status beside it: for a parser
    that knows a return's call (HTTP/2, whose stream names it) and labels the return like
    it. The text is the label; ``status`` the status (``capture.flows.return_statuses``).

    Examples
    --------
    >>> label = ReturnLabel("POST /greet.Greeter/Hello", "UNAVAILABLE")
    >>> label == "POST /greet.Greeter/Hello", label.status
    (True, 'UNAVAILABLE')
    >>> import copy; copy.deepcopy(label).status
    'UNAVAILABLE'
    """

    status: str

    def __new__(cls, text: str, status: str) -> ReturnLabel:
        label = super().__new__(cls, text)
        label.status = status
        return label

    def __reduce__(self) -> tuple:
        return ReturnLabel, (str(self), self.status)


#: Key of a message that expects no answer by protocol: written as a ``send``.
NO_REPLY = -1
#: ``(bytes, direction, ctx, out)``: appends the messages it finds in one gap-free run of
#: one direction (0 client, 1 server) to ``out`` as it finds them and returns ``out``;
#: ``ctx`` is the connection's state, kept from run to run and direction to direction.
Parser = Callable[[bytes, int, dict, list[Message]], list[Message]]
#: ``(client, server, client port, server port)``: whether a connection whose first bytes
#: each way (up to 256, either may be empty) are these is of the protocol.
Detector = Callable[[bytes, bytes, int, int], bool]
#: ``ctx`` keys of a parser that can tell the header fields of its messages (HTTP/2): the
#: caller sets ``ctx[WANT_HEADERS]`` to the lower-case names it wants (a frozenset of
#: bytes); the parser leaves under ``ctx[FOUND_HEADERS]``, for the messages of the run it
#: just read, ``{offset: [(name, value), ...]}`` (the first header block of each message),
#: which the caller takes away after each run. Nothing is kept unless asked for.
WANT_HEADERS = "want-headers"
FOUND_HEADERS = "found-headers"
