"""A corpus of hostile input values, for every field a person or a script can type into the portal.

Each value is built from a family of attacks (shell, line breaks, scheduler directives, Unicode tricks, NUL,
sizes, traversal, wrong JSON types, numbers) combined with a few carriers, so the corpus is large, varied and
the same on every run. `STRINGS` are text; `VALUES` adds JSON values of the wrong type; `NOTEBOOKS` are
malformed notebooks.
"""

from __future__ import annotations

CANARY = "/tmp/kakehashi-hostile-canary"  # a command injected anywhere would create this file

SHELL = [
    "$(touch {c})", "`touch {c}`", "; touch {c}", "&& touch {c}", "|| touch {c}", "| tee {c}", "> {c}", ">> {c}",
    "< /etc/passwd", "$(< /etc/passwd)", "${{IFS}}touch${{IFS}}{c}", "'; touch {c}; '", '"; touch {c}; "',
    '"$(touch {c})"', "'$(touch {c})'", "\\$(touch {c})", "$((1+1))", "${{HOME}}", "$HOME", "~root", "*", "?", "[a-z]",
    "{{a,b}}", "!!", "!$", "&", "& touch {c} &", "<(touch {c})", ">(touch {c})", "$'\\x41'", "%s%s%s%n", "%j", "%x",
    "\\", "'", '"', "`", "#", "# comment", "--help", "-rf /", "--output=/etc/passwd", "eval touch {c}",
    "exec touch {c}", ". /dev/stdin", "source /etc/profile", "a=b touch {c}", "$0", "$$", "$@", "${{PATH}}", "$1",
]

LINE_BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]

DIRECTIVES = [
    "#SBATCH --gres=gpu:8", "#SBATCH --account=other", "#SBATCH -p gpu", "#PBS -l select=99", "#PBS -A other",
    "#$ -l f_node=99", "#$ -P other", "#$ -g other", "#BSUB -q priority", "#BSUB -n 512", "  #SBATCH --exclusive",
    "#!/bin/sh", "#AWSBATCH instance=p5.48xlarge",
]

UNICODE = [
    "\u202e", "\u202dtxt.sh", "\u2066a\u2069", "\u200b", "\u200d", "\ufeff", "\u00a0", "\u3000", "ＳＢＡＴＣＨ",
    "＃SBATCH --gres=gpu:8", "＄(touch {c})", "；touch {c}", "｜touch {c}", "ａｌｉｃｅ", "аdmin", "vіsion",
    "\u0338", "e\u0301", "\U0001f600", "\U000e0041", "\ud7ff", "\ue000", "\uffff", "\U0010ffff", "ß", "İ", "ﬁ",
    "\u0000", "\x01", "\x1b[31m", "\x7f", "\x9b", "\t", "a\x00b",
]

TRAVERSAL = [
    "..", "../..", "../../etc/passwd", "/etc/passwd", "/", "//", "./", "~", "~/../..", "a/../../b", "..\\..\\win",
    "C:\\Windows", "a//b", "/proc/self/environ", "file:///etc/passwd", "%2e%2e%2f", "..%2f", "....//", ".",
    "-", "-n", "--", ".hidden", "a/.", "a/..", "~root/x", "$HOME/x", "/dev/null", "nul", "CON", "a" * 256,
    ("a/" * 40) + "b",
]

SIZES = ["", " ", "  \t ", "a" * 10_000, "$(touch {c})" * 800, "\n" * 10_000, "é" * 5_000, "\U0001f600" * 3_000]

NUMBERISH = [
    "-1", "0", "-0", "1e309", "-1e309", "NaN", "Infinity", "-Infinity", "9" * 400, "0x10", "1_000", "1.5",
    "99999999999999999999", "-99999999999999999999", "00:00:00", "-01:00:00", "99999:00:00", "1d1d", "2h; touch {c}",
]

FAMILIES = [SHELL, LINE_BREAKS, DIRECTIVES, UNICODE, TRAVERSAL, SIZES, NUMBERISH]

# Each attack alone, then inside a value that looks harmless, then after a line break of each kind: what a
# validator that only looks at the start, or only at "\n", would let through.
CARRIERS = ["{v}", "ok{v}", "{v}ok"]


def _strings() -> list[str]:
    seen: dict[str, None] = {}
    for family in FAMILIES:
        for attack in family:
            value = attack.replace("{c}", CANARY) if "{c}" in attack else attack
            value = value.replace("{{", "{").replace("}}", "}")
            for carrier in CARRIERS if len(value) < 200 else ["{v}"]:
                seen.setdefault(carrier.replace("{v}", value))
    for brk in LINE_BREAKS:
        for directive in DIRECTIVES[:6] + [f"touch {CANARY}"]:
            seen.setdefault(f"ok{brk}{directive}")
    return list(seen)


STRINGS: list[str] = _strings()

WRONG_TYPES: list[object] = [
    None, True, False, 0, -1, 1.5, -1e308, 10**30, -(10**30), [], [1], ["a", "b"], {}, {"a": 1}, {"$(x)": "y"},
    [[[]]], {"nested": {"deeper": [None]}}, [None], "", 2**63, -(2**63) - 1,
]

VALUES: list[object] = [*STRINGS, *WRONG_TYPES]


def _notebooks() -> list[object]:
    cell = {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": None, "outputs": [], "source": "x=1"}
    base = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}
    return [
        None, "", "not json", "{", "[]", 1, [], {}, {"cells": []}, {"nbformat": 4}, {**base, "nbformat": 3},
        {**base, "nbformat": "4"}, {**base, "nbformat": 99}, {**base, "cells": "x"}, {**base, "cells": [1]},
        {**base, "cells": [{"cell_type": "evil"}]}, {**base, "cells": [{**cell, "source": 5}]},
        {**base, "cells": [{**cell, "cell_type": "raw"}]}, {**base, "metadata": []}, {**base, "cells": [{**cell, "id": ""}]},
        {**base, "cells": [{**cell, "id": "$(touch " + CANARY + ")"}]}, {**base, "nbformat_minor": -1},
        {**base, "cells": [{**cell, "outputs": "x"}]}, '{"nbformat": 4}',
        {**base, "cells": [{**cell, "metadata": {"tags": "parameters"}}]},
    ]


NOTEBOOKS = _notebooks()

# Fields that only take a choice, a number or a slug get every family of attack but not every carrier of it:
# one value in seven, and every wrong JSON type (the whole corpus through them took minutes on a shared machine).
SAMPLE: list[object] = list({repr(v): v for v in [*STRINGS[::7], *WRONG_TYPES]}.values())

assert len(VALUES) >= 500, len(VALUES)
