from skincare.errors import DomainError


class InvalidSignature(DomainError):
    code = "invalid_signature"
    default_message = "Missing or invalid webhook signature."
