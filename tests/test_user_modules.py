"""costmodel.measure.user_modules: a program file given by path imports as a fresh module."""

import sys

import pytest

from costmodel.measure.user_modules import import_module_or_file


def test_a_program_file_imports_the_module_beside_it(tmp_path, monkeypatch):
    """As `python path/to/programs.py` would: a helper module in the file's folder imports
    (the fourth outside suite's program files share `_outside_common.py`)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "_beside_helper.py").write_text("SIZE = 17\n")
    (tmp_path / "programs.py").write_text("from _beside_helper import SIZE\nDOUBLE = 2 * SIZE\n")
    module = import_module_or_file(str(tmp_path / "programs.py"))
    assert module.DOUBLE == 34
    assert import_module_or_file(str(tmp_path / "programs.py")) is module  # once per file
    monkeypatch.delitem(sys.modules, "_beside_helper")


def test_a_missing_file_is_named():
    with pytest.raises(FileNotFoundError, match="no such file: /nonexistent/programs.py"):
        import_module_or_file("/nonexistent/programs.py")
