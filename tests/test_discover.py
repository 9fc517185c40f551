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
    found, outside = files_under(str(folder))
    assert found == expected
    assert outside == 1  # the folder link pointing outside
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
    assert found.notes() == [f"skipped 1 link pointing outside {folder}/"]


def test_links_pointing_outside_the_folder_are_not_followed_and_said_once(tmp_path: Path) -> None:
    """A folder of documents cannot make the run read a file elsewhere (a link to a secret): links to files or
    folders outside it are skipped and counted; a link inside it is a file of it; a link named on the command line
    is read as given."""
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "own.md").write_text("Own.\n", encoding="utf-8")
    secret = tmp_path / "secret.md"
    secret.write_text("Secret.\n", encoding="utf-8")
    os.symlink(secret, folder / "innocent.md")
    os.symlink(secret, folder / "sub" / "also.md")
    os.symlink(tmp_path, folder / "sub" / "up")
    os.symlink(folder / "own.md", folder / "sub" / "inside.md")
    found = discover([str(folder)])
    assert [path.relative_to(folder).as_posix() for path in found.files] == ["own.md", "sub/inside.md"]
    assert found.notes() == [f"skipped 3 links pointing outside {folder}/"]
    named = discover([str(folder / "innocent.md")])
    assert named.files == [folder / "innocent.md"] and named.notes() == []
