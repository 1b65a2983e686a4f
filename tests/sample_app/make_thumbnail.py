"""Re-read the image, render its thumbnail through the API (its key from the secret), store it, mark it done."""

from __future__ import annotations

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import RecordNotFoundError
from sqs_jobs.worker.jobs import JobContext
from tests.sample_app.catalog import THUMBNAILS_PREFIX


class ImageNotFoundError(RecordNotFoundError):
    """The image record the job names does not exist."""


def run(envelope: Envelope, context: JobContext) -> dict[str, str]:
    images = context.resource("images_table")
    dynamodb = context.client("dynamodb")
    item = dynamodb.get_item(TableName=images, Key={"image_id": {"S": envelope.id}}, ConsistentRead=True).get("Item")
    if item is None:
        raise ImageNotFoundError(f"image {envelope.id!r} does not exist")
    response = context.http.post(
        f"{context.resource('thumbnail_api')}/render",
        json={"source": item["source"]["S"]},
        headers={"Authorization": f"Bearer {context.secret('thumbnail_api_key')}"},
    )
    key = f"{THUMBNAILS_PREFIX}{envelope.id}.png"
    context.client("s3").put_object(Bucket=context.resource("media_bucket"), Key=key, Body=response.data)
    dynamodb.update_item(
        TableName=images,
        Key={"image_id": {"S": envelope.id}},
        UpdateExpression="SET thumbnail = :key",
        ExpressionAttributeValues={":key": {"S": key}},
    )
    return {"thumbnail": key}
