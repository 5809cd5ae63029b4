"""Result files are written whole or not at all (report/outputs.py)."""

from pathlib import Path

import pytest

from slurm_shockwave.report.outputs import replacing, write_text


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
