"""`AlertConfig`: who hears of a run that did not succeed (Vertex AI's notification email, a webhook)."""

from __future__ import annotations

import dataclasses
import re
import urllib.parse

from estimator_lib.config.base import JsonConfig, require

MAX_EMAILS = 3  # Vertex AI's email notification component takes at most three recipients
_EMAIL = re.compile(r"^[^@\s,]+@[^@\s,]+\.[^@\s,]+$")
WEBHOOK_SCHEMES = ("https", "http")
SECRET_PREFIX = "secret:"  # --notify-webhook secret:projects/P/secrets/NAME: the URL is the secret's text
_SECRET = re.compile(r"^secret:projects/[^/\s]+/secrets/[^/\s]+(/versions/[^/\s]+)?$")


def redact_url(url: str) -> str:
    """`url` as logs and --dry-run may show it: scheme and host only. A webhook's path and query often hold its
    token (Slack's and Google Chat's do), so they are never printed. A secret's name is shown whole."""
    if _SECRET.match(url):
        return url
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is not a number
        return "(an unreadable URL)"
    if not parts.scheme or not host:
        return "(not a URL)"
    hidden = "/..." if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{host}{port}{hidden}"


def _is_web_url(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
        return parts.scheme in WEBHOOK_SCHEMES and bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class AlertConfig(JsonConfig):
    """Failure alerts, chosen when the pipeline is compiled (an exit handler around the whole DAG).

    Attributes:
      emails: recipients of Vertex AI's notification email (`--notify-email`, repeatable): at most three. Vertex
        AI sends it when a run ends, whatever its state.
      webhook: an http(s) URL that gets one JSON POST when a run fails or is cancelled (`--notify-webhook`), or
        "secret:projects/P/secrets/NAME[/versions/V]", a Secret Manager secret whose text is that URL, read when
        the alert is sent; "" for none. It is a secret of the user's: only `redact_url(webhook)` is ever printed
        or logged.
        Not both: KFP allows one exit handler per pipeline, with one exit task.
    """

    emails: tuple[str, ...] = ()
    webhook: str = ""

    def __post_init__(self) -> None:
        require(
            not (self.emails and self.webhook),
            "--notify-email and --notify-webhook are both given; a KFP pipeline has one exit handler, with one "
            "task: choose one (a webhook can forward to email)",
        )
        require(
            len(self.emails) <= MAX_EMAILS,
            f"--notify-email is given {len(self.emails)} times; Vertex AI's notification email takes at most "
            f"{MAX_EMAILS} recipients: use a group address",
        )
        for email in self.emails:
            require(bool(_EMAIL.match(email)), f"--notify-email {email!r} is not an email address, e.g. ml@example.com")
        if self.webhook:
            require(
                _is_web_url(self.webhook) or bool(_SECRET.match(self.webhook)),
                f"--notify-webhook must be an http(s) URL with a host or secret:projects/P/secrets/NAME, got "
                f"{redact_url(self.webhook)} (shown without its path); give e.g. https://hooks.example.com/services/...",
            )

    @property
    def wanted(self) -> bool:
        """Whether any alert is asked for (the pipeline then has an exit handler)."""
        return bool(self.emails or self.webhook)

    def described(self) -> dict:
        """The settings as --dry-run shows them: the webhook redacted (`redact_url`)."""
        return {"emails": list(self.emails), "webhook": redact_url(self.webhook) if self.webhook else ""}
