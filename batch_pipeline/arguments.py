"""Argument types the command line and the benchmarks share: argparse refuses a bad value
before anything runs, in one line that names the flag once (argparse prefixes `argument
--flag:`). Imports nothing heavy, so a benchmark that must run on a bare machine can use it."""

import argparse
from collections.abc import Callable

LARGEST = 2**31 - 1  # what every count here fits: a 32-bit signed integer (SQL INTEGER)


def whole_number(
    minimum: int, zero_means: str = "", maximum: int = LARGEST
) -> Callable[[str], int]:
    """An argparse `type` for a whole number from `minimum` to `maximum`; `zero_means` says
    what 0 does where 0 is allowed (as in `--limit 0`: all)."""
    wanted = (
        f"a whole number, 0 for {zero_means}"
        if zero_means
        else f"a whole number of at least {minimum}"
    )

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or number < minimum:
            raise argparse.ArgumentTypeError(f"expected {wanted}, not {value!r}")
        if number > maximum:
            raise argparse.ArgumentTypeError(
                f"expected a whole number of at most {maximum:,}, not {value!r}"
            )
        return number

    return parse
