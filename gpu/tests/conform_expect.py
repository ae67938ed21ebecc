#!/usr/bin/env python3
"""Checks a `kalman-oracle conform --strict --json` summary (stdin) against the expected verdicts.

    conform_expect.py EXPECT_FILE

Every fixture must PASS, except those EXPECT_FILE names, one per line, `fixture verdict reason`:
verdict UNVERIFIED (the fixture's budget allows an error as large as the scale: nothing is verified
there, and --strict fails it), SUSPECT (within budget, beyond the typical envelope: a known gap in the
fixtures' ensemble, said in the reason) or NONFINITE (a FAIL whose failing outputs are all non-finite: a known
limit of the kernel, e.g. binary32 decay ratios that overflow). A fixture named there that passes, or
fails another way, is reported, so the list cannot go stale. Exit 0 when all hold, 1 otherwise.
"""
import json
import sys


def main():
    expected = {}
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, verdict = line.split()[:2]
                expected[name] = verdict
    summary = json.load(sys.stdin)
    bad = []
    seen = set()
    for row in summary.get("fixtures", []):
        name = row["fixture"].removesuffix(".safetensors")
        verdict = row["verdict"]
        seen.add(name)
        want = expected.get(name, "PASS")
        if want == "NONFINITE":
            outputs = (row.get("report") or {}).get("outputs", [])
            failing = [o for o in outputs if o.get("verdict") == "FAIL"]
            got = "NONFINITE" if verdict == "FAIL" and failing and all(o.get("nonfinite_elements", 0) > 0
                                                                       for o in failing) else verdict
        else:
            got = verdict
        status = "ok" if got == want else "UNEXPECTED"
        print(f"{status:10s} {name:40s} {got:12s} (expected {want})")
        if got != want:
            bad.append(name)
    for name in expected:
        if name not in seen:
            print(f"UNEXPECTED {name:40s} {'absent':12s} (expected {expected[name]})")
            bad.append(name)
    print(f"{len(seen) - len([b for b in bad if b in seen])} of {len(seen)} fixtures as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
