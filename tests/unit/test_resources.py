"""Resource kinds: each checks its own settings; the catalog checks names, duplicates and what jobs name."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sqs_jobs.catalog import CATALOG
from sqs_jobs.resources import (
    Access,
    Bucket,
    Endpoint,
    KeyType,
    MailSender,
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
