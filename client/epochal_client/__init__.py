"""The epochal client: `Client` talks to the service with httpx; `ApiError` is its one error."""

from epochal_client.client import Client
from epochal_client.types import ApiError

__all__ = ["ApiError", "Client"]
