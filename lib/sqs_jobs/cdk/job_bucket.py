"""A bucket a job stores objects in, created by the stack."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct


class JobBucket(Construct):
    """Private, encrypted, TLS-only, versioned, never deleted by CDK.

    Always RETAIN, whatever `retain_data` says: what jobs store (invoices, images) tends to be records that must
    outlive any stack. The alternatives are worse: DESTROY makes `cdk destroy` fail as soon as one object exists
    (CloudFormation deletes only empty buckets, and a versioned bucket is never empty once used), and
    `auto_delete_objects` adds a custom-resource Lambda whose bucket policy lets it delete every object, which it
    does on a destroy or a replacement. `cdk destroy` leaves the bucket; empty and delete it by hand when it's
    really not needed.
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            # SSE-S3: encrypted at rest with no key policy to maintain and no KMS grant for the worker.
            encryption=s3.BucketEncryption.S3_MANAGED,
            # A bucket policy denying any request not over TLS 1.2 or later.
            enforce_ssl=True,
            minimum_tls_version=1.2,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            # ACLs off: the bucket's policy and IAM decide everything.
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            # An overwritten or deleted object stays recoverable.
            versioned=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
