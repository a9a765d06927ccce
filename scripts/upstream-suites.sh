#!/usr/bin/env bash
# Runs nats.py's own test suites against a server binary as if it were nats-server. Not part of
# CI (the suites' source is not in this repository); fills the README's "Upstream client suites".
#
#   scripts/upstream-suites.sh <nats.py checkout or bare git dir> <server binary> <out dir> [tests...]
#
#   scripts/upstream-suites.sh /work/.mirror/nats-io+nats.py/repo \
#       "$(scripts/target-dir.sh)/debug/jetraft" /tmp/upstream-jetraft test_js.py test_client.py
#   PYTHON=/tmp/py313/bin/python scripts/upstream-suites.sh /work/.mirror/nats-io+nats.py/repo \
#       .venv/bin/nats-server /tmp/upstream-nats-server nats-core/tests nats-jetstream/tests
#
# tests: file names of nats/tests (the nats-py client; default test_js.py and test_client.py,
# `file::Class::test` works too), or paths from the checkout's root for the v2 packages
# (nats-core/tests, nats-jetstream/tests, nats-key-value/tests; nats-core needs Python 3.13).
#
# The suites start `nats-server` from PATH, nats/tests on fixed ports (4222-4225, 6223-6225,
# 8222-8225), the v2 packages on random ones (they read the port from the server's log). So:
# - a shim named `nats-server` (first on PATH) execs a copy of the given binary under that name
#   with the same arguments, and copies its output to <out dir>/server.log;
# - pytest runs in a private network namespace with only loopback up (`unshare -n`: root, or
#   run the script under `unshare -r`), so the fixed ports collide with nothing on the machine.
# Python: $PYTHON (default this repository's .venv) with pytest and pytest-asyncio; the tests of
# nkeys, websocket and aiofiles skip themselves unless it also has them (`python3 -m venv v &&
# v/bin/pip install pytest pytest-asyncio nkeys aiohttp aiofiles websockets`). The checkout's
# client comes first on PYTHONPATH. NATS_SERVER_VERSION defaults to `main` (the TLS handshake
# first tests skip themselves without it). Each entry is bounded by $SUITE_TIMEOUT seconds
# (default 1800). Results: <out dir>/<name>.xml (JUnit), <out dir>/<name>.log (pytest's output,
# one line per test), and pytest's summary line per entry on stdout.
set -euo pipefail

if [[ $# -lt 3 ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
src=$1
server_bin=$(realpath "$2")
out=$(realpath -m "$3")
shift 3
files=("$@")
[[ ${#files[@]} -gt 0 ]] || files=(test_js.py test_client.py)

repo_root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo_root/.venv/bin/python}
[[ -x $python ]] || { echo "no Python at $python (set PYTHON)" >&2; exit 2; }
suite_timeout=${SUITE_TIMEOUT:-1800}
[[ -x $server_bin ]] || { echo "not an executable: $server_bin" >&2; exit 2; }

work=$(mktemp -d /tmp/upstream-suites.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# A bare git dir (the mirror) is exported at HEAD; a checkout is used where it is.
if [[ -d $src/nats/tests ]]; then
    checkout=$(realpath "$src")
    commit=$(git -C "$checkout" rev-parse HEAD 2>/dev/null || echo unknown)
else
    checkout=$work/nats.py
    mkdir -p "$checkout"
    git --git-dir="$src" archive HEAD | tar -x -C "$checkout"
    commit=$(git --git-dir="$src" rev-parse HEAD)
fi
echo "nats.py $commit; server $server_bin ($("$server_bin" --version 2>&1 | head -1))"

# The shim execs a copy of the binary (a rebuild during the run changes nothing) under the name
# nats-server (its ports file is then nats-server_<pid>.ports) and copies its output to
# server.log while passing it on (the v2 packages' launcher reads the log lines on stderr).
mkdir -p "$work/bin"
cp "$server_bin" "$work/server"
cat >"$work/bin/nats-server" <<EOF
#!/usr/bin/env bash
echo "== \$(date -u +%H:%M:%S.%N) nats-server \$*" >>"$out/server.log"
exec -a nats-server "$work/server" "\$@" > >(tee -a "$out/server.log") 2> >(tee -a "$out/server.log" >&2)
EOF
chmod +x "$work/bin/nats-server"
: >"$out/server.log"

# Inside the namespace: loopback up, then each entry under its own time bound, from where
# nats.py's CI runs it (config files name certificates by relative paths, and the object store
# tests upload README.md and pyproject.toml): nats/tests from the checkout's root, a v2
# package's tests from the package's directory. pytest is started from Python with unittest.mock
# imported first (a test of test_js.py uses it without importing it).
status=0
for f in "${files[@]}"; do
    name=${f%.py}
    name=${name//[^A-Za-z0-9_]/_}
    # A bare file name is one of nats/tests (the nats-py client); a path is relative to the
    # checkout, e.g. nats-jetstream/tests: the v2 packages (nats-core, nats-jetstream,
    # nats-key-value, with nats-server's launcher; Python 3.13 for nats-core).
    if [[ $f == */* ]]; then
        target=$checkout/$f
        cwd=$checkout/${f%%/*}
        pythonpath=$checkout/nats-core/src:$checkout/nats-jetstream/src:$checkout/nats-key-value/src:$checkout/nats-server/src
    else
        target=$checkout/nats/tests/$f
        cwd=$checkout
        pythonpath=$checkout/nats/src:$checkout/nats
    fi
    set +e
    unshare -n -- sh -c '
        ip link set lo up || exit 3
        cd "$1" && shift
        exec timeout -k 10 "$@"
    ' sh "$cwd" "$suite_timeout" \
        env PATH="$work/bin:$PATH" NATS_SERVER_VERSION="${NATS_SERVER_VERSION:-main}" PYTHONPATH="$pythonpath" \
        "$python" -c 'import sys, unittest.mock, pytest; sys.exit(pytest.main(sys.argv[1:]))' \
        -p no:cacheprovider -rfEs -v --tb=short \
        --rootdir "$checkout" --junitxml "$out/$name.xml" \
        "$target" >"$out/$name.log" 2>&1
    rc=$?
    set -e
    summary=$(grep -E "^=+ .* in [0-9.]+s" "$out/$name.log" | tail -n 1)
    echo "$f: exit $rc: $summary"
    [[ $rc -eq 0 ]] || status=1
done
exit $status
