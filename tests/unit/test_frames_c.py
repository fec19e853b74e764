"""The compiled cut (``herdbook.events._frames``, optional) gives exactly the frames, the
pending count and the end the Python one gives (``narrow_parser._cut_py``), for any
buffer: whole runs, runs cut short anywhere, other sids, consumers and statuses, bodies
and headers holding anything (CR LF, "HMSG "), sequences that go back, numbers of every
length it takes; it only reads inside the buffer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from herdbook.events import narrow_parser
from herdbook.events.narrow_parser import _cut_py, run_of
from tests.conftest import compiled_cut

compiled_cut()   # tests/conftest.py builds it where there is a compiler (else skip, and say why)
from herdbook.events import _frames as frames_c  # noqa: E402

SID, STREAM, CONSUMER = 7, "HERD_EVENTS", "herd-backlog-0123abcd"
RUN = run_of(SID, STREAM, CONSUMER, lambda frames, pending: None)

numbers = st.integers(min_value=0, max_value=10**19 - 1)   # 19: a timestamp in ns
subjects = st.binary(min_size=1, max_size=12).filter(
    lambda b: not any(c in b for c in b" \r\n")) | st.sampled_from(
    [b"herd.node.n1.approved", b"herd.alloc.n-2.a1.placed"])


@st.composite
def frame(draw: st.DrawFn) -> bytes:
    """A delivery, mostly of the reader's consumer, sometimes not (another sid, consumer,
    a status, a reply with a domain), with a size that may lie."""
    subject = draw(subjects)
    body = draw(st.binary(max_size=40) | st.sampled_from([b"HMSG x 7 \r\n", b"\r\n\r\n"]))
    headers = draw(st.none() | st.binary(max_size=30).map(lambda h: b"NATS/1.0\r\n" + h + b"\r\n\r\n"))
    sid = draw(st.sampled_from([SID, SID, SID, 8]))
    consumer = draw(st.sampled_from([CONSUMER, CONSUMER, CONSUMER, "other"]))
    seq = draw(st.integers(min_value=0, max_value=60) | numbers)
    reply = b"$JS.ACK.%s.%s.%d.%d.%d.%d.%d" % (
        STREAM.encode(), consumer.encode(), draw(numbers), seq, draw(numbers), draw(numbers),
        draw(numbers))
    reply = draw(st.sampled_from([reply, reply, reply, b"", b"$JS.ACK.dom.acc." + reply[8:]]))
    size = len(body) + (len(headers) if headers else 0)
    size += draw(st.sampled_from([0, 0, 0, 0, 1, -1, 10**17, 10**19 - 1]))
    if headers is None:
        line = b"MSG %s %d %s %d\r\n" % (subject, sid, reply, max(size, 0))
    else:
        line = b"HMSG %s %d %s %d %d\r\n" % (subject, sid, reply, len(headers), max(size, 0))
    return line + (headers or b"") + body + b"\r\n"


def both(buf: bytearray, pos: int) -> tuple[object, object]:
    def plain(result: tuple[list[tuple[bytes, int, bytearray]], int, int]) -> object:
        frames, pending, end = result
        return [(s, q, bytes(d)) for s, q, d in frames], pending, end
    return plain(frames_c.cut(buf, pos, RUN.head)), plain(_cut_py(buf, pos, RUN))


@settings(max_examples=400, deadline=None)
@given(st.lists(frame(), max_size=8), st.data())
def test_the_compiled_cut_is_the_python_cut(deliveries: list[bytes], data: st.DataObject) -> None:
    whole = b"".join(deliveries) + data.draw(st.sampled_from([b"", b"PING\r\n", b"HMSG "]))
    buf = bytearray(whole[:data.draw(st.integers(min_value=0, max_value=len(whole)))])
    pos = data.draw(st.integers(min_value=0, max_value=min(len(buf), 3)) | st.just(0))
    compiled, python = both(buf, pos)
    assert compiled == python


def test_a_long_number_ends_the_compiled_run_and_goes_frame_by_frame() -> None:
    """The one difference: more than 19 digits. The Python cut takes such a frame, the
    compiled one leaves it to the per-frame path (which parses any number)."""
    long = b"HMSG s %d $JS.ACK.%s.%s.1.%d.1.1.0 0 2\r\nok\r\n" % (
        SID, STREAM.encode(), CONSUMER.encode(), 10**20)
    frames, _, end = frames_c.cut(bytearray(long), 0, RUN.head)
    assert frames == [] and end == 0
    assert _cut_py(bytearray(long), 0, RUN)[0] == [(b"s", 10**20, bytearray(b"ok"))]


def test_the_reader_cuts_with_the_compiled_one_when_it_is_there() -> None:
    buf = bytearray(b"MSG s %d $JS.ACK.%s.%s.1.5.1.1.3 2\r\nok\r\n" % (
        SID, STREAM.encode(), CONSUMER.encode()))
    assert narrow_parser._c_cut is frames_c.cut
    assert narrow_parser._cut(buf, 0, RUN) == ([(b"s", 5, bytearray(b"ok"))], 3, len(buf))
