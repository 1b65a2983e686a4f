"""Runs outside Lambda: the operator CLI, the publisher client for other services, and the local engine.

Never shipped to Lambda. Imports the catalog and the envelope contract from `functions`, never the reverse.
"""
