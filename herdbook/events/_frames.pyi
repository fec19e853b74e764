"""The compiled run cut (``_frames.c``); see ``backlog_reader._cut``."""

def cut(buffer: bytearray, pos: int, head: bytes, /) -> tuple[
    list[tuple[bytes, int, bytes | bytearray]], int, int]: ...
