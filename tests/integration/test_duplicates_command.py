"""The ``duplicates`` command, where a developer has it, as a second reader of the rule
tests/unit/test_no_copies.py checks (no copied block of logic in herdbook/ and tests/):
its rows of identical text, less the lines that check does not count, less ALLOWED. Its
shape rows (alike but for names) are for a person to judge, not a test."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.unit.test_no_copies import ROOT, SCANNED, WINDOW, Copy, allowed_by, logic_lines, tree

ROW = re.compile(r"D\d+ (\S+):(\d+)-(\d+) ~ (\S+):(\d+)-(\d+)(.*)")


def test_the_duplicates_command_finds_no_other_copy() -> None:
    if shutil.which("duplicates") is None:
        pytest.skip("the duplicates command is not installed here (the check above runs)")
    out = subprocess.run(["duplicates", "--min-lines", str(WINDOW), "--most", "200",
                          "--seconds", "20"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    files = tree()
    wrong = []
    for row in map(ROW.fullmatch, out.splitlines()):
        if row is None or " shape" in row[7]:
            continue
        a, b = row[1], row[4]
        if not (a.startswith(SCANNED) and b.startswith(SCANNED)) or a not in files:
            continue
        first, last = int(row[2]), int(row[3])
        shared = [line for number, line in logic_lines(files[a]) if first <= number <= last]
        if len(shared) < WINDOW:
            continue        # an import list or comments: not logic
        copy = Copy(a, (first, last), b, (int(row[5]), int(row[6])), "\n".join(shared))
        if allowed_by(copy) is None:
            wrong.append(str(copy))
    assert not wrong, "duplicates finds copied logic:\n" + "\n".join(wrong)
