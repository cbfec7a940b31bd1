"""The spool benchmark's lines are feedback events as the worker spools them."""

import json
import os
import pathlib
import sys

from jsonschema import Draft202012Validator

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "e2e"))

import bench_spool  # noqa: E402
import harness  # noqa: E402

SCHEMA = pathlib.Path(__file__).resolve().parent.parent.parent / "schemas" / "feedback-event" / "schema.json"


def test_a_spool_line_is_one_valid_feedback_event_per_line():
    validator = Draft202012Validator(json.loads(SCHEMA.read_text()), format_checker=Draft202012Validator.FORMAT_CHECKER)
    for n in (0, 1, 499_999):
        line = bench_spool.spool_line(n)
        assert line.endswith("\n") and line.count("\n") == 1
        event = json.loads(line)
        assert list(validator.iter_errors(event)) == []
        assert event["token"] == harness.token(n)
