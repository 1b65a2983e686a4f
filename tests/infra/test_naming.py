"""Physical names shared by the stack, the local engine and jobctl (pure, no synth)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sqs_jobs.cdk.naming import (
    alarm_name,
    output_key,
    parameter_name,
    pascal_case,
    physical_queue_name,
)
from tests.infra.conftest import REPO_ROOT


def test_queue_names_derive_from_the_stack_and_catalog_names() -> None:
    assert physical_queue_name("SqsJobs", "orders") == "SqsJobs-orders"
    assert physical_queue_name("SqsJobs", "orders", dlq=True) == "SqsJobs-orders-dlq"


def test_a_queue_name_over_sqs_limit_is_refused_with_the_remedy() -> None:
    with pytest.raises(ValueError, match=r"at most 80 characters.*shorter stack_name"):
        physical_queue_name("S" * 70, "orders", dlq=True)


def test_parameter_and_output_names() -> None:
    assert parameter_name("SqsJobs", "orders", "dlq-url") == "/SqsJobs/queues/orders/dlq-url"
    assert output_key("order_events", "url") == "OrderEventsQueueUrl"
    assert output_key("orders", "dlq-url") == "OrdersDlqUrl"
    assert output_key("orders", "arn") == "OrdersQueueArn"
    assert alarm_name("SqsJobs", "orders", "dlq-depth") == "SqsJobs-orders-dlq-depth"
    assert pascal_case("dlq-url") == "DlqUrl"


@pytest.mark.parametrize("function", [parameter_name, lambda stack, queue, key: output_key(queue, key)])
def test_unknown_endpoint_keys_are_refused_with_the_known_ones(function: object) -> None:
    with pytest.raises(ValueError, match="known: url, dlq-url, arn"):
        function("SqsJobs", "orders", "URL")  # type: ignore[operator]


def test_naming_and_context_import_no_cdk() -> None:
    # jobctl and the local engine use them without paying for (or installing) the CDK.
    code = "import sys, sqs_jobs.cdk.naming, sqs_jobs.cdk.context; sys.exit('aws_cdk' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=False).returncode == 0
