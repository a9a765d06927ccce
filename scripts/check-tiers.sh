#!/usr/bin/env bash
# Checks that the test tiers of .config/nextest.toml (profiles fast, cluster, long) put every
# test in exactly one tier, so that the three tiers together run what `make test` runs.
#
# Usage:
#   cargo nextest list --workspace --message-format json > list.json
#   scripts/check-tiers.sh list.json       # or: ... | scripts/check-tiers.sh  (stdin, or '-')
#   scripts/check-tiers.sh --nextest       # runs cargo nextest list itself (builds if needed)
#   -v / --verbose                          # also print every test with its tier
#
# The list must come from the default profile without filters (every binary listed). The
# script evaluates each tier's `default-filter` itself (the filterset subset this file uses:
# all/none/test/package/binary/binary_id/kind/platform, and/or/not/-, the =, ~, /regex/ and
# #glob matchers). With --nextest it also asks nextest for each tier profile's own list and
# fails if nextest and this evaluation disagree.
#
# It also reads tests/tests/<file>.rs and warns (without failing) when a test in the fast tier
# starts a cluster (`Cluster::start`, `start_with`, `start_with_configs` or `from_nodes`, directly
# or through a helper in the same file) or a test in the cluster or long tier starts none: the classification
# rule is in .config/nextest.toml.
#
# Exit status: 0 all tests in exactly one tier, 1 otherwise, 2 usage or input errors.
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."

verbose=0
mode=file
input=-
while (($#)); do
  case "$1" in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -v | --verbose) verbose=1 ;;
    --nextest) mode=nextest ;;
    -) input=- ;;
    -*) echo "check-tiers.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    /*) input=$1 ;;
    *) input=$here/$1 ;;
  esac
  shift
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ $mode == nextest ]]; then
  CARGO_TARGET_DIR="$(./scripts/target-dir.sh)"
  export CARGO_TARGET_DIR
  for profile in default fast cluster long; do
    echo "check-tiers.sh: cargo nextest list --workspace --profile $profile" >&2
    cargo nextest list --workspace --locked --message-format json --profile "$profile" \
      >"$work/$profile.json"
  done
  input=$work/default.json
elif [[ $input == - ]]; then
  cat >"$work/default.json"
  input=$work/default.json
fi
[[ -r $input ]] || { echo "check-tiers.sh: cannot read $input" >&2; exit 2; }

read -r -d '' program <<'PY' || true
import json, os, re, sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

TIERS = ("fast", "cluster", "long")
list_path, work, mode, verbose = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"


def die(msg):
    print(f"check-tiers.sh: {msg}", file=sys.stderr)
    sys.exit(2)


# --- filtersets ---------------------------------------------------------------------------


class Unsupported(Exception):
    pass


def unescape(s):
    out, i = [], 0
    simple = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", "/": "/", ")": ")", ",": ","}
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n in simple:
                out.append(simple[n])
                i += 2
                continue
            m = re.match(r"u\{([0-9a-fA-F]{1,6})\}", s[i + 1 :])
            if m:
                out.append(chr(int(m.group(1), 16)))
                i += 1 + m.end()
                continue
            raise ValueError(f"invalid escape \\{n} in {s!r}")
        out.append(c)
        i += 1
    return "".join(out)


