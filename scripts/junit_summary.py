"""Per-cause summary of a pytest junit XML file: the counts, then every failure and error grouped by test
file and the first line of its message (numbers and addresses blanked so that one cause is one group).

    python scripts/junit_summary.py junit.xml [--max-ids 6]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import xml.etree.ElementTree as ET


def _cause(text: str) -> str:
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "(no message)")
    line = re.sub(r"0x[0-9a-f]+", "0x_", line)
    line = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", line)
    return line[:200]


def summarize(path: str, max_ids: int = 6) -> tuple[str, int]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = collections.Counter()
    groups: dict[tuple[str, str, str], list[str]] = collections.defaultdict(list)
    for suite in suites:
        for case in suite.iter("testcase"):
            kind = "passed"
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    kind = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                    if kind != "skipped":
                        msg = child.get("message") or child.text or ""
                        file = (case.get("classname") or "").split(".")[-1] or case.get("file", "?")
                        groups[(kind, file, _cause(msg))].append(case.get("name", "?"))
                    break
            counts[kind] += 1
    out = [
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors, {counts['skipped']} skipped"
    ]
    for (kind, file, cause), ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = ", ".join(ids[:max_ids]) + (f", ... ({len(ids)} in all)" if len(ids) > max_ids else "")
        out.append(f"- {len(ids):4d} {kind} in {file}: {cause}\n        {shown}")
    return "\n".join(out), counts["failed"] + counts["error"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("junit")
    ap.add_argument("--max-ids", type=int, default=6)
    args = ap.parse_args(argv)
    text, bad = summarize(args.junit, args.max_ids)
    print(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
