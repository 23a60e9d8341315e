"""Payments' domain errors; each declares its code and HTTP status (see ``skincare.errors``)."""

from skincare.errors import DomainError


class InvalidSignature(DomainError):
    code = "invalid_signature"
    http_status = 401
    default_message = "Missing or invalid webhook signature."
