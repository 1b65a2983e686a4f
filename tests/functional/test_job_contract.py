"""A service whose wheel predates a job publishes it: the stack's job contract (an SSM parameter) says which jobs
exist and where they go, and JobPublisher.from_stack reads it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from functions.catalog import CATALOG
from sqs_jobs.contract import CONTRACT_VERSION, ContractError, JobContract
from sqs_jobs.envelope import MAX_EXTRA_FIELDS, RESERVED_FIELDS
from sqs_jobs.errors import EnvelopeFieldError, UnknownJobError
from sqs_jobs.local.provision import provision
from sqs_jobs.publisher import ContractNotGivenError, JobPublisher
from sqs_jobs.specs import JobSpec, QueueSpec
from sqs_jobs.stack_names import contract_parameter_name
from sqs_jobs.worker.clients import ClientFactory
from tests.sample_app.catalog import CATALOG as IMAGES_CATALOG

# The stack deployed after the service's wheel was built: the example plus the images team's queue (FIFO here).
IMAGES = replace(IMAGES_CATALOG.queue("images"), fifo=True)
DEPLOYED = replace(CATALOG, queues=(*CATALOG.queues, IMAGES), resources=(*CATALOG.resources, *IMAGES_CATALOG.resources))


def test_an_older_wheel_publishes_a_job_the_stack_added_after_it_to_the_right_queue(clients: ClientFactory) -> None:
    deployment = provision(clients, catalog=DEPLOYED)
    assert "make_thumbnail" not in CATALOG.job_names  # the wheel's own catalog doesn't know it

    publisher = JobPublisher.from_stack(clients("ssm"), clients("sqs"))
    publisher.publish("make_thumbnail", "img-1")

    [message] = clients("sqs").receive_message(
        QueueUrl=deployment.queues["images"].url, AttributeNames=["MessageGroupId"]
    )["Messages"]
    assert json.loads(message["Body"]) == {"job": "make_thumbnail", "id": "img-1"}
    # The contract says the queue is FIFO: the publisher sent a message group (the entity's ID).
    assert message["Attributes"]["MessageGroupId"] == "img-1"
    with pytest.raises(UnknownJobError):
        publisher.publish("resize_everything", "img-1")


def test_without_a_published_contract_the_given_catalog_routes(clients: ClientFactory) -> None:
    provision(clients, catalog=CATALOG)
    clients("ssm").delete_parameter(Name=contract_parameter_name("SqsJobs"))

    with pytest.raises(ContractNotGivenError, match="pass catalog="):
        JobPublisher.from_stack(clients("ssm"), clients("sqs"))
    publisher = JobPublisher.from_stack(clients("ssm"), clients("sqs"), catalog=CATALOG)

    publisher.publish("order_confirmation", "1001")
    with pytest.raises(UnknownJobError):
        publisher.publish("make_thumbnail", "img-1")


def test_the_contract_round_trips_and_says_which_queues_are_fifo() -> None:
    contract = JobContract.from_catalog(DEPLOYED)

    assert JobContract.from_json(contract.to_json()) == contract
    assert contract.queue_for_job("make_thumbnail") == "images" and contract.is_fifo("images")
    assert not contract.is_fifo("orders")
    assert set(contract.job_names) == set(DEPLOYED.job_names)
    # What a result reader needs: how long each queue keeps its records, which jobs are durable.
    assert contract.expiry_s == {queue.name: queue.idempotency_expiry_s for queue in DEPLOYED}
    assert contract.durable_jobs == {job.name for queue in DEPLOYED for job in queue.jobs if job.durable is not None}
    assert contract.durable_jobs  # the example has one: the round trip above carried it


def test_a_contract_from_before_results_reads_with_no_expiry_and_no_durable_job() -> None:
    document = json.loads(JobContract.from_catalog(DEPLOYED).to_json())
    document.pop("durable_jobs")
    for settings in document["queues"].values():
        settings.pop("expiry_s")

    older = JobContract.from_json(json.dumps(document))

    assert (dict(older.expiry_s), older.durable_jobs) == ({}, frozenset())
    assert older.routes == JobContract.from_catalog(DEPLOYED).routes


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        (json.dumps({"version": CONTRACT_VERSION + 1, "jobs": {}, "queues": {}}), "install the wheel"),
        (json.dumps({"version": CONTRACT_VERSION, "jobs": {"a": "q"}, "queues": {}}), "does not declare"),
        (json.dumps({"version": CONTRACT_VERSION, "jobs": {}, "queues": {"q": {"fifo": "yes"}}}), "boolean"),
        (json.dumps({"version": CONTRACT_VERSION, "jobs": [], "queues": {}}), "needs objects"),
        (json.dumps({"version": CONTRACT_VERSION, "jobs": {}, "queues": {}, "reserved_fields": "tenant"}), "list"),
        (json.dumps({"version": CONTRACT_VERSION, "jobs": {}, "queues": {"q": {"fifo": False, "expiry_s": 0}}}), "> 0"),
        (json.dumps({"version": CONTRACT_VERSION, "jobs": {}, "queues": {}, "durable_jobs": ["x"]}), "routes"),
    ],
)
def test_a_contract_that_cant_be_used_is_refused_saying_why(text: str, problem: str) -> None:
    with pytest.raises(ContractError, match=problem):
        JobContract.from_json(text)


def test_a_one_job_catalog_has_a_one_route_contract() -> None:
    spec = QueueSpec(name="q", jobs=(JobSpec(name="j", handler="m.j"),))
    catalog = replace(CATALOG, queues=(spec,), resources=())
    assert JobContract.from_catalog(catalog).routes == {"j": "q"}


def test_a_role_granted_before_contracts_falls_back_to_the_given_catalog(clients: ClientFactory) -> None:
    from botocore.stub import Stubber

    deployment = provision(clients, catalog=CATALOG)
    ssm = clients("ssm")
    url = deployment.queues["orders"].url
    with Stubber(ssm) as stub:
        # SSM refuses a GetParameters naming a parameter the role may not read, as AWS does.
        stub.add_client_error("get_parameters", service_error_code="AccessDeniedException", http_status_code=400)
        stub.add_response(
            "get_parameters",
            {"Parameters": [{"Name": "/SqsJobs/queues/orders/url", "Value": url, "Type": "String"}]},
        )
        publisher = JobPublisher.from_stack(ssm, clients("sqs"), queues=["orders"], catalog=CATALOG)

    publisher.publish("order_confirmation", "1001")
    assert clients("sqs").receive_message(QueueUrl=url)["Messages"]


def test_the_contract_says_which_envelope_fields_the_stacks_workers_reserve() -> None:
    contract = JobContract.from_catalog(CATALOG)
    assert contract.knows_tenants and json.loads(contract.to_json())["reserved_fields"] == sorted(RESERVED_FIELDS)

    # A stack from before tenants published no reserved fields: its workers read `tenant` as an extra field.
    before_tenants = json.loads(contract.to_json())
    del before_tenants["reserved_fields"]
    older = JobContract.from_json(json.dumps(before_tenants))
    assert not older.knows_tenants and older.routes == contract.routes


def test_for_a_stack_from_before_tenants_a_tenant_leaves_room_for_one_extra_field_less(clients: ClientFactory) -> None:
    provision(clients, catalog=CATALOG)
    ssm = clients("ssm")
    name = contract_parameter_name("SqsJobs")
    document = json.loads(ssm.get_parameter(Name=name)["Parameter"]["Value"])
    del document["reserved_fields"]
    ssm.put_parameter(Name=name, Value=json.dumps(document), Type="String", Overwrite=True)
    publisher = JobPublisher.from_stack(ssm, clients("sqs"), queues=["orders"])
    extra = {f"field_{n}": n for n in range(MAX_EXTRA_FIELDS)}

    # Its workers would count the tenant as a ninth extra field and dead-letter the job: refused before sending.
    with pytest.raises(EnvelopeFieldError) as refused:
        publisher.publish("order_confirmation", "1", extra=extra, tenant="acme")
    assert str(refused.value) == (
        "8 extra fields and a tenant; this stack's workers predate the tenant field and count it as an extra field: "
        "at most 7 beside a tenant until it is deployed again"
    )
    publisher.publish("order_confirmation", "1", extra=dict(list(extra.items())[:-1]), tenant="acme")
    publisher.publish("order_confirmation", "2", extra=extra)  # no tenant: all 8
    # The stack as deployed now takes all 8 beside a tenant.
    current = JobPublisher(
        clients("sqs"), {"orders": "unused"}, contract=JobContract.from_catalog(CATALOG), catalog=CATALOG
    )
    assert current.envelope("order_confirmation", "3", extra=extra, tenant="acme").tenant == "acme"
