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
  extract      extract the scan models of Scan.v to OCaml (fidelity/ScanExtraction.v) and compile
               them with fidelity/scan_trees.ml, in the build directory.
  fidelity     run the extracted models and the compiled C++ scan headers (fidelity/scan_trees.cpp)
               on expression trees and compare their output streams byte for byte; with
               --expect-difference (the meta-tests) pass only if they differ, first in that schedule.
  meta         copy the development to a temporary directory, plant one break (a textual
               replacement in a definition, from meta_breaks.txt), compile in order, and pass
               only if compilation fails exactly in the expected file. With --prebuilt, the
               files before the broken one are taken from the compile tests' output where it is
               current (the same source, the .vo no older than it) instead of compiled again.
"""

import argparse
import os
import re
import shutil
import signal
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


# ---- extract, fidelity ---------------------------------------------------------------------
#
# The scan models of Scan.v are extracted to OCaml (fidelity/ScanExtraction.v) and compiled with
# fidelity/scan_trees.ml into a program that runs them on the free magma of expression trees; the
# C++ program fidelity/scan_trees.cpp runs the reference's compiled scan headers on the same
# magma. Both print every output tree of every case (the leaves 0 … n−1, `e` for the identity,
# `(later earlier)` for a compose), and the two streams must be equal byte for byte: the same
# composes, with the same operands, grouped the same way, in every output. A compose with the
# identity would show as a tree containing `e`. The case list is made here, once, and read by both
# programs, so neither holds a copy of it.

FIDELITY_SCHEDULES = ["sequential", "hillis_steele", "sklansky", "brent_kung", "blelloch", "chunked"]
FIDELITY_CHUNK_SIZES = [1, 2, 3, 5, 8, 16, 64]
# Every length up to 64 (every tail shape of the largest chunk size, every level count up to 6),
# then each power of two from 2^7 to 2^10 with its two neighbours: the levels of the log-depth
# schedules change at powers of two, and an odd neighbour leaves an unpaired last element at
# every level.
FIDELITY_EVERY_LENGTH_UP_TO = 64
FIDELITY_EDGES = [2 ** k + d for k in range(7, 11) for d in (-1, 0, 1)]
FIDELITY_LENGTHS = list(range(0, FIDELITY_EVERY_LENGTH_UP_TO + 1)) + FIDELITY_EDGES


def fidelity_cases():
    """(schedule, mode, n, chunk size or None) in the order both programs print them: by length
    first, so that a difference at a small length is found before the large ones are computed."""
    cases = []
    for n in FIDELITY_LENGTHS:
        for schedule in FIDELITY_SCHEDULES:
            for mode in ("inclusive", "exclusive"):
                if schedule != "chunked":
                    cases.append((schedule, mode, n, None))
                    continue
                # c > n + 1 is the same single chunk as c = n + 1.
                cases.extend((schedule, mode, n, c) for c in FIDELITY_CHUNK_SIZES if c <= n + 1)
    return cases


def case_line(case):
    schedule, mode, n, chunk = case
    return "%s %s %d %s" % (schedule, mode, n, "-" if chunk is None else chunk)


def cmd_extract(args):
    """Extract the models (ScanExtraction.v, against the compiled Scan.vo) and compile the OCaml
    program, all in the build directory."""
    fidelity_src = os.path.join(args.src, "fidelity")
    os.makedirs(args.out, exist_ok=True)
    if os.path.realpath(args.out) in (os.path.realpath(args.src), os.path.realpath(fidelity_src)):
        print("refusing to extract into the source tree: " + args.out)
        return 1
    for f in ("ScanExtraction.v", "scan_trees.ml"):
        shutil.copyfile(os.path.join(fidelity_src, f), os.path.join(args.out, f))
    for stale in ("scan_models.ml", "scan_models.mli", "scan_trees_coq"):
        if os.path.exists(os.path.join(args.out, stale)):
            os.remove(os.path.join(args.out, stale))
    steps = [
        ("coqc ScanExtraction.v",
         [args.coqc, "-Q", os.path.abspath(args.coq_out), LOGICAL, "ScanExtraction.v"]),
        ("ocamlfind ocamlopt",
         [args.ocamlfind, "ocamlopt", "-o", "scan_trees_coq", "scan_models.mli", "scan_models.ml",
          "scan_trees.ml"]),
    ]
    for label, cmd in steps:
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=args.out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=600)
        sys.stdout.write(proc.stdout)
        print("%s: %s in %.1f s" % (label, "ok" if proc.returncode == 0 else
                                    "FAILED (exit %d)" % proc.returncode, time.monotonic() - start))
        if proc.returncode != 0:
            return 1
    print("extracted the Scan.v models and built %s" % os.path.join(args.out, "scan_trees_coq"))
    return 0


def excerpt(line, at, width=80):
    """The part of a line around position `at`, with the elisions marked."""
    text = line.rstrip(b"\n").decode("ascii", "replace")
    lo, hi = max(0, at - width), min(len(text), at + width)
    return ("…" if lo > 0 else "") + text[lo:hi] + ("…" if hi < len(text) else "")


class Program:
    """One of the two programs, its output read line by line as it comes."""

    def __init__(self, path, cases_file):
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([path, cases_file], stdout=subprocess.PIPE, stderr=self.stderr,
                                     bufsize=1 << 20)

    def readline(self):
        return self.proc.stdout.readline()

    def finish(self, kill=False):
        """The exit status and what the program wrote to stderr."""
        if kill and self.proc.poll() is None:
            self.proc.kill()
        self.proc.stdout.close()
        rc = self.proc.wait()
        self.stderr.seek(0)
        err = self.stderr.read().decode("utf-8", "replace").strip()
        self.stderr.close()
        return rc, err


def cmd_fidelity(args):
    for what, path in (("the extracted models' program (proof.scan_extraction builds it)", args.model),
                       ("the C++ program (cmake --build <build> --target scan_trees scan_trees_mutants)",
                        args.cpp)):
        if not os.access(path, os.X_OK):
            print("%s is missing: %s" % (what, path))
            return 1
    cases = fidelity_cases()
    os.makedirs(args.out, exist_ok=True)
    # A file per run (the meta-tests may run at the same time as the test).
    fd, cases_file = tempfile.mkstemp(prefix="scan-cases-", suffix=".txt", dir=args.out)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        for case in cases:
            f.write(case_line(case) + "\n")
    start = time.monotonic()
    model = Program(args.model, cases_file)
    cpp = Program(args.cpp, cases_file)
    seen, composes, size = 0, 0, 0
    case, index = None, 0
    difference, complete = None, False
    try:
        while True:
            a, b = model.readline(), cpp.readline()
            if a != b:
                difference = (a, b)
                break
            if not a:
                complete = True
                break
            size += len(a)
            if a.startswith(b"# "):
                if case is not None and index != case[2]:
                    print("%s: %d outputs for n = %d (the driver and the programs disagree on the cases)"
                          % (case_line(case), index, case[2]))
                    return 1
                if seen >= len(cases) or a != ("# %s\n" % case_line(cases[seen])).encode("ascii"):
                    print("case %d: the programs print %r, the driver expects %r"
                          % (seen, a, case_line(cases[seen]) if seen < len(cases) else "the end"))
                    return 1
                case, index = cases[seen], 0
                seen += 1
            else:
                composes += a.count(b"(")
                index += 1
    finally:
        # Stop both programs at once when the comparison ended early.
        model_rc, model_err = model.finish(kill=not complete)
        cpp_rc, cpp_err = cpp.finish(kill=not complete)
        os.remove(cases_file)
    secs = time.monotonic() - start

    if difference is not None:
        a, b = difference
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        if case is None:
            where = "before the first case"
        else:
            schedule, mode, n, chunk = case
            where = "%s %s, n = %d%s, output %d" % (schedule, mode, n,
                                                     "" if chunk is None else ", chunk size %d" % chunk, index)
        print("first difference: %s (%d compose nodes equal before it)" % (where, composes))
        for label, line in (("Coq model", a), ("C++", b)):
            print("  %-10s %s" % (label + ":", excerpt(line, at) if line else "(end of output)"))
        for label, rc, err in (("Coq model", model_rc, model_err), ("C++", cpp_rc, cpp_err)):
            if rc not in (0, -signal.SIGKILL):  # not stopped by us
                print("  the %s program exited with %d" % (label, rc))
            if err:
                print("  %s stderr: %s" % (label, err[-2000:]))
        if args.expect_difference:
            if case is not None and case[0] == args.expect_difference:
                print("the comparison sees the planted bug (KALMAN_ORACLE_MUTANT=%s) in %s, as expected"
                      % (os.environ.get("KALMAN_ORACLE_MUTANT", "unset"), args.expect_difference))
                return 0
            print("expected the first difference in the %s schedule (FAIL)" % args.expect_difference)
            return 1
        print("the compiled C++ schedules do not compose as the extracted Coq models (FAIL)")
        return 1

    for label, rc, err in (("Coq model", model_rc, model_err), ("C++", cpp_rc, cpp_err)):
        if rc != 0:
            print("the %s program exited with %d%s" % (label, rc, ": " + err if err else ""))
            return 1
    if case is not None and index != case[2]:
        print("%s: %d outputs for n = %d" % (case_line(case), index, case[2]))
        return 1
    if seen != len(cases):
        print("the programs printed %d of the %d cases" % (seen, len(cases)))
        return 1
    print("%d cases (%s, inclusive and exclusive, chunk sizes %s; n = 0 … %d and %s), "
          "%d compose nodes in %d output trees compared (%.0f MB from each side), %.1f s: %s"
          % (len(cases), ", ".join(FIDELITY_SCHEDULES), ", ".join(map(str, FIDELITY_CHUNK_SIZES)),
             FIDELITY_EVERY_LENGTH_UP_TO, ", ".join(map(str, FIDELITY_EDGES)),
             composes, sum(c[2] for c in cases), size / 1e6, secs,
             "the expected difference was not seen (FAIL)" if args.expect_difference else
             "the compiled C++ schedules compose exactly as the extracted Coq models"))
    return 1 if args.expect_difference else 0


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


def copy_prebuilt(src, prebuilt, vfile, work):
    """Copy <prebuilt>/<vfile>o into `work` if it was compiled from the source as it is now: the
    copy of the .v next to it equals the source, and the .vo is no older than that copy (the
    compile test writes the copy, then the .vo). False (compile it here) otherwise. A break
    planted in a later file cannot change an earlier file's .vo, so reusing it is exact."""
    v, vo = os.path.join(prebuilt, vfile), os.path.join(prebuilt, vfile + "o")
    if not (os.path.isfile(v) and os.path.isfile(vo)) or os.path.getmtime(vo) < os.path.getmtime(v):
        return False
    with open(v, "rb") as a, open(os.path.join(src, vfile), "rb") as b:
        if a.read() != b.read():
            return False
    shutil.copyfile(vo, os.path.join(work, vfile + "o"))
    return True


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
        reused, reuse = [], bool(args.prebuilt)
        for f in files:
            # Reuse stops at the first file compiled here: the later .vo were checked against the
            # prebuilt one, not against this compile's.
            reuse = reuse and f != target and copy_prebuilt(args.src, args.prebuilt, f, work)
            if reuse:
                reused.append(f)
                continue
            if reused:
                print("%d file(s) before it taken compiled from %s" % (len(reused), args.prebuilt))
                reused = []
            rc, output, secs = run_coqc(args.coqc, work, f)
            if f == target:
                if rc == 0:
                    print("%s still compiles with the break planted: the proofs do not pin the "
                          "definition down (FAIL)" % f)
                    return 1
                # A failure to load the earlier files is not the break's doing (a stale .vo).
                if re.search(r"makes inconsistent assumptions|Cannot find (a physical path|library)|"
                             r"Unable to locate library", output):
                    sys.stdout.write(output)
                    print("%s fails to load the files before it, not because of the break (FAIL)" % f)
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
    p = sub.add_parser("extract")
    p.add_argument("--src", required=True)
    p.add_argument("--coq-out", required=True, help="where the compiled .vo files are")
    p.add_argument("--out", required=True)
    p.add_argument("--coqc", required=True)
    p.add_argument("--ocamlfind", required=True)
    p = sub.add_parser("fidelity")
    p.add_argument("--out", required=True, help="where the case list is written")
    p.add_argument("--model", required=True, help="the extracted models' program (extract)")
    p.add_argument("--cpp", required=True, help="the C++ program (fidelity/scan_trees.cpp)")
    p.add_argument("--expect-difference", metavar="SCHEDULE",
                   help="pass only if the streams differ, first in a case of this schedule")
    p = sub.add_parser("meta")
    p.add_argument("--src", required=True)
    p.add_argument("--coqc", required=True)
    p.add_argument("--breaks", required=True)
    p.add_argument("--prebuilt", metavar="DIR",
                   help="the compile tests' output: reuse its current .vo of the earlier files")
    p.add_argument("name")
    args = parser.parse_args()
    return {"compile": cmd_compile, "lint": cmd_lint, "assumptions": cmd_assumptions,
            "extract": cmd_extract, "fidelity": cmd_fidelity, "meta": cmd_meta}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
