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
    "key",
    "x_api_key",
    "subscription_key",
    "client_secret",
}


def _secret_parameter(name: str) -> bool:
    """Whether a query parameter's name is a credential's, however it is spelled
    (`api-key`, `API_KEY`, `x-amz-signature`)."""
    lowered = name.lower()
    return lowered in SECRET_URL_PARAMETERS or lowered.replace("-", "_") in SECRET_URL_PARAMETERS


def masked_url(url: str) -> str:
    """A URL as it may be shown: the password of its user part and every credential in its
    query (`?password=`, `sslpassword`, tokens, signatures) replaced by ***."""
    url = re.sub(r"(://[^:/@?#]*:)[^@/?#]*@", r"\1***@", url)

    def mask(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"{name}=***" if _secret_parameter(name) else match.group(0)

    return re.sub(r"(?<=[?&;])([^=&;#]+)=([^&;#]*)", mask, url)


def url_secrets(url: str) -> list[str]:
    """The credentials a URL carries (its user part's password, its secret query values),
    as written and decoded: what a message quoting any part of the URL must not hold."""
    parts = urlsplit(url)
    found: set[str] = set()
    userinfo = parts.netloc.rpartition("@")[0]
    if ":" in userinfo:
        found.add(userinfo.partition(":")[2])
    if parts.password:
        found.add(parts.password)
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if _secret_parameter(name):
            found.add(value)
    for raw in re.findall(r"[?&;]([^=&;#]+)=([^&;#]*)", url):
        if _secret_parameter(raw[0]):
            found.add(raw[1])
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)


def endpoint_without_credentials(value: str | None) -> str | None:
    """An S3 endpoint URL, refused when it carries credentials (a user part, or a signature
    or token in its query): they belong in the AWS environment or a profile, where they are
    not printed with the endpoint. The message does not quote the URL."""
    if value is None:
        return value
    parts = urlsplit(value)
    secret_query = any(_secret_parameter(name) for name, _ in parse_qsl(parts.query))
    if parts.username is not None or parts.password is not None or secret_query:
        raise ValueError(
            "holds credentials (a user part, or a signature or token in its query); give "
            "the endpoint alone and the credentials as AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY or a profile"
        )
    return value
