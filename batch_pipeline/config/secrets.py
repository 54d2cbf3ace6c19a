"""What is a secret in the configuration: settings named like one, credentials in a URL;
how a URL may be shown (`masked_url`); and that an endpoint URL holds none
(`endpoint_without_credentials`)."""

import re
from urllib.parse import parse_qsl, urlsplit

# Settings whose values are secrets, by exact (case-insensitive) name: not by substring, so
# `max_tokens` and `overlap_tokens` stay visible while `password` or `aws_session_token` do not.
SECRET_SETTINGS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "access_key",
        "secret_key",
        "private_key",
        "credentials",
        "access_key_id",
        "secret_access_key",
        "session_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
    }
)


# Query parameters of a URL that carry credentials (libpq's `password`, `sslpassword`,
# signed URLs' signatures and session tokens, ...), masked wherever a URL is shown.
SECRET_URL_PARAMETERS = SECRET_SETTINGS | {
    "sslpassword",
    "pass",
    "pwd",
    "access_token",
    "auth_token",
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-security-token",
    "x-amz-credential",
}


def masked_url(url: str) -> str:
    """A URL as it may be shown: the password of its user part and every credential in its
    query (`?password=`, `sslpassword`, tokens, signatures) replaced by ***."""
    url = re.sub(r"(://[^:/@?#]*:)[^@/?#]*@", r"\1***@", url)

    def mask(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"{name}=***" if name.lower() in SECRET_URL_PARAMETERS else match.group(0)

    return re.sub(r"(?<=[?&;])([^=&;#]+)=([^&;#]*)", mask, url)


def endpoint_without_credentials(value: str | None) -> str | None:
    """An S3 endpoint URL, refused when it carries credentials (a user part, or a signature
    or token in its query): they belong in the AWS environment or a profile, where they are
    not printed with the endpoint. The message does not quote the URL."""
    if value is None:
        return value
    parts = urlsplit(value)
    secret_query = any(name.lower() in SECRET_URL_PARAMETERS for name, _ in parse_qsl(parts.query))
    if parts.username is not None or parts.password is not None or secret_query:
        raise ValueError(
            "holds credentials (a user part, or a signature or token in its query); give "
            "the endpoint alone and the credentials as AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY or a profile"
        )
    return value
