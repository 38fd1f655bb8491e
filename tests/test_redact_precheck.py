"""`redact` skips its three substitutions when one search finds none of their patterns: the
answer must be the one the three substitutions give, whatever the text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from effectgate.gateway.observability.log_lines import _API_KEY, _TOKENISH, mask_url, redact

SECRETS = frozenset({"hunter2hunter2", "s3cr3t-value"})
PIECES = ["Bearer ", "basic=", "TOKEN: ", "sk_test_", "whsec_live_", "postgres://u:", "@h/db", "abcdefgh12", " ", "x"]


def three_substitutions(text: str) -> str:
    for secret in sorted(SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _TOKENISH.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
    text = _API_KEY.sub(lambda m: f"{m.group(1)}_{m.group(2)}_***", text)
    return mask_url(text)


@given(st.lists(st.sampled_from([*PIECES, *SECRETS]) | st.text(max_size=12), max_size=12).map("".join))
def test_the_precheck_never_changes_the_answer(text: str) -> None:
    assert redact(text, SECRETS) == three_substitutions(text)


def test_what_each_pattern_masks_is_still_masked() -> None:
    line = "auth Bearer abcdefgh12345 key sk_live_ABCDEF123 url postgres://u:pw@h/db hunter2hunter2"
    assert redact(line, SECRETS) == "auth Bearer *** key sk_live_*** url postgres://u:***@h/db ***"
    assert redact("act_0123 SUCCEEDED charge_card", SECRETS) == "act_0123 SUCCEEDED charge_card"