def glob_to_regex(g):
    # globset with backslash escapes off: * and ? match any character (no path separators in
    # names), [...] classes ([!...] negated), {a,b} alternatives.
    out, i, depth = [], 0, 0
    while i < len(g):
        c = g[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = g.index("]", i + 2 if g[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            body = g[i + 1 : j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j
        elif c == "{":
            out.append("(?:")
            depth += 1
        elif c == "}" and depth:
            out.append(")")
            depth -= 1
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def matcher(text, default):
    text = text.strip(" \r\n")
    kind = default
    if text[:1] in ("=", "~", "#"):
        kind, text = {"=": "equal", "~": "contains", "#": "glob"}[text[0]], text[1:]
    elif len(text) >= 2 and text[0] == "/" and text[-1] == "/":
        rx = re.compile(text[1:-1].replace("\\/", "/"))
        return lambda v: rx.search(v) is not None
    text = unescape(text)
    if kind == "equal":
        return lambda v: v == text
    if kind == "contains":
        return lambda v: text in v
    rx = re.compile(glob_to_regex(text), re.S)
    return lambda v: rx.fullmatch(v) is not None


PREDICATES = {
    # name: (field of a test, default matcher)
    "test": ("name", "contains"),
    "package": ("package", "glob"),
    "binary": ("binary_name", "glob"),
    "binary_id": ("binary_id", "glob"),
    "kind": ("kind", "equal"),
    "platform": ("platform", "equal"),
}


def parse_filterset(src):
    """Returns a predicate over test dicts, for the filterset `src`."""
    pos = 0

    def ws():
        nonlocal pos
        while pos < len(src) and src[pos] in " \r\n\t":
            pos += 1

    def peek_word(w):
        ws()
        return src.startswith(w, pos) and not re.match(r"[A-Za-z0-9_]", src[pos + len(w) : pos + len(w) + 1] or " ")

    def error(msg):
        raise ValueError(f"{msg} at offset {pos} in filterset:\n{src}")

    def leaf():
        nonlocal pos
        ws()
        m = re.compile(r"([a-z_]+)\(").match(src, pos)
        if not m:
            error("expected a predicate")
        name = m.group(1)
        pos = m.end()
        ws()
        if src.startswith("/", pos):  # regex: up to the next unescaped '/'
            end = pos + 1
            while end < len(src) and src[end] != "/":
                end += 2 if src[end] == "\\" else 1
            arg = src[pos : end + 1]
            pos = end + 1
            ws()
        else:
            end = pos
            while end < len(src) and src[end] != ")":
                end += 2 if src[end] == "\\" else 1
            arg = src[pos:end]
            if "(" in arg or "\n" in arg:
                error(f"{name}(): missing ')'")
            pos = end
        if not src.startswith(")", pos):
            error("expected ')'")
        pos += 1
        if name in ("all", "none"):
            if arg.strip():
                error(f"{name}() takes no argument")
            return (lambda t: True) if name == "all" else (lambda t: False)
        if name not in PREDICATES:
            raise Unsupported(f"{name}() (not evaluated by this script; use --nextest)")
        field, default = PREDICATES[name]
        match = matcher(arg, default)
        return lambda t: match(t[field])

    def atom():
        nonlocal pos
        ws()
        if src.startswith("(", pos):
            pos += 1
            e = expr_or()
            ws()
            if not src.startswith(")", pos):
                error("expected ')'")
            pos += 1
            return e
        return leaf()

    def expr_not():
        nonlocal pos
        ws()
        if src.startswith("!", pos):
            pos += 1
            e = expr_not()
            return lambda t: not e(t)
        if peek_word("not"):
            pos += 3
            e = expr_not()
            return lambda t: not e(t)
        return atom()

    def expr_and():
        nonlocal pos
        left = expr_not()
        while True:
            ws()
            if src.startswith("&", pos) or src.startswith("-", pos):
                op = src[pos]
                pos += 1
            elif peek_word("and"):
                op = "&"
                pos += 3
            else:
                return left
            right = expr_not()
            if op == "&":
                left = (lambda a, b: lambda t: a(t) and b(t))(left, right)
            else:
                left = (lambda a, b: lambda t: a(t) and not b(t))(left, right)

    def expr_or():
        nonlocal pos
        left = expr_and()
        while True:
            ws()
            if src.startswith("|", pos) or src.startswith("+", pos):
                pos += 1
            elif peek_word("or"):
                pos += 2
            else:
                return left
            right = expr_and()
            left = (lambda a, b: lambda t: a(t) or b(t))(left, right)

    e = expr_or()
    ws()
    if pos != len(src):
        error("unexpected text")
    return e


# --- the test list ------------------------------------------------------------------------


def load_list(path, universe):
    """Tests of a `cargo nextest list --message-format json` output: (binary_id, name) -> dict.

    With universe=False, only the tests the list's own filters matched."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        die(f"cannot read the test list {path}: {e}")
    if "rust-suites" not in data:
        die(f"{path} is not `cargo nextest list --message-format json` output")
    tests = {}
    for bid, suite in data["rust-suites"].items():
        if universe and suite.get("status", "listed") != "listed":
            die(
                f"{path}: binary {bid} was not listed ({suite.get('status')}): make the list "
                "with the default profile and no filters"
            )
        for name, case in suite.get("testcases", {}).items():
            if not universe and case.get("filter-match", {}).get("status") != "matches":
                continue
            tests[(bid, name)] = {
                "name": name,
                "binary_id": bid,
                "binary_name": suite["binary-name"],
                "package": suite["package-name"],
                "kind": suite["kind"],
                "platform": suite.get("build-platform", "target"),
            }
    return tests


tests = load_list(list_path, universe=True)
if not tests:
    die(f"{list_path} lists no tests")

with open(".config/nextest.toml", "rb") as f:
    config = tomllib.load(f)
profiles = config.get("profile", {})
filters = {}
for tier in TIERS:
    src = profiles.get(tier, {}).get("default-filter")
    if src is None:
        die(f".config/nextest.toml: profile.{tier} has no default-filter")
    try:
        filters[tier] = parse_filterset(src)
    except Unsupported as e:
        if mode != "nextest":
            die(f"profile.{tier}: {e}")
        filters[tier] = None
    except ValueError as e:
        die(f"profile.{tier}: {e}")

tier_of = {}
for key, t in tests.items():
    tier_of[key] = [tier for tier in TIERS if filters[tier] and filters[tier](t)]

failures = 0
if mode == "nextest":
    # nextest's own evaluation of each profile's default filter is the authority.
    for tier in TIERS:
        theirs = set(load_list(os.path.join(work, f"{tier}.json"), universe=False))
        if filters[tier] is not None:
            ours = {k for k, v in tier_of.items() if tier in v}
            for k in sorted(ours ^ theirs):
                failures += 1
                side = "nextest" if k in theirs else "this script"
                print(f"DISAGREE {tier}: only {side} puts {k[0]} {k[1]} in it")
        for k in tests:
            in_tier = k in theirs
            if in_tier != (tier in tier_of[k]):
                tier_of[k] = [x for x in tier_of[k] if x != tier] + ([tier] if in_tier else [])
        for k in sorted(theirs - set(tests)):
            failures += 1
            print(f"UNKNOWN {tier}: {k[0]} {k[1]} is not in the default profile's list")

for key in sorted(tests):
    where = tier_of[key]
    if len(where) != 1:
        failures += 1
        what = "in no tier" if not where else "in " + " and ".join(where)
        print(f"{'MISSING' if not where else 'TWICE'}: {key[0]} {key[1]} is {what}")

# --- heuristic: does each process test's tier match what its source starts? ----------------


def fn_bodies(src):
    bodies, tests_ = {}, []
    for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?fn\s+(\w+)", src):
        i = src.find("{", m.end())
        semi = src.find(";", m.end())
        if i < 0 or (0 <= semi < i):
            continue
        depth, j = 0, i
        while j < len(src):
            depth += {"{": 1, "}": -1}.get(src[j], 0)
            if depth == 0:
                break
            j += 1
        bodies[m.group(2)] = src[i : j + 1]
        if re.search(r"#\[(tokio::)?test\b", m.group(1)):
            tests_.append(m.group(2))
    return bodies, tests_


def starts_cluster(bodies, name, seen):
    if name in seen:
        return False
    seen.add(name)
    body = bodies.get(name, "")
    if any(f"Cluster::{f}(" in body for f in ("start", "start_with", "start_with_configs", "from_nodes")):
        return True
    return any(
        callee != name and re.search(r"\b" + callee + r"\s*(::<[^>]*>)?\(", body) and starts_cluster(bodies, callee, seen)
        for callee in bodies
    )


warnings = 0
for bid in sorted({k[0] for k in tests}):
    sample = next(t for k, t in tests.items() if k[0] == bid)
    if sample["package"] != "jetraft-tests" or sample["kind"] != "test":
        continue
    path = os.path.join("tests", "tests", sample["binary_name"] + ".rs")
    if not os.path.exists(path):
        continue
    bodies, _ = fn_bodies(open(path).read())
    for (b, name), where in sorted(tier_of.items()):
        if b != bid or len(where) != 1 or name not in bodies:
            continue
        cluster = starts_cluster(bodies, name, set())
        if cluster and where[0] == "fast":
            warnings += 1
            print(f"warning: {path}: {name} starts a cluster but is in the fast tier")
        elif not cluster and where[0] != "fast":
            warnings += 1
            print(f"warning: {path}: {name} starts no cluster but is in the {where[0]} tier")

# --- report -------------------------------------------------------------------------------

rows = {}
for (bid, name), where in tier_of.items():
    row = rows.setdefault(bid, {"tests": 0, **{t: 0 for t in TIERS}})
    row["tests"] += 1
    for t in where:
        row[t] += 1
width = max(len(b) for b in rows)
print(f"{'binary':<{width}}  tests   fast cluster   long")
for bid in sorted(rows):
    r = rows[bid]
    print(f"{bid:<{width}}  {r['tests']:5} {r['fast']:6} {r['cluster']:7} {r['long']:6}")
total = {t: sum(r[t] for r in rows.values()) for t in ("tests",) + TIERS}
print(f"{'total':<{width}}  {total['tests']:5} {total['fast']:6} {total['cluster']:7} {total['long']:6}")
if verbose:
    for key in sorted(tests):
        print(f"{'+'.join(tier_of[key]) or '-':8} {key[0]} {key[1]}")
if failures:
    print(f"check-tiers.sh: {failures} problem(s): every test must be in exactly one tier", file=sys.stderr)
    sys.exit(1)
note = f" ({warnings} warning(s) above)" if warnings else ""
print(f"check-tiers.sh: ok, each of {len(tests)} tests is in exactly one tier{note}")
PY

python3 -c "$program" "$input" "$work" "$mode" "$verbose"
