"""Result files are written whole or not at all (report/outputs.py)."""

import os
import stat
from pathlib import Path

import pytest

from slurm_shockwave.report.outputs import as_set, replacing, write_text


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "r.csv"
    target.write_text("old\n")
    with pytest.raises(OSError), replacing(target) as tmp:
        tmp.write_text("half")
        raise OSError(28, "No space left on device")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]
    write_text(target, "new\n")
    assert target.read_text() == "new\n" and len(list(tmp_path.iterdir())) == 1


def test_a_symlink_is_written_through_not_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, "{}\n")
    assert link.is_symlink() and real.read_text() == "{}\n"


def test_the_target_keeps_its_mode_and_a_new_file_gets_the_umasks(tmp_path: Path) -> None:
    private = tmp_path / "private.csv"
    private.write_text("old\n")
    private.chmod(0o600)
    write_text(private, "new\n")
    assert private.read_text() == "new\n" and stat.S_IMODE(private.stat().st_mode) == 0o600
    fresh = tmp_path / "fresh.csv"
    write_text(fresh, "x\n")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask


def test_hard_links_fifos_and_devices_are_written_in_place(tmp_path: Path) -> None:
    first = tmp_path / "a.csv"
    first.write_text("old\n")
    other = tmp_path / "b.csv"
    os.link(first, other)
    write_text(first, "new\n")
    assert other.read_text() == "new\n"
    with replacing(Path("/dev/null")) as target:
        assert target == Path("/dev/null")
    assert Path("/dev/null").is_char_device()


def test_a_folder_without_room_for_a_temporary_is_written_in_place(tmp_path: Path) -> None:
    """The name plus the temporary's prefix and suffix is over 255 bytes: the target
    itself is written, as before (the same path as a read-only folder's)."""
    target = tmp_path / ("r" * 250 + ".csv")
    write_text(target, "x\n")
    assert target.read_text() == "x\n" and len(list(tmp_path.iterdir())) == 1


def test_an_error_names_the_target_not_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "t.csv"
    target.write_text("old\n")
    with pytest.raises(OSError) as caught, replacing(target) as tmp:
        tmp.unlink()  # the rename then fails on the temporary's name
    assert caught.value.filename == str(target) and target.read_text() == "old\n"


def test_a_missing_folder_is_the_targets_error(tmp_path: Path) -> None:
    target = tmp_path / "gone" / "t.csv"
    with pytest.raises(FileNotFoundError) as caught:
        write_text(target, "x\n")
    assert caught.value.filename == str(target)


def test_a_set_replaces_every_file_or_none(tmp_path: Path) -> None:
    """Inside as_set() the renames wait for the block's end: a failed write of the
    second file keeps the first one's old content too, and leaves no temporary."""
    first, second = tmp_path / "a.json", tmp_path / "b.csv"
    first.write_text("old a\n")
    second.write_text("old b\n")
    with pytest.raises(OSError) as caught, as_set():
        write_text(first, "new a\n")
        assert first.read_text() == "old a\n"  # not yet renamed
        with replacing(second) as tmp:
            tmp.write_text("half")
            raise OSError(28, "No space left on device", str(tmp))
    assert caught.value.filename == str(second)
    assert (first.read_text(), second.read_text()) == ("old a\n", "old b\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.csv"]
    with as_set():
        write_text(first, "new a\n")
        with as_set():  # joins the outer set
            write_text(second, "new b\n")
        assert second.read_text() == "old b\n"
    assert (first.read_text(), second.read_text()) == ("new a\n", "new b\n")
    assert len(list(tmp_path.iterdir())) == 2


def test_a_write_that_fails_inside_a_set_cancels_it_even_when_caught(tmp_path: Path) -> None:
    """The review's finds: a caught error used to leave its half-written temporary to be
    renamed at the set's end, under the temporary's name; a path written twice kept its
    first content."""
    target, other = tmp_path / "t.csv", tmp_path / "o.csv"
    target.write_text("old\n")
    with as_set():
        write_text(other, "new\n")
        try:
            with replacing(target) as tmp:
                tmp.write_text("half")
                raise OSError(28, "No space left on device", str(tmp))
        except OSError as exc:
            assert exc.filename == str(target)
    assert target.read_text() == "old\n" and not other.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]
    with as_set():
        write_text(target, "first\n")
        write_text(target, "second\n")
    assert target.read_text() == "second\n" and len(list(tmp_path.iterdir())) == 1


def test_the_set_renames_its_first_file_last(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A rename that fails among the set's leaves the later files new and the first one
    old, so a new first file (compare's results.json) means the whole set is new."""
    files = [tmp_path / n for n in ("results.json", "a.csv", "b.png")]
    for f in files:
        f.write_text("old\n")
    real, calls = os.replace, []

    def flaky(src: object, dst: object) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(16 + 2, "Invalid cross-device link", str(src))  # EXDEV: copied
        if len(calls) == 3:
            raise OSError(13, "Permission denied", str(src))
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(OSError) as caught, as_set():
        for f in files:
            write_text(f, "new\n")
    assert calls == [files[2], files[1], files[0]]
    assert caught.value.filename == str(files[0])
    assert [f.read_text() for f in files] == ["old\n", "new\n", "new\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.name for f in files)
