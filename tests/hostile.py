"""Ids written to break a filter expression, a path or a log line: every store test sends them as data."""

FILTER_BREAKERS = [
    "zz'] or id not in ['",
    "D'Arcy-notes",
    'say "hi"',
    "line\nbreak",
    "tab\tand\rreturn",
    "back\\slash\\",
    "“unicode quotes” ‘single’",
    "') or true or ('",
]
