"""The head registry: which labels the trainer predicts, in a fixed order."""

from __future__ import annotations

# One output per head, in this order. A row whose label list is empty is a legitimate
# user, so that head is the one an empty list maps to.
DEFAULT_HEADS: tuple[str, ...] = (
    "FollowBot",
    "LikeBot",
    "EngagementAmplifier",
    "ReplySpamBot",
    "TweetSpamBot",
    "RTBot",
    "MultiActionBot",
    "LegitimateUser",
)

EMPTY_LABEL_HEAD = "LegitimateUser"


def empty_label_index(heads: tuple[str, ...]) -> int | None:
    """Index of the head an empty label list means, or ``None`` if the registry lacks it."""
    return heads.index(EMPTY_LABEL_HEAD) if EMPTY_LABEL_HEAD in heads else None
