"""The rule registry. PROVISIONAL STUB: the rules helper fills it."""

ALL_RULES: list[type] = []
