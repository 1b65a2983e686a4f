"""Local stand-ins of the example app's endpoints (`Endpoint.standin` in the catalog)."""
