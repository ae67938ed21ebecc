#!/usr/bin/env python3
"""The CTest driver of the Coq proofs (label `proof`; proofs/CMakeLists.txt).

Subcommands:
  compile      copy one .v file into the build directory and compile it there (never in the
               source tree), with its dependencies already compiled by the earlier tests.
  lint         fail on Admitted, admit, Abort, give_up, on any Axiom / Parameter / Conjecture,
               on Hypothesis / Variable / Context outside a Section (each would become an
               axiom), on unset kernel checks, and on a .v file missing from _CoqProject,
               unless the declaration's qualified name is in allowed_axioms.txt.
  assumptions  Print Assumptions for every Theorem / Lemma / Corollary / Proposition / Fact /
               Remark of the development and fail on any axiom not in allowed_axioms.txt.
  fidelity     evaluate the scan models of Scan.v in Coq on expression trees and compare them,
               compose for compose, with a loop-for-loop transcription of the C++ schedules.
  meta         copy the development to a temporary directory, plant one break (a textual
               replacement in a definition, from meta_breaks.txt), compile in order, and pass
               only if compilation fails exactly in the expected file.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

LOGICAL = "KalmanOracle"


def project_files(src):
    """The .v files of _CoqProject, in order."""
    files = []
    with open(os.path.join(src, "_CoqProject"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.endswith(".v"):
                files.append(line)
    return files


def read_allowed(path):
    allowed = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                allowed.add(line)
    return allowed


def strip_comments(text):
    """Coq source without comments (nested) and string literals, newlines kept."""
    out = []
    i, n, depth = 0, len(text), 0
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            if c == '"':
                if i + 1 < n and text[i + 1] == '"':  # "" escapes a quote
                    i += 2
                    continue
                in_string = False
            out.append("\n" if c == "\n" else " ")
            i += 1
        elif text.startswith("(*", i):
            depth += 1
            out.append("  ")
            i += 2
        elif depth > 0 and text.startswith("*)", i):
            depth -= 1
            out.append("  ")
            i += 2
        elif depth > 0:
            out.append("\n" if c == "\n" else " ")
            i += 1
        elif c == '"':
            in_string = True
            out.append(" ")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def run_coqc(coqc, workdir, vfile, timeout=600):
    cmd = [coqc, "-Q", workdir, LOGICAL, os.path.join(workdir, vfile)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout, time.monotonic() - start


# ---- compile -------------------------------------------------------------------------------

def cmd_compile(args):
    os.makedirs(args.out, exist_ok=True)
    if os.path.realpath(args.out) == os.path.realpath(args.src):
        print("refusing to compile in the source tree: " + args.src)
        return 1
    shutil.copyfile(os.path.join(args.src, args.file), os.path.join(args.out, args.file))
    rc, output, secs = run_coqc(args.coqc, args.out, args.file)
    sys.stdout.write(output)
    print("coqc %s: %s in %.1f s" % (args.file, "ok" if rc == 0 else "FAILED (exit %d)" % rc, secs))
    return 0 if rc == 0 else 1


# ---- lint ----------------------------------------------------------------------------------

FORBIDDEN = ["Admitted", "admit", "Abort", "give_up", "Admit"]
AXIOM_KEYWORDS = ["Axiom", "Axioms", "Conjecture", "Conjectures", "Parameter", "Parameters"]
SECTION_ONLY = ["Hypothesis", "Hypotheses", "Variable", "Variables", "Context"]
WORD = r"(?<![A-Za-z0-9_'.])%s(?![A-Za-z0-9_'])"


def sentences(text):
    """(line number, sentence) pairs: a sentence ends with a period followed by white space
    (or the end of the text); bullets and braces in front of it are dropped."""
    start, line = 0, 1
    for m in re.finditer(r"\.(?=\s|$)", text):
        chunk = text[start:m.end()]
        lead = len(chunk) - len(chunk.lstrip())
        yield line + chunk[:lead].count("\n"), re.sub(r"^[\s\-+*{}]*", "", chunk)
        line += chunk.count("\n")
        start = m.end()


def lint_file(path, modname, allowed):
    problems = []
    text = strip_comments(open(path, encoding="utf-8").read())
    for lineno, line in enumerate(text.split("\n"), 1):
        for word in FORBIDDEN:
            if re.search(WORD % word, line):
                problems.append("%s:%d: forbidden `%s`" % (path, lineno, word))
        if re.search(r"\bUnset\s+(Guard|Positivity|Universe)\s+Checking", line) or \
           re.search(r"\bbypass_check\b", line):
            problems.append("%s:%d: kernel checks disabled" % (path, lineno))
    stack = []  # open Sections and Modules
    for lineno, sentence in sentences(text):
        m = re.match(r"(Section|Module(?:\s+Type)?)\s+([A-Za-z_][A-Za-z0-9_']*)\s*\.$", sentence)
        if m:
            stack.append(("Section" if m.group(1) == "Section" else "Module", m.group(2)))
            continue
        m = re.match(r"End\s+([A-Za-z_][A-Za-z0-9_']*)\s*\.$", sentence)
        if m:
            if not stack or stack[-1][1] != m.group(1):
                problems.append("%s:%d: unbalanced End %s" % (path, lineno, m.group(1)))
            else:
                stack.pop()
            continue
        m = re.match(r"(?:#\[[^\]]*\]\s*)?(?:(?:Local|Global|Polymorphic|Monomorphic)\s+)*"
                     r"([A-Z][A-Za-z]*)\b(.*)", sentence, re.S)
        if not m:
            continue
        keyword, rest = m.group(1), m.group(2)
        in_section = any(kind == "Section" for kind, _ in stack)
        if keyword in AXIOM_KEYWORDS or (keyword in SECTION_ONLY and not in_section):
            head = rest.split(":", 1)[0]
            if re.search(r"[({\[]", head):
                names = re.findall(r"[({\[]\s*([^:(){}\[\]]*?)\s*:", rest)
            else:
                names = [head]
            names = [n for group in names for n in group.split()] or ["?"]
            for name in names:
                qualified = "%s.%s.%s" % (LOGICAL, modname, name)
                if qualified not in allowed:
                    where = "in a Module" if stack else "at top level"
                    problems.append("%s:%d: `%s %s` %s (not in allowed_axioms.txt)"
                                    % (path, lineno, keyword, name, where))
    if stack:
        problems.append("%s: unclosed %s" % (path, ", ".join(k + " " + n for k, n in stack)))
    return problems


def cmd_lint(args):
    allowed = read_allowed(args.allowed)
    listed = project_files(args.src)
    problems = []
    present = sorted(f for f in os.listdir(args.src) if f.endswith(".v"))
    for f in present:
        if f not in listed:
            problems.append("%s is not listed in _CoqProject (it would never be compiled)" % f)
    for f in listed:
        path = os.path.join(args.src, f)
        if not os.path.exists(path):
            problems.append("_CoqProject lists %s, which does not exist" % f)
            continue
        problems += lint_file(path, f[:-2], allowed)
    for p in problems:
        print(p)
    print("checked %d files: %s" % (len(listed), "FAILED" if problems else
                                     "no Admitted, admit, Abort or undeclared axioms"))
    return 1 if problems else 0


# ---- assumptions ---------------------------------------------------------------------------

THEOREM = re.compile(r"(?m)^\s*(?:Theorem|Lemma|Corollary|Proposition|Fact|Remark)\s+"
                     r"([A-Za-z_][A-Za-z0-9_']*)")


def print_assumptions(coqc, out, files, terms):
    """Print Assumptions of each term (a list of (label, coq term)); axiom names per label."""
    probe = "ZAssumptions.v"
    with open(os.path.join(out, probe), "w", encoding="utf-8") as f:
        f.write("From %s Require %s.\n" % (LOGICAL, " ".join(v[:-2] for v in files)))
        for i, (_, term) in enumerate(terms):
            f.write("Definition ko_assumptions_%d := %s.\n" % (i, term))
            f.write("Print Assumptions ko_assumptions_%d.\n" % i)
    rc, output, secs = run_coqc(coqc, out, probe)
    if rc != 0:
        sys.stdout.write(output)
        raise RuntimeError("Print Assumptions failed (exit %d)" % rc)
    blocks = [b for b in re.split(r"(?m)^(?=Axioms:|Closed under the global context)", output)
              if b.strip()]
    if len(blocks) != len(terms):
        sys.stdout.write(output)
        raise RuntimeError("expected %d Print Assumptions answers, got %d" % (len(terms), len(blocks)))
    result = []
    for (label, _), block in zip(terms, blocks):
        axioms = []
        if block.startswith("Axioms:"):
            for line in block.split("\n")[1:]:
                m = re.match(r"(\S+)", line)
                if m:
                    axioms.append(m.group(1))
        result.append((label, axioms))
    return result, secs


def cmd_assumptions(args):
    """One Print Assumptions per file, on the tuple of all its theorems (one traversal of the
    dependency graph instead of one per theorem); a file that uses an axiom outside the
    allow-list is then examined theorem by theorem, to name the culprits."""
    allowed = read_allowed(args.allowed)
    files = project_files(args.src)
    theorems = {}
    for f in files:
        text = strip_comments(open(os.path.join(args.src, f), encoding="utf-8").read())
        theorems[f] = ["%s.%s.%s" % (LOGICAL, f[:-2], n) for n in THEOREM.findall(text)]
    os.makedirs(args.out, exist_ok=True)
    terms = [(f, "(%s, tt)" % ", ".join("@" + n for n in theorems[f])) for f in files if theorems[f]]
    try:
        per_file, secs = print_assumptions(args.coqc, args.out, files, terms)
    except RuntimeError as err:
        print(err)
        return 1
    total = sum(len(v) for v in theorems.values())
    print("Print Assumptions over all %d theorems, lemmas and corollaries (%.1f s):" % (total, secs))
    failed = False
    for f, axioms in per_file:
        bad = [a for a in axioms if a not in allowed]
        print("  %-14s %3d theorems: %s%s" % (f, len(theorems[f]),
                                              ", ".join(axioms) if axioms else "closed under the global context",
                                              "" if not bad else "   NOT ALLOWED: " + ", ".join(bad)))
        if bad:
            failed = True
            try:
                detail, _ = print_assumptions(args.coqc, args.out, files,
                                              [(n, "@" + n) for n in theorems[f]])
            except RuntimeError as err:
                print(err)
                continue
            for name, axioms_n in detail:
                for a in axioms_n:
                    if a not in allowed:
                        print("%s depends on %s, which is not in allowed_axioms.txt" % (name, a))
    return 1 if failed else 0


# ---- fidelity ------------------------------------------------------------------------------
#
# The scan models of Scan.v, evaluated by Coq itself (vm_compute) on the free magma of
# expression trees (leaves L 0 … L n−1, the identity L 999, O later earlier for a compose),
# must perform exactly the composes, with the same operands in the same order, as the C++
# schedules of reference/include/kalman_oracle/scan/*.hpp, transcribed loop for loop below.
# Equal trees for every output mean the same compose tree, hence the same rounding behaviour;
# an identity inside a tree would show a compose with the identity.

E = ("L", 999)


def O(later, earlier):
    return ("O", later, earlier)


def cpp_sequential(xs):
    out = []
    for t, x in enumerate(xs):
        out.append(x if t == 0 else O(x, out[t - 1]))
    return out


def cpp_exclusive_from_inclusive(inclusive, xs):
    return [] if not xs else [E] + inclusive(xs[:-1])


def cpp_hillis_steele(xs):
    n = len(xs)
    current, nxt = list(xs), list(xs)
    d = 1
    while d < n:
        for i in range(d // 2, d):
            nxt[i] = current[i]
        for i in range(d, n):
            nxt[i] = O(current[i], current[i - d])
        current, nxt = nxt, current
        d *= 2
    return current


def cpp_blelloch_sweeps(xs):
    n = len(xs)
    a = list(xs)
    d = 1
    while d < n:
        i = 0
        while i + d < n:
            right = min(i + 2 * d - 1, n - 1)
            a[right] = O(a[right], a[i + d - 1])
            i += 2 * d
        d *= 2
    total = a[n - 1]
    a[n - 1] = E
    top = 1 << ((n - 1).bit_length() - 1) if n >= 2 else 0  # bit_floor(n - 1)
    d = top
    while d > 0:
        i = 0
        while i + d < n:
            left, right = i + d - 1, min(i + 2 * d - 1, n - 1)
            left_total = a[left]
            a[left] = a[right]
            a[right] = left_total if i == 0 else O(left_total, a[right])
            i += 2 * d
        d //= 2
    return a, total


def cpp_blelloch_exclusive(xs):
    return [] if not xs else cpp_blelloch_sweeps(xs)[0]


def cpp_blelloch_inclusive(xs):
    if not xs:
        return []
    ex, total = cpp_blelloch_sweeps(xs)
    return ex[1:] + [total]


def cpp_brent_kung(xs):
    n = len(xs)
    a = list(xs)
    top, s = 0, 1
    while 2 * s <= n:
        for i in range(2 * s - 1, n, 2 * s):
            a[i] = O(a[i], a[i - s])
        top, s = s, 2 * s
    s = top
    while s >= 1:
        for i in range(3 * s - 1, n, 2 * s):
            a[i] = O(a[i], a[i - s])
        s //= 2
    return a


def cpp_sklansky(xs):
    n = len(xs)
    a = list(xs)
    s = 1
    while s < n:
        block = 0
        while block + s < n:
            for i in range(block + s, min(block + 2 * s, n)):
                a[i] = O(a[i], a[(i & ~(2 * s - 1)) + s - 1])
            block += 2 * s
        s *= 2
    return a


def cpp_chunked(xs, c):
    n = len(xs)
    chunks = (n + c - 1) // c
    local = list(xs)
    totals = []
    for k in range(chunks):
        begin, end = k * c, min(k * c + c, n)
        for i in range(begin + 1, end):
            local[i] = O(local[i], local[i - 1])
        totals.append(local[end - 1])
    carry = cpp_exclusive_from_inclusive(cpp_sequential, totals)
    for k in range(1, chunks):
        for i in range(k * c, min(k * c + c, n)):
            local[i] = O(local[i], carry[k])
    return local


def parse_coq_lists(output):
    """The `= [...] : list ex` answers of Eval, as Python trees."""
    tokens = re.findall(r"\[|\]|;|\(|\)|\bO\b|\bL\b|\d+|:|=|list|ex", output)
    pos = [0]

    def peek():
        return tokens[pos[0]]

    def take(expected=None):
        tok = tokens[pos[0]]
        if expected is not None and tok != expected:
            raise ValueError("expected %s, got %s at token %d" % (expected, tok, pos[0]))
        pos[0] += 1
        return tok

    def term():
        tok = take()
        if tok == "(":
            t = term()
            take(")")
            return t
        if tok == "L":
            return ("L", int(take()))
        if tok == "O":
            return ("O", term(), term())
        raise ValueError("unexpected token " + tok)

    answers = []
    while pos[0] < len(tokens):
        take("=")
        take("[")
        items = []
        while peek() != "]":
            items.append(term())
            if peek() == ";":
                take(";")
        take("]")
        take(":")
        take("list")
        take("ex")
        answers.append(items)
    return answers


def show(t):
    return "x%d" % t[1] if t[0] == "L" and t[1] != 999 else ("e" if t[0] == "L" else
                                                              "(%s∘%s)" % (show(t[1]), show(t[2])))


def cmd_fidelity(args):
    lengths = list(range(0, 18)) + [31, 32, 33]
    chunk_sizes = [1, 2, 3, 5, 8]
    cases = []  # (label, coq expression, expected)
    schedules = [
        ("hillis_steele", "Scan.hillis_steele ex O (L 999)", cpp_hillis_steele),
        ("sklansky", "Scan.sklansky ex O (L 999)", cpp_sklansky),
        ("brent_kung", "Scan.brent_kung ex O (L 999)", cpp_brent_kung),
        ("blelloch_inclusive", "Scan.blelloch_inclusive ex O (L 999)", cpp_blelloch_inclusive),
        ("blelloch_exclusive", "Scan.blelloch_exclusive ex O (L 999)", cpp_blelloch_exclusive),
        ("seq_inclusive", "Scan.seq_inclusive ex O", cpp_sequential),
        ("seq_exclusive", "Scan.seq_exclusive ex O (L 999)",
         lambda xs: cpp_exclusive_from_inclusive(cpp_sequential, xs)),
        ("hillis_steele_exclusive",
         "Scan.exclusive_from_inclusive ex (L 999) (Scan.hillis_steele ex O (L 999))",
         lambda xs: cpp_exclusive_from_inclusive(cpp_hillis_steele, xs)),
        ("sklansky_exclusive",
         "Scan.exclusive_from_inclusive ex (L 999) (Scan.sklansky ex O (L 999))",
         lambda xs: cpp_exclusive_from_inclusive(cpp_sklansky, xs)),
        ("brent_kung_exclusive",
         "Scan.exclusive_from_inclusive ex (L 999) (Scan.brent_kung ex O (L 999))",
         lambda xs: cpp_exclusive_from_inclusive(cpp_brent_kung, xs)),
    ]
    for c in chunk_sizes:
        schedules.append(("chunked(c=%d)" % c, "Scan.chunked ex O (L 999) %d" % c,
                          lambda xs, c=c: cpp_chunked(xs, c)))
        schedules.append(("chunked_exclusive(c=%d)" % c,
                          "Scan.exclusive_from_inclusive ex (L 999) (Scan.chunked ex O (L 999) %d)" % c,
                          lambda xs, c=c: cpp_exclusive_from_inclusive(lambda ys: cpp_chunked(ys, c), xs)))
    for name, coq, cpp in schedules:
        for n in lengths:
            xs = [("L", i) for i in range(n)]
            cases.append(("%s n=%d" % (name, n), "%s (map L (seq 0 %d))" % (coq, n), cpp(xs)))
    os.makedirs(args.out, exist_ok=True)
    probe = "ZFidelity.v"
    with open(os.path.join(args.out, probe), "w", encoding="utf-8") as f:
        f.write("From Coq Require Import List.\nImport ListNotations.\n")
        f.write("From %s Require Scan.\n" % LOGICAL)
        f.write("Inductive ex := L (n : nat) | O (later earlier : ex).\n")
        f.write("Set Printing Depth 1000000.\nSet Printing Width 1000000.\n")
        for _, term, _ in cases:
            f.write("Eval vm_compute in %s.\n" % term)
    rc, output, secs = run_coqc(args.coqc, args.out, probe)
    if rc != 0:
        sys.stdout.write(output[-4000:])
        print("evaluating the Coq scan models failed (exit %d)" % rc)
        return 1
    answers = parse_coq_lists(output)
    if len(answers) != len(cases):
        print("expected %d answers from Coq, parsed %d" % (len(cases), len(answers)))
        return 1
    bad = 0
    for (label, _, expected), got in zip(cases, answers):
        if got != expected:
            bad += 1
            if bad <= 5:
                print("%s: the Coq model differs from the C++ schedule" % label)
                for t, (g, w) in enumerate(zip(got, expected)):
                    if g != w:
                        print("  output %d: Coq %s, C++ %s" % (t, show(g), show(w)))
                        break
                else:
                    print("  lengths: Coq %d, C++ %d" % (len(got), len(expected)))
    composes = sum(repr(e).count("'O'") for _, _, e in cases)
    print("%d cases (%d schedules × %d lengths up to %d), %d composes compared, %.1f s: %s"
          % (len(cases), len(schedules), len(lengths), max(lengths), composes, secs,
             "the Coq models compose exactly as the C++ schedules" if not bad
             else "%d cases differ" % bad))
    return 1 if bad else 0


# ---- meta ----------------------------------------------------------------------------------

def read_breaks(path):
    """[name] blocks with file = / find = / replace = lines (values to the end of the line)."""
    breaks, current = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            m = re.match(r"\[([A-Za-z0-9_]+)\]\s*$", line)
            if m:
                current = breaks.setdefault(m.group(1), {})
                continue
            key, sep, value = line.partition("=")
            if current is None or not sep:
                raise ValueError("bad line in %s: %s" % (path, line))
            current[key.strip()] = value[1:] if value.startswith(" ") else value
    return breaks


def cmd_meta(args):
    brk = read_breaks(args.breaks)[args.name]
    target, find, replace = brk["file"], brk["find"], brk["replace"]
    files = project_files(args.src)
    if target not in files:
        print("%s is not in _CoqProject" % target)
        return 1
    work = tempfile.mkdtemp(prefix="kalman-proof-meta-")
    try:
        for f in files:
            shutil.copyfile(os.path.join(args.src, f), os.path.join(work, f))
        path = os.path.join(work, target)
        text = open(path, encoding="utf-8").read()
        count = text.count(find)
        if count != 1:
            print("planted break %s: `%s` occurs %d times in %s (expected once): the break is stale"
                  % (args.name, find, count, target))
            return 1
        with open(path, "w", encoding="utf-8") as out:
            out.write(text.replace(find, replace))
        print("planted break %s in %s:\n  - %s\n  + %s" % (args.name, target, find, replace))
        for f in files:
            rc, output, secs = run_coqc(args.coqc, work, f)
            if f == target:
                if rc == 0:
                    print("%s still compiles with the break planted: the proofs do not pin the "
                          "definition down (FAIL)" % f)
                    return 1
                where = ""
                m = re.search(r'File "[^"]*", line (\d+)', output)
                if m:
                    lineno = int(m.group(1))
                    heads = re.findall(r"(?m)^\s*(?:Theorem|Lemma|Corollary|Definition|Fixpoint|"
                                       r"Inductive|Record)\s+([A-Za-z_][A-Za-z0-9_']*)",
                                       "\n".join(text.replace(find, replace).split("\n")[:lineno]))
                    where = " at line %d%s" % (lineno, ", in " + heads[-1] if heads else "")
                error = output.strip()[output.find("Error"):] if "Error" in output else output.strip()
                print("%s fails to compile%s, as expected (%.1f s):\n    %s"
                      % (f, where, secs, "\n    ".join(error.split("\n")[:8])))
                return 0
            if rc != 0:
                sys.stdout.write(output)
                print("%s failed before the expected file %s (FAIL)" % (f, target))
                return 1
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compile")
    p.add_argument("--src", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--coqc", required=True)
    p.add_argument("file")
    p = sub.add_parser("lint")
    p.add_argument("--src", required=True)
    p.add_argument("--allowed", required=True)
    p = sub.add_parser("assumptions")
    p.add_argument("--src", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--coqc", required=True)
    p.add_argument("--allowed", required=True)
    p = sub.add_parser("fidelity")
    p.add_argument("--src", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--coqc", required=True)
    p = sub.add_parser("meta")
    p.add_argument("--src", required=True)
    p.add_argument("--coqc", required=True)
    p.add_argument("--breaks", required=True)
    p.add_argument("name")
    args = parser.parse_args()
    return {"compile": cmd_compile, "lint": cmd_lint, "assumptions": cmd_assumptions,
            "fidelity": cmd_fidelity, "meta": cmd_meta}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
