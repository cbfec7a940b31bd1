"""`pushworker encode` agrees byte for byte with two independent implementations (Python and JavaScript) on
random events in all three formats, and `pushworker validate` agrees with them on which events are invalid."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BIN = os.environ.get("PUSHWORKER_BIN", str(ROOT / ".build" / "debug" / "pushworker"))
NOW = 1_800_000_000


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", **kw)


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    path = tmp_path_factory.mktemp("interop") / "events.jsonl"
    with open(path, "wb") as out:  # bytes: the events hold carriage returns that text mode would translate
        for seed in (1, 2, 3):
            subprocess.run([sys.executable, str(HERE / "gen_events.py"), str(seed), "700"], stdout=out, check=True)
    return path


def test_the_binary_exists():
    assert pathlib.Path(BIN).exists(), f"build pushworker first ({BIN})"


@pytest.mark.parametrize("fmt", ["frame", "enhanced", "simple"])
@pytest.mark.parametrize("reference", ["python", "node"])
def test_encode_matches_reference(events, fmt, reference):
    args = ["--format", fmt, "--now", str(NOW), "--identifier-start", "4294967200"]
    ours = run([BIN, "encode", str(events), *args])
    assert ours.returncode in (0, 1), ours.stderr
    if reference == "python":
        theirs = run([sys.executable, str(HERE / "reference_encoder.py"), str(events), *args], check=True)
    else:
        node = shutil.which("node") or shutil.which("nodejs")
        assert node, "node is required (scripts/setup installs it)"
        theirs = run([node, str(HERE / "reference_encoder.mjs"), str(events), *args], check=True)
    ours_lines, their_lines = ours.stdout.splitlines(), theirs.stdout.splitlines()
    assert len(ours_lines) == len(their_lines) == 2100
    mismatches = [(i + 1, a, b) for i, (a, b) in enumerate(zip(ours_lines, their_lines)) if a != b]
    assert not mismatches, "first mismatch (line, ours, reference):\n%s\n%s\n%s" % mismatches[0]
    # the sample covers what it should
    errors = {line.split(" error:")[1] for line in ours_lines if " error:" in line}
    assert {"malformed_event", "invalid_token_format", "invalid_payload", "invalid_priority", "payload_too_large",
            "expired"} <= errors
    assert sum(1 for line in ours_lines if " error:" not in line) > 1200
    assert sum(1 for line in ours_lines if "e280a6" in line) > 50  # alerts shortened with an ellipsis


def test_validate_agrees_with_encode(events):
    encoded = run([BIN, "encode", str(events), "--now", str(NOW)]).stdout.splitlines()
    verdicts = [json.loads(line) for line in run([BIN, "validate", str(events), "--now", str(NOW)]).stdout.splitlines()]
    assert len(verdicts) == len(encoded)
    for verdict, line in zip(verdicts, encoded):
        reason = line.split(" error:")[1] if " error:" in line else None
        if reason is None:
            assert verdict["valid"] is True, (verdict, line)
        else:
            assert verdict == {**verdict, "valid": False, "reason": reason}, (verdict, line)
            assert list(verdict) == ["line", "id", "valid", "reason", "detail"]
