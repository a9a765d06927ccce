#!/usr/bin/env bash
# Runs nats.js's own Deno test suites against a server binary as if it were nats-server. Not part
# of CI (the suites' source is not in this repository); fills the README's "Upstream client suites".
#
#   scripts/upstream-natsjs.sh <nats.js checkout or bare git dir> <server binary> <out dir> [tests...]
#
#   DENO=/tmp/deno-npm/node_modules/.bin/deno scripts/upstream-natsjs.sh \
#       /work/.mirror/nats-io+nats.js/repo "$(scripts/target-dir.sh)/debug/jetraft" /tmp/natsjs-jetraft
#   DENO=... scripts/upstream-natsjs.sh <nats.js> .venv/bin/nats-server /tmp/natsjs-ns kv/tests
#
# tests: directories or files relative to the nats.js root (default core/tests jetstream/tests
# kv/tests obj/tests); each entry is one `deno test` run named after its path.
#
# Deno: $DENO, else `deno` on PATH (`npm install --prefix /tmp/deno-npm deno` gives a working one).
# The suites import jsr: packages and jsr.io may be unreachable, so the nats.js deno.json files
# are not used (`--no-config`): an import map generated here maps the workspace's own packages to
# their sources (as the root deno.json's scopes do), @nats-io/nkeys, nuid and jwt and js-sha256 to
# the same versions on npm, and @std/assert, io, bytes, path and fmt/colors to the small
# stand-ins in scripts/upstream-natsjs/. The nats.js files are not modified. Type checking is off
# (--no-check): the stand-ins only promise the runtime behaviour of the functions the tests use.
#
# The suites start `nats-server` from PATH with a config file (random ports, read back from the
# ports_file_dir file; a few tests use port 4222 or demo.nats.io). So:
# - a shim named `nats-server` (first on PATH) execs a copy of the given binary under that name
#   with the same arguments, and copies its output to <out dir>/server.log;
# - modules are cached first (npm needs the network), then `deno test --cached-only` runs in a
#   private network namespace with only loopback up (`unshare -n`: root, or run the script under
#   `unshare -r`), so port 4222 collides with nothing and demo.nats.io is unreachable for both
#   servers alike.
# FILTER=<text or /regex/> runs only the tests whose names match (deno test --filter).
# Test files run one at a time (JOBS=n passes --parallel with DENO_JOBS=n). Each test is bounded
# by $NATSJS_TEST_TIMEOUT seconds (default 180; scripts/upstream-natsjs/timeout.ts, preloaded,
# fails it with "timed out"), each entry by $SUITE_TIMEOUT seconds (default 3600); servers left
# running after an entry are stopped. Results: <out dir>/<name>.xml (JUnit),
# <out dir>/<name>.log (deno's output), and a passed/failed/ignored line per entry on stdout.
set -euo pipefail

