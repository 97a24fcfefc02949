"""The stores under test (a directory and SeaweedFS), as the storage tests have them."""

from tests.app.storage.conftest import s3_env, seaweed, store

__all__ = ["s3_env", "seaweed", "store"]
