"""Today's exact outputs (tests/snapshot_grid.py): every figure, error line and table digest of a grid of 600+
collective commands and of the bundled examples stays identical, not merely within a tolerance, so a refactor
cannot shift a result unseen. An intended change of behaviour re-records them (`python tests/snapshot_grid.py`)
and says why in its commit."""
import json

import pytest

import snapshot_grid as g


def _diff(a, b, path="") -> str | None:
    """The first place two JSON values differ, or None."""
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'recorded' if k in a else 'today'}"
            d = _diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries recorded, {len(b)} today"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: recorded {a!r}, today {b!r}"


def _load(path):
    with open(path) as f:
        return json.load(f)


GRID = _load(g.GRID_FILE)
CHUNK = 40
COMMANDS = g.grid()


def test_the_record_covers_the_grid():
    assert sorted(GRID) == sorted(COMMANDS)
    ok = [r for r in GRID.values() if r["exit"] == 0]
    assert len(COMMANDS) >= 200 and len(ok) >= 200
    for algorithm in g.ALGORITHMS[1:]:  # every algorithm produced at least one schedule
        assert any(f"--algorithm {algorithm}" in c and GRID[c]["exit"] == 0 for c in COMMANDS), algorithm


@pytest.mark.parametrize("start", range(0, len(COMMANDS), CHUNK))
def test_collective_grid_is_unchanged(start):
    diffs = []
    for command in COMMANDS[start:start + CHUNK]:
        d = _diff(GRID[command], g.normalise(g.observe(command)))
        if d:
            diffs.append(f"{command}: {d}")
    assert not diffs, "\n".join(diffs[:5]) + (f"\n... {len(diffs) - 5} more" if len(diffs) > 5 else "")


def test_examples_are_unchanged():
    recorded = _load(g.EXAMPLES_FILE)
    today = g.normalise(g.observe_examples())
    diffs = [f"{name}: {_diff(recorded[name], today[name])}" for name in recorded
             if _diff(recorded[name], today[name])]
    assert not diffs, "\n".join(diffs)
