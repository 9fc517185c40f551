"""Which files a folder gives a run: every document under it in path order, what ``rglob`` would list."""

from __future__ import annotations

import os
from pathlib import Path

from extractor.engine.discover import discover, files_under


def tree(root: Path) -> Path:
    folder = root / "in"
    for name in ["a/x.md", "a.b/x.md", "a-/y.txt", "A/z.md", ".hidden/h.md", "deep/1/2/3/d.txt", "top.md",
                 "notes.zip", "data.json", "b/README"]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("Text.\n", encoding="utf-8")
    outside = root / "outside"
    outside.mkdir()
    (outside / "o.md").write_text("Outside.\n", encoding="utf-8")
    os.symlink(outside, folder / "linked")  # a symlinked folder is not entered
    os.symlink(folder / "top.md", folder / "alias.md")  # a symlinked file is a file
    os.symlink(folder / "gone.md", folder / "broken.md")  # a broken link is nothing
    return folder


def test_files_under_lists_what_rglob_lists_in_the_same_order(tmp_path: Path) -> None:
    folder = tree(tmp_path)
    expected = [path for path in sorted(folder.rglob("*")) if path.is_file()]
    found = files_under(str(folder))
    assert found == expected
    names = [path.relative_to(folder).as_posix() for path in found]
    assert names.index("a/x.md") < names.index("a-/y.txt") < names.index("a.b/x.md"), "parts order, not string order"
    assert "linked/o.md" not in names and "broken.md" not in names and "alias.md" in names


def test_a_folder_gives_its_documents_and_counts_the_rest(tmp_path: Path) -> None:
    folder = tree(tmp_path)
    found = discover([str(folder)])
    assert [path.relative_to(folder).as_posix() for path in found.files] == [
        ".hidden/h.md", "A/z.md", "a/x.md", "a-/y.txt", "a.b/x.md", "alias.md", "deep/1/2/3/d.txt", "top.md"]
    assert dict(found.unsupported) == {".zip": 1, ".json": 1, "(no suffix)": 1}
    assert found.missing == [] and found.folders == [str(folder)]
