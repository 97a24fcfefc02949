"""The stores under test (a directory and SeaweedFS), as the storage tests have them; the
`seaweed` and `s3_env` fixtures it takes are the whole suite's (tests/conftest.py)."""

from tests.app.storage.conftest import store

__all__ = ["store"]
