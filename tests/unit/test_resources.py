"""Resource kinds: each checks its own settings; the catalog checks names, duplicates and what jobs name."""

from __future__ import annotations

from dataclasses import replace

import pytest

from functions.catalog import CATALOG
from sqs_jobs.resources import (
    Access,
    Bucket,
    Endpoint,
    KeyType,
    MailSender,
    Network,
    NetworkPlacement,
    Resource,
    Secret,
    Table,
)
from sqs_jobs.specs import Catalog, CatalogError, JobSpec, QueueSpec, UnknownResourceError


def catalog_with(*resources: Resource, needs: tuple[str, ...] = ()) -> Catalog:
    job = JobSpec(name="make_thumbnail", handler="jobs.make_thumbnail", resources=needs)
    return Catalog(queues=(QueueSpec(name="images", jobs=(job,)),), resources=resources)


def test_access_says_what_it_reads_and_writes() -> None:
    assert (Access.READ.reads, Access.READ.writes) == (True, False)
    assert (Access.WRITE.reads, Access.WRITE.writes) == (False, True)
    assert (Access.READ_WRITE.reads, Access.READ_WRITE.writes) == (True, True)


def test_a_catalog_of_every_kind_is_valid_and_jobs_find_their_resources_by_name() -> None:
    images = Table(
        name="images_table",
        description="image records",
        partition_key="tenant",
        sort_key="image_id",
        sort_key_type=KeyType.NUMBER,
        access=Access.READ_WRITE,
    )
    catalog = catalog_with(
        images,
        Bucket(name="media", description="uploads", prefix="thumbnails/", access=Access.READ_WRITE),
        Endpoint(name="thumbnail_api", description="the API", default_url="https://thumbs.example.com"),
        Secret(name="thumbnail_api_key", description="its key", local_value="local-key"),
        MailSender(name="sender", description="mails", default_address="images@example.com"),
        needs=("images_table", "media", "thumbnail_api", "thumbnail_api_key"),
    )

    assert catalog.resource("images_table") is images
    assert catalog.resource_names == ("images_table", "media", "thumbnail_api", "thumbnail_api_key", "sender")
    assert catalog.queue("images").resources == ("images_table", "media", "thumbnail_api", "thumbnail_api_key")
    assert images.kind == "Table" and images.context_key == "images_table"


def test_an_unknown_resource_name_says_which_exist() -> None:
    with pytest.raises(UnknownResourceError) as raised:
        CATALOG.resource("redis")

    assert str(raised.value).startswith("unknown resource 'redis'; the catalog has: orders_table, ")


@pytest.mark.parametrize(
    ("resource", "problem"),
    [
        (Table(name="Images", description="x", partition_key="id"), "resource name 'Images' must match"),
        (Table(name="images", description=" ", partition_key="id"), "resource 'images' needs a description"),
        (Table(name="images", description="x", partition_key="a b"), "partition_key 'a b' must match"),
        (Bucket(name="media", description="x", prefix="thumbnails"), "prefix 'thumbnails' must be ''"),
        (Bucket(name="media", description="x", prefix="/abs/"), "prefix '/abs/' must be ''"),
        (Endpoint(name="api", description="x", default_url="http://a.example.com"), "must be an https:// URL"),
        (
            Endpoint(name="api", description="x", default_url="https://a.example.com", standin="nomodule"),
            "standin 'nomodule' must be 'module:callable'",
        ),
        (MailSender(name="sender", description="x", default_address="nobody"), "'nobody' is not an address"),
    ],
)
def test_each_kind_refuses_bad_settings_naming_what_is_accepted(resource: Resource, problem: str) -> None:
    with pytest.raises(CatalogError) as raised:
        catalog_with(resource)

    assert problem in str(raised.value)


def test_a_resource_declared_twice_and_a_job_naming_an_undeclared_one_are_both_reported() -> None:
    media = Bucket(name="media", description="x", prefix="")
    with pytest.raises(CatalogError) as raised:
        catalog_with(media, replace(media, prefix="a/"), needs=("media", "thumbnail_api"))

    message = str(raised.value)
    assert "resource 'media' is declared twice" in message
    assert "job 'make_thumbnail' needs unknown resource 'thumbnail_api'; known: media" in message


def test_a_network_reads_its_ids_by_their_prefix_from_a_string_or_a_list() -> None:
    expected = NetworkPlacement(
        subnet_ids=("subnet-0a1b2c3d", "subnet-0a1b2c3e"), security_group_ids=("sg-0123456789abcdef0",)
    )
    assert NetworkPlacement.parse(" subnet-0a1b2c3d, sg-0123456789abcdef0,subnet-0a1b2c3e ") == expected
    assert NetworkPlacement.parse(["subnet-0a1b2c3d", "subnet-0a1b2c3e", "sg-0123456789abcdef0"]) == expected
    # Twice the same ID is one; the value a worker gets lists subnets, then groups.
    assert NetworkPlacement.parse("subnet-0a1b2c3d,subnet-0a1b2c3d,subnet-0a1b2c3e,sg-0123456789abcdef0") == expected
    assert str(expected) == "subnet-0a1b2c3d,subnet-0a1b2c3e,sg-0123456789abcdef0"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "'' is neither a subnet ID"),
        ("sg-0123456789abcdef0", "needs 1-16 subnet IDs and 1-5 security group IDs, not 0 and 1"),
        ("subnet-0a1b2c3d", "not 1 and 0"),
        ("subnet-0a1b2c3d,sg-0123456789abcdef0,vpc-0a1b2c3d", "'vpc-0a1b2c3d' is neither"),
        ("subnet-0A1B2C3D,sg-0123456789abcdef0", "'subnet-0A1B2C3D' is neither"),
        (["subnet-0a1b2c3d", 7], "7 is neither"),
        (",".join([*(f"subnet-{n:08x}" for n in range(17)), "sg-0123456789abcdef0"]), "not 17 and 1"),
        (",".join(["subnet-0a1b2c3d", *(f"sg-{n:08x}" for n in range(6))]), "not 1 and 6"),
    ],
)
def test_a_network_refuses_what_is_not_its_ids_naming_what_is_accepted(value: str | list[object], problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        NetworkPlacement.parse(value)

    assert problem in str(raised.value)


def test_a_queue_runs_in_one_network_at_most() -> None:
    first = Network(name="warehouse_net", description="the warehouse VPC")
    second = Network(name="billing_net", description="the billing VPC")
    jobs = (
        JobSpec(name="pick", handler="jobs.pick", resources=("warehouse_net",)),
        JobSpec(name="bill", handler="jobs.bill", resources=("billing_net",)),
    )
    with pytest.raises(CatalogError) as raised:
        Catalog(queues=(QueueSpec(name="orders", jobs=jobs),), resources=(first, second))

    assert "queue 'orders': its jobs name networks warehouse_net, billing_net; a queue's worker runs in one" in str(
        raised.value
    )
    # On queues of their own, each worker has its network.
    apart = (QueueSpec(name="picking", jobs=jobs[:1]), QueueSpec(name="billing", jobs=jobs[1:]))
    assert Catalog(queues=apart, resources=(first, second)).queue("billing").resources == ("billing_net",)
