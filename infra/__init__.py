"""The example deployment's CDK app: its one stack, composed by the framework's constructs (sqs_jobs.cdk)."""
