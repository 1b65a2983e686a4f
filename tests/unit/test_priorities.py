"""Priority lanes in the catalog: what a queue may declare, the lanes' concurrency, names and the job contract's
part (docs/priorities.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sqs_jobs.cdk.naming import lane_output_key, lane_queue_name, lane_signal
from sqs_jobs.contract import ContractError, JobContract, UnknownPriorityError
from sqs_jobs.specs import Catalog, CatalogError, JobSpec, QueueSpec
from sqs_jobs.stack_names import lane_parameter_name

JOBS = (JobSpec(name="send_mail", handler="functions.jobs.order_confirmation"),)


def queue(**settings: Any) -> QueueSpec:
    return QueueSpec(name="mail", jobs=JOBS, **settings)


def test_a_queue_has_no_lanes_unless_it_declares_them() -> None:
    plain = queue()
    assert plain.lanes == () and plain.default_lane is None
    assert plain.lane_concurrency(None) == plain.total_concurrency == plain.max_concurrency
    assert plain.max_in_flight == plain.max_concurrency * plain.records_in_parallel


def test_the_most_urgent_lane_may_use_all_of_max_concurrency_and_the_others_what_the_reserve_leaves() -> None:
    laned = queue(priorities=("high", "normal", "bulk"), max_concurrency=10)
    assert laned.default_lane == "bulk"  # the last lane, unless default_priority says
    assert [laned.lane_concurrency(lane) for lane in laned.lanes] == [10, 5, 5]
    assert laned.total_concurrency == 20
    assert laned.max_in_flight == 20 * laned.records_in_parallel
    reserved = queue(priorities=("high", "normal"), max_concurrency=10, urgent_reserve=0, default_priority="high")
    assert [reserved.lane_concurrency(lane) for lane in reserved.lanes] == [10, 10]
    assert reserved.default_lane == "high"
    with pytest.raises(KeyError):
        laned.lane_concurrency("urgent")


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"priorities": ("high",)}, r"priorities \('high',\) has one lane; lanes need at least two"),
        ({"priorities": ("high", "normal", "high")}, "lane 'high' is named twice"),
        ({"priorities": ("High", "normal")}, r"lane 'High' must match \^\[a-z\]"),
        ({"priorities": ("high", "")}, "lane '' must match"),
        ({"priorities": ("dlq", "normal")}, "not be 'dlq'"),
        ({"priorities": ("high", "x" * 17)}, "must match"),
        ({"priorities": ["high", "normal"]}, r"priorities must be a tuple of lane names, e\.g\. \('high', 'normal'\)"),
        ({"priorities": "high"}, "priorities must be a tuple"),
        (
            {"priorities": ("high", "normal"), "default_priority": "low"},
            "default_priority 'low' is not one of its lanes: high, normal",
        ),
        ({"default_priority": "high"}, "default_priority 'high' needs priorities"),
        ({"urgent_reserve": 1}, "urgent_reserve 1 needs priorities"),
        (
            {"priorities": ("high", "normal"), "fifo": True},
            "priorities on a FIFO queue: its order holds within one queue",
        ),
        (
            {"priorities": ("high", "normal"), "max_concurrency": 2},
            r"urgent_reserve 1 leaves the lower lanes 1 .* must be 0\.\.0 \(its default is half",
        ),
        (
            {"priorities": ("high", "normal"), "urgent_reserve": 4},
            r"urgent_reserve 4 leaves the lower lanes 1 of max_concurrency 5",
        ),
    ],
)
def test_lanes_that_cant_work_are_refused_saying_what_is_accepted(settings: dict[str, Any], problem: str) -> None:
    with pytest.raises(CatalogError, match=problem):
        Catalog(queues=(queue(**settings),))


def test_the_default_lane_keeps_the_queues_name_and_the_others_are_named_after_it() -> None:
    laned = queue(priorities=("high", "normal"))
    assert lane_queue_name("Shop", laned, "normal") == "Shop-mail"
    assert lane_queue_name("Shop", laned, None) == "Shop-mail"
    assert lane_queue_name("Shop", laned, "high") == "Shop-mail-high"
    assert lane_parameter_name("Shop", "mail", "high", "url") == "/Shop/queues/mail/lanes/high/url"
    assert lane_output_key("mail", "high", "url") == "MailLaneHighQueueUrl"
    assert lane_signal("high", "oldest-message-age") == "high-oldest-message-age"
    with pytest.raises(ValueError, match="unknown lane parameter"):
        lane_parameter_name("Shop", "mail", "high", "dlq-url")


def test_the_contract_carries_the_lanes_and_a_contract_without_them_means_none() -> None:
    catalog = Catalog(
        queues=(queue(priorities=("high", "normal")), QueueSpec(name="plain", jobs=(JobSpec(name="p", handler="a.b"),)))
    )
    contract = JobContract.from_catalog(catalog)

    assert JobContract.from_json(contract.to_json()) == contract
    assert contract.lanes == {"mail": ("high", "normal")} and contract.default_lanes == {"mail": "normal"}
    assert contract.lane("mail", None) == "normal" and contract.lane("mail", "high") == "high"
    assert contract.lane("plain", None) is None
    with pytest.raises(UnknownPriorityError, match="its lanes are high, normal"):
        contract.lane("mail", "urgent")
    # A stack from before lanes: every queue without.
    document = json.loads(contract.to_json())
    for settings in document["queues"].values():
        settings.pop("lanes", None)
        settings.pop("default_lane", None)
    assert JobContract.from_json(json.dumps(document)).lanes == {}


@pytest.mark.parametrize("lanes", [["high"], ["high", "High"], "high,normal"])
def test_a_contract_with_lanes_that_cant_be_used_is_refused(lanes: object) -> None:
    document = json.loads(JobContract.from_catalog(Catalog(queues=(queue(priorities=("high", "normal")),))).to_json())
    document["queues"]["mail"]["lanes"] = lanes
    with pytest.raises(ContractError, match="needs 'lanes'"):
        JobContract.from_json(json.dumps(document))
