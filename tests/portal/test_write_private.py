"""Uploads kept on disk (a large HAR, a result file): owner-only, whole or not at all (portal.common.write_private)."""

import pytest

from portal.common import write_private


def test_chunks_are_written_owner_only_and_counted(tmp_path):
    path = tmp_path / "upload.har"

    size = write_private(path, iter([b"abc", b"", b"defg"]))

    assert (size, path.read_bytes()) == (7, b"abcdefg")
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["upload.har"]


def test_an_upload_broken_off_leaves_nothing_behind(tmp_path):
    def chunks():
        yield b"a" * 1000
        raise ConnectionResetError("the client went away")

    with pytest.raises(ConnectionResetError):
        write_private(tmp_path / "upload.jtl", chunks())

    assert list(tmp_path.iterdir()) == []


def test_a_reader_sees_the_old_file_or_the_new_one(tmp_path):
    path = tmp_path / "state.json"
    write_private(path, b"old")

    def chunks():
        yield b"new, half"
        assert path.read_bytes() == b"old"  # mid-write: the old file, whole
        yield b" and the rest"

    write_private(path, chunks())
    assert path.read_bytes() == b"new, half and the rest"
