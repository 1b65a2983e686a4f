"""The local engine: an embedded moto server plus an emulator of Lambda's SQS event source mapping."""
