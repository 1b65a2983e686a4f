"""A deployed stack upgrades in place: every stateful resource of the baseline template (logical ID, type, the
properties whose change replaces it, its deletion policies) is still there, the same, in today's template."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.infra.conftest import Synth
from tests.infra.stateful import identity, replacements

BASELINE = Path(__file__).with_name("stateful_baseline.json")


def test_no_stateful_resource_of_the_baseline_is_deleted_or_replaced(synth: Synth) -> None:
    baseline = json.loads(BASELINE.read_text())
    assert baseline, "the baseline lists the stack's stateful resources"
    assert replacements(baseline, identity(synth.resources)) == []


def test_a_renamed_a_rekeyed_and_an_unprotected_resource_are_each_found() -> None:
    before = json.loads(BASELINE.read_text())
    table = next(key for key, value in before.items() if value["Type"] == "AWS::DynamoDB::Table")
    queue = next(key for key, value in before.items() if value["Type"] == "AWS::SQS::Queue")
    bucket = next(key for key, value in before.items() if value["Type"] == "AWS::S3::Bucket")
    after = copy.deepcopy(before)
    after[table]["Properties"]["KeySchema"] = [{"AttributeName": "other", "KeyType": "HASH"}]
    after[f"{queue}Moved"] = after.pop(queue)
    assert before[bucket]["DeletionPolicy"] == "Retain"
    after[bucket]["DeletionPolicy"] = "Delete"
    found = replacements(before, after)
    assert len(found) == 3, found
    assert any(table in line and "replacement" in line for line in found)
    assert any(queue in line and "gone" in line for line in found)
    assert any(bucket in line and "DeletionPolicy Retain -> Delete" in line for line in found)