if [[ $# -lt 3 ]]; then
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
src=$1
server_bin=$(realpath "$2")
out=$(realpath -m "$3")
shift 3
entries=("$@")
[[ ${#entries[@]} -gt 0 ]] || entries=(core/tests jetstream/tests kv/tests obj/tests)

repo_root=$(cd "$(dirname "$0")/.." && pwd)
shims=$repo_root/scripts/upstream-natsjs
deno=${DENO:-$(command -v deno || true)}
[[ -n $deno && -x $deno ]] || { echo "no deno (set DENO)" >&2; exit 2; }
deno=$(realpath "$deno")
[[ -x $server_bin ]] || { echo "not an executable: $server_bin" >&2; exit 2; }
suite_timeout=${SUITE_TIMEOUT:-3600}
jobs=${JOBS:-1}
filter=${FILTER:-}

work=$(mktemp -d /tmp/upstream-natsjs.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# A bare git dir (the mirror) is exported at HEAD; a checkout is used where it is.
if [[ -d $src/core/tests ]]; then
    checkout=$(realpath "$src")
    commit=$(git -C "$checkout" rev-parse HEAD 2>/dev/null || echo unknown)
else
    checkout=$work/nats.js
    mkdir -p "$checkout"
    git --git-dir="$src" archive HEAD | tar -x -C "$checkout"
    commit=$(git --git-dir="$src" rev-parse HEAD)
fi
echo "nats.js $commit; server $server_bin ($("$server_bin" --version 2>&1 | head -1)); $("$deno" --version | head -1)"

# The import map: addresses are absolute file URLs, so it can live in the work dir.
n="file://$checkout"
s="file://$shims"
pkgs=""
for p in nats-core:core transport-deno:transport-deno jetstream:jetstream kv:kv obj:obj \
    services:services; do
    name=${p%%:*}
    dir=${p#*:}
    pkgs+="    \"@nats-io/$name\": \"$n/$dir/src/mod.ts\",
"
    [[ -f $checkout/$dir/src/internal_mod.ts ]] &&
        pkgs+="    \"@nats-io/$name/internal\": \"$n/$dir/src/internal_mod.ts\",
"
done
scopes=""
for t in core/tests core/unsafe_tests jetstream/tests kv/tests obj/tests services/tests \
    transport-deno/tests; do
    nst=${t%%/*}/tests/nst.ts
    [[ -f $checkout/$nst ]] || continue
    scopes+="${scopes:+,
}    \"$n/$t/\": { \"nst\": \"$n/$nst\" }"
done
cat >"$work/import_map.json" <<JSON
{
  "imports": {
$pkgs    "@nats-io/nst": "$n/nst/src/mod.ts",
    "nst": "$n/nst/src/mod.ts",
    "@nats-io/nkeys": "npm:@nats-io/nkeys@2.0.3",
    "@nats-io/nuid": "npm:@nats-io/nuid@3.0.0",
    "@nats-io/jwt": "npm:@nats-io/jwt@0.0.11",
    "js-sha256": "npm:js-sha256@0.11.1",
    "@std/assert": "$s/assert.ts",
    "@std/io": "$s/io.ts",
    "@std/bytes": "$s/bytes.ts",
    "@std/path": "$s/path.ts",
    "@std/fmt/colors": "$s/colors.ts"
  },
  "scopes": {
$scopes
  }
}
JSON
cp "$work/import_map.json" "$out/import_map.json"

# The shim execs a copy of the binary (a rebuild during the run changes nothing) under the name
# nats-server: the launcher reads nats-server_<pid>.ports, the pid being the one it spawned.
mkdir -p "$work/bin"
cp "$server_bin" "$work/server"
cat >"$work/bin/nats-server" <<SH
#!/usr/bin/env bash
echo "== \$(date -u +%H:%M:%S.%N) nats-server \$*" >>"$out/server.log"
echo \$\$ >>"$work/pids"
exec -a nats-server "$work/server" "\$@" > >(tee -a "$out/server.log") 2> >(tee -a "$out/server.log" >&2)
SH
chmod +x "$work/bin/nats-server"
: >"$out/server.log"

deno_flags=(--no-config --import-map="$work/import_map.json" --no-check)
files=()
for e in "${entries[@]}"; do
    [[ -e $checkout/$e ]] || { echo "no such test path: $e" >&2; exit 2; }
    while IFS= read -r f; do files+=("$f"); done < <(
        if [[ -d $checkout/$e ]]; then find "$checkout/$e" -maxdepth 1 -name '*_test.ts' | sort
        else echo "$checkout/$e"; fi)
done
# Fetch the npm packages while the network is there.
(cd "$checkout" && "$deno" cache "${deno_flags[@]}" "${files[@]}") >"$out/cache.log" 2>&1 ||
    { cat "$out/cache.log" >&2; exit 1; }

cat >"$work/run.sh" <<SH
#!/usr/bin/env bash
ip link set lo up
export PATH="$work/bin:\$PATH" NO_COLOR=1 DENO_JOBS=$jobs
cd "$checkout"
status=0
for e in ${entries[*]}; do
    name=\${e//\//_}
    name=\${name%.ts}
    par=()
    [[ -n "$filter" ]] && par+=(--filter "$filter")
    [[ $jobs -gt 1 ]] && par+=(--parallel)
    timeout -k 30 $suite_timeout "$deno" test -A ${deno_flags[*]} --preload="$shims/timeout.ts" --cached-only "\${par[@]}" \\
        --reporter=pretty --junit-path="$out/\$name.xml" "\$e" >"$out/\$name.log" 2>&1 || status=1
    # Servers a hung or timed-out test left behind (only the ones the shim started).
    if [[ -f "$work/pids" ]]; then
        while read -r pid; do
            [[ \$(cat /proc/\$pid/comm 2>/dev/null) == server ]] && kill \$pid 2>/dev/null || true
        done <"$work/pids"
        : >"$work/pids"
    fi
    python3 - "$out/\$name.xml" "\$e" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception as e:
    print(f"{sys.argv[2]}: no JUnit file ({e})"); sys.exit(0)
p = f = s = 0
for tc in root.iter("testcase"):
    if tc.find("failure") is not None or tc.find("error") is not None: f += 1
    elif tc.find("skipped") is not None: s += 1
    else: p += 1
print(f"{sys.argv[2]}: {p} passed, {f} failed, {s} ignored")
PY
done
exit \$status
SH
chmod +x "$work/run.sh"
unshare -n "$work/run.sh"
