"""The one stream accumulator: what a chunk, a gap, TTFT and a finished stream are."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlq2sql.transport.stream import Accumulator, Completion, NotAnEventStream, StreamEventError


def ev(content: str | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    if usage is not None:
        return {"choices": [], "usage": usage}
    return {"choices": [{"index": 0, "delta": {"content": content} if content is not None else {},
                         "finish_reason": finish}]}


def test_counts_gaps_usage_and_text() -> None:
    acc = Accumulator(Completion())
    for e in (ev(""), ev('{"a"'), ev(":1"), ev("}"), ev(None, "stop"),
              ev(usage={"prompt_tokens": 7, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 5}})):
        acc.event(e)
    out = acc.end()
    assert out.text == '{"a":1}' and out.finish_reason == "stop"
    assert out.chunks == 6 and acc.content_chunks == 3  # every event vs the ones carrying text
    assert (out.prompt_tokens, out.completion_tokens, out.cached_tokens) == (7, 3, 5)
    assert out.ttft_s is not None and out.latency_s is not None and out.ttft_s <= out.latency_s
    assert out.itl_mean_s is not None and out.itl_max_s is not None and out.itl_max_s >= out.itl_mean_s


def test_unfinished_and_empty_streams_are_errors() -> None:
    acc = Accumulator(Completion())
    acc.event(ev("x"))
    with pytest.raises(StreamEventError, match="finish_reason"):
        acc.end()
    with pytest.raises(NotAnEventStream, match="text/html"):
        Accumulator(Completion()).end("text/html")
    # A probe that disconnects on purpose does not need a finish.
    assert Accumulator(Completion()).end(require_finish=False).text == ""


def test_error_events_and_non_objects() -> None:
    with pytest.raises(StreamEventError, match="boom"):
        Accumulator(Completion()).event({"error": {"message": "boom"}})
    with pytest.raises(ValueError, match="not a JSON object"):
        Accumulator(Completion()).event([1, 2])


def test_sse_reader_yields_data_objects_up_to_done() -> None:
    import asyncio

    from nlq2sql.transport.stream import sse_events

    async def body(lines: list[bytes]):  # type: ignore[no-untyped-def]
        for x in lines:
            yield x

    async def read(lines: list[bytes]) -> list[object]:
        return [obj async for obj in sse_events(body(lines))]

    lines = [b": keep-alive\n", b"event: message\n", b'data: {"a":1}\n', b"\n", b'data:{"b":2}\r\n',
             b"data: [DONE]\n", b'data: {"after":"done"}\n']
    assert asyncio.run(read(lines)) == [{"a": 1}, {"b": 2}]
    with pytest.raises(ValueError):
        asyncio.run(read([b"data: {not json\n"]))


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12), final_newline=st.booleans())
def test_sse_reader_reads_the_same_events_however_the_body_is_cut(cuts: list[int], final_newline: bool) -> None:
    """``iter_any`` hands over whatever one read returned: the events must not depend on it."""
    import asyncio

    from nlq2sql.transport.stream import sse_events

    body = (b': keep-alive\r\n\r\ndata: {"a":1,"s":"x\\ny"}\n\nevent: message\ndata:{"b":[2,3]}\r\n\r\n'
            b'data: {"c":null}\n\ndata: [DONE]\n\ndata: {"after":"done"}')
    if not final_newline:
        body = body[:body.index(b"data: [DONE]")] + b'data: {"last":true}'
    points = sorted({min(c, len(body)) for c in cuts})
    pieces = [body[i:j] for i, j in zip([0, *points], [*points, len(body)], strict=True)]

    async def gen():  # type: ignore[no-untyped-def]
        for p in pieces:
            yield p

    async def read() -> list[object]:
        return [obj async for obj in sse_events(gen())]

    head = [{"a": 1, "s": "x\ny"}, {"b": [2, 3]}, {"c": None}]
    assert asyncio.run(read()) == (head if final_newline else [*head, {"last": True}])


def test_event_json_python_accepts_is_still_read() -> None:
    """msgspec refuses NaN/Infinity; Python's JSON reads them: the fallback keeps both alike."""
    from nlq2sql.transport.stream import decode_event

    assert decode_event(b'{"logprob":-Infinity}') == {"logprob": float("-inf")}
    assert decode_event(b'{"choices":[{"delta":{"content":"x"}}]}') == {"choices": [{"delta": {"content": "x"}}]}
    with pytest.raises(ValueError):
        decode_event(b'{"a":')
